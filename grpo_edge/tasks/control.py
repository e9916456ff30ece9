"""Control tasks on gymnasium environments: the built-in cartpole and acrobot, and any gymnasium id
(`--set task.name=Pendulum-v1`, or `task.env_id`), discrete or continuous actions.

A group is G episodes that start from the same seeded reset; they run in lockstep so the policy sees one
(G * groups, obs_dim) batch per step, and the environments are stepped as one batch too (gymnasium's
vectorized CartPole, else its SyncVectorEnv; see grpo_edge/tasks/vector_env.py).
"""
import numpy as np
import torch

from grpo_edge.core import distributions
from grpo_edge.core.rollout import rollout_lockstep
from grpo_edge.errors import ConfigError, GrpoEdgeError
from grpo_edge.tasks.base import Task


class ControlTask(Task):
    """A gymnasium environment: Box (flattened) or Discrete (one-hot) observations; Discrete actions
    (a categorical policy) or Box actions (a diagonal Gaussian policy, grpo_edge/core/distributions.py).

    Config keys (task section):
      env_id         gymnasium id (default: the task's environment)
      max_steps      cap on episode length during training and evaluation (default: the env's own
                     time limit, spec.max_episode_steps: 1,000 for MuJoCo and LunarLander; else 500)
      eval_episodes  greedy episodes per evaluation (default 100)
      env_kwargs     extra keyword arguments for gymnasium.make
      noise_correlation  continuous actions: the training rollouts' exploration noise correlates by this
                     much from one step to the next (grpo_edge/core/distributions.py, CorrelatedNoise); 0
                     (the default) draws it afresh each step. Evaluation is greedy, without noise.
    """
    kind = "control"
    metric_name = "return"
    default_arch = "mlp"
    archs = ("mlp",)                       # vector observations -> action logits / Gaussian mean
    ranges = {"max_steps": (1, None, True), "eval_episodes": (1, None, True), "noise_correlation": (0, 1, True, False)}
    types = {"env_id": str, "max_steps": int}    # keys whose default is None
    env_id = "CartPole-v1"
    defaults = {"env_id": None, "max_steps": None, "eval_episodes": 100, "env_kwargs": {}, "noise_correlation": 0.0}

    def __init__(self, cfg, seed=0):
        super().__init__(cfg, seed)
        import gymnasium as gym
        self._gym = gym
        self.env_id = cfg.get("env_id") or self.env_id
        self.eval_episodes = int(cfg.get("eval_episodes", 100))
        self.env_kwargs = dict(cfg.get("env_kwargs") or {})
        self.noise_correlation = float(cfg.get("noise_correlation") or 0.0)
        probe = self._make()
        limit = getattr(getattr(probe, "spec", None), "max_episode_steps", None)
        self.max_steps = int(cfg.get("max_steps") or limit or 500)
        self.obs_space = describe_space(probe.observation_space, "observation", self.env_id, ("Box", "Discrete"))
        act = describe_space(probe.action_space, "action", self.env_id, ("Discrete", "Box"))
        check_env_outputs(probe, self.env_id)
        probe.close()
        self.obs_dim = self.obs_space["size"]
        self.continuous = act["kind"] == "Box"
        if self.noise_correlation and not self.continuous:
            raise ConfigError("task.noise_correlation applies to continuous actions; %s's are discrete (%d choices)"
                              % (self.env_id, act["size"]))
        self.n_actions = act["size"]                 # categories, or the action dimension (continuous)
        self.action_low, self.action_high = act.get("low"), act.get("high")
        self.action_start = act.get("start", 0)      # the env's first Discrete action: the policy's action 0
        self._lockstep = {}       # number of environments -> batched environments (training, evaluation)
        self._eval_seed_base = 10_000_000 + seed * 1000  # evaluation resets never overlap training's
        self._rng = np.random.RandomState(seed)

    @property
    def slug(self):
        """The name for files, reports and C symbols: a built-in task on its own environment keeps its name
        ('cartpole'); any other environment is named after its id ('Pendulum-v1' -> 'pendulum_v1')."""
        if type(self).env_id == self.env_id and self.name not in (None, "gym"):
            return self.name.replace("-", "_")
        return env_slug(self.env_id)

    def _bounds(self):
        return distributions.action_bounds(self)

    @property
    def display_name(self):
        """What printouts call the task: its environment when that is not the task's own (task.env_id)."""
        return self.name if type(self).env_id == self.env_id else self.env_id

    def _make(self):
        return make_env(self._gym, self.env_id, self.env_kwargs)

    def _batched_envs(self, n):
        if n not in self._lockstep:
            from grpo_edge.tasks.vector_env import lockstep_envs
            envs = lockstep_envs(self._gym, registered_id(self._gym, self.env_id), n, self.env_kwargs)
            self._lockstep[n] = ObservationAdapter(envs, self.obs_space, self.env_id, self.action_start)
        return self._lockstep[n]

    def model_kwargs(self):
        kw = {"obs_dim": self.obs_dim, "n_actions": self.n_actions}
        if self.continuous:
            kw.update(continuous=True, action_low=self.action_low, action_high=self.action_high)
        return kw

    def checkpoint_meta(self):
        meta = {"env_id": self.env_id, "env_kwargs": self.env_kwargs, "obs_dim": self.obs_dim,
                "n_actions": self.n_actions, "input_shape": [self.obs_dim], "input_dtype": "float32",
                "max_steps": self.max_steps, "observation_space": self.obs_space["kind"], "slug": self.slug}
        if self.continuous:
            meta.update(action_space="Box", action_low=self.action_low, action_high=self.action_high)
        elif self.action_start:
            meta.update(action_start=self.action_start)   # the env's action = the model's argmax + this
        return meta

    def rollout(self, policy, num_groups, group_size, generator=None):
        seeds = self._rng.randint(0, 2 ** 31 - 1, size=num_groups)
        device = next(policy.parameters()).device
        env_seeds = np.repeat(seeds, group_size)
        return rollout_lockstep(policy, self._batched_envs(len(env_seeds)), env_seeds, group_size,
                                self.max_steps, device=device, action_bounds=self._bounds(),
                                noise_correlation=self.noise_correlation)

    def logprobs(self, policy, rollout):
        """(logp, entropy), each (N, T), computed on the real steps only (episodes of one batch differ
        in length by up to 50x, so most of the padded (N, T) grid can be padding). At padding, logp is
        old_logp (a ratio of 1, no gradient) and entropy is 0; the losses mask both out."""
        obs = rollout.inputs["obs"]                                # (N, T, obs_dim)
        n, t, d = obs.shape
        real = (rollout.mask.reshape(-1) > 0).nonzero().squeeze(1)           # (R,)
        actions = rollout.actions.reshape((n * t,) + tuple(rollout.actions.shape[2:]))[real]   # (R,) or (R, A)
        logp_r, ent_r = distributions.logp_entropy(policy, policy(obs.reshape(n * t, d)[real]), actions)
        logp = rollout.old_logp.reshape(-1).detach().to(logp_r.dtype).index_put((real,), logp_r)
        entropy = logp_r.new_zeros(n * t).index_put((real,), ent_r)
        return logp.reshape(n, t), entropy.reshape(n, t)

    def values(self, critic, rollout):
        obs = rollout.inputs["obs"]
        n, t, d = obs.shape
        return critic(obs.reshape(n * t, d)).reshape(n, t)

    def evaluate(self, policy, split="test", n=0, greedy=True):
        """Mean return of `n` greedy episodes (default eval_episodes) from fixed held-out seeds."""
        n = n or self.eval_episodes
        ro = self._eval_episodes(policy, n, greedy)
        returns = ro.rewards.numpy()
        return {"return": float(returns.mean()), "return_std": float(returns.std()),
                "episode_length": float(ro.mask.sum(1).mean()), "n": n}

    def _eval_episodes(self, policy, n, greedy):
        """The rollout of the first n held-out evaluation episodes (fixed seeds, never training's)."""
        device = next(policy.parameters()).device
        was_training = policy.training
        policy.eval()
        seeds = [self._eval_seed_base + i for i in range(n)]
        ro = rollout_lockstep(policy, self._batched_envs(n), seeds, 1, self.max_steps, device=device,
                              greedy=greedy, action_bounds=self._bounds())
        policy.train(was_training)
        return ro

    def examples(self, policy, split="test", k=3):
        """The first k greedy evaluation episodes (the same held-out start states as evaluate): the seed, the
        start observation, the return and the length of each."""
        seeds = [self._eval_seed_base + i for i in range(k)]
        ro = self._eval_episodes(policy, k, True)
        starts = []
        for seed in seeds:
            env = self._make()
            obs, _ = env.reset(seed=seed)
            env.close()
            starts.append(np.round(np.asarray(obs, dtype=np.float64).reshape(-1)[:6], 3).tolist())
        return [{"episode": i + 1, "seed": s, "start": start, "return": float(ret), "length": int(length)}
                for i, (s, start, ret, length) in enumerate(zip(seeds, starts, ro.rewards.numpy().reshape(-1),
                                                               ro.mask.sum(1).numpy().reshape(-1)))]

    def calibration_inputs(self, n, policy=None, episodes: int = 8):
        """Observations visited by `policy` (or by random actions), float32 (n, obs_dim).

        Every k-th step is kept, k chosen so that the n states span about `episodes` full-length
        episodes: consecutive states of one episode would cover only its own stretch of the state space
        (a balancing cart drifts; 512 consecutive CartPole states are one episode)."""
        rng = np.random.RandomState(self.seed + 1)
        env = self._make()
        stride = max(1, -(-episodes * self.max_steps // max(int(n), 1)))
        out, t = [], 0
        env.action_space.seed(int(rng.randint(2 ** 31 - 1)))
        encode = ObservationAdapter(None, self.obs_space, self.env_id).encode
        obs, _ = env.reset(seed=int(rng.randint(2 ** 31 - 1)))
        obs = encode(np.asarray(obs)[None])[0]
        while len(out) < n:
            if t % stride == 0:
                out.append(obs)
            t += 1
            if policy is not None:
                with torch.no_grad():
                    a, _ = distributions.sample(policy, policy(torch.as_tensor(obs)[None]), greedy=True,
                                               continuous=self.continuous)
                a = a[0].numpy()
                a = distributions.clip_to_bounds(a, *self._bounds()) if self.continuous else int(a) + self.action_start
            else:
                a = env.action_space.sample()
            obs, _, term, trunc, _ = env.step(a)
            obs = encode(np.asarray(obs)[None])[0]
            if term or trunc:
                obs, _ = env.reset(seed=int(rng.randint(2 ** 31 - 1)))
                obs = encode(np.asarray(obs)[None])[0]
        return np.stack(out)


class CartPoleTask(ControlTask):
    """CartPole-v1: balance a pole; return 500 is the maximum, >= 475 counts as solved."""
    name = "cartpole"
    env_id = "CartPole-v1"
    defaults = {"env_id": None, "max_steps": None, "eval_episodes": 100, "env_kwargs": {}}


class AcrobotTask(ControlTask):
    """Acrobot-v1: swing the end up; returns are negative step counts (-500 worst, about -60 good)."""
    name = "acrobot"
    env_id = "Acrobot-v1"
    defaults = {"env_id": None, "max_steps": None, "eval_episodes": 100, "env_kwargs": {}}


class GymTask(ControlTask):
    """Any registered gymnasium environment, named by its id (`task.name: Pendulum-v1`)."""
    name = "gym"
    env_id = None

    def __init__(self, cfg, seed=0, env_id=None):
        cfg = dict(cfg)
        if env_id and not cfg.get("env_id"):
            cfg["env_id"] = env_id
        if not cfg.get("env_id"):
            raise ConfigError("task gym needs task.env_id (a gymnasium id such as Pendulum-v1)")
        super().__init__(cfg, seed)
        self.name = self.env_id


# ---------------------------------------------------------------------------------------------- helpers
def env_slug(env_id):
    """'Pendulum-v1' -> 'pendulum_v1', 'ALE/Pong-v5' -> 'ale_pong_v5': a name for files and C symbols."""
    import re
    s = re.sub(r"[^0-9a-zA-Z]+", "_", str(env_id)).strip("_").lower()[:28].strip("_")    # C prefixes: <= 32
    return ("env_" + s) if not s or s[0].isdigit() else s


def close_gym_ids(gym, env_id):
    """Up to 3 registered gymnasium ids close to `env_id` (for 'did you mean')."""
    import difflib
    return difflib.get_close_matches(str(env_id), sorted(gym.registry.keys()), n=3, cutoff=0.6)


def unknown_env(gym, env_id):
    """A ConfigError for an unregistered gymnasium id, with the closest registered ones."""
    close = close_gym_ids(gym, env_id)
    hint = (" (did you mean %s?)" % ", ".join(close)) if close else " (`python -c \"import gymnasium; " \
        "print(list(gymnasium.registry))\"` lists them)"
    return ConfigError("unknown gymnasium environment %r%s" % (env_id, hint))


# the pip extra of gymnasium that brings an environment family's dependency: a word of the error or of the
# environment's entry point -> the extra
_EXTRAS = (("box2d", "box2d"), ("mujoco", "mujoco"), ("imageio", "mujoco"), ("ale_py", "atari"),
           ("atari", "atari"), ("pygame", "classic-control"))


def registered_id(gym, env_id):
    """The gymnasium id to make for `env_id`: a registered id as it is; 'module:Id' (gymnasium's convention:
    the module registers Id on import) -> Id; 'module:EnvClass' (a gymnasium Env subclass) -> an id this
    function registers for the class, 'grpo_edge_user/module.EnvClass-v0'."""
    if ":" not in env_id:
        return env_id
    from grpo_edge.tasks.user_code import import_user_object
    obj = import_user_object(env_id)
    module, name = env_id.split(":", 1)
    if isinstance(obj, str):
        return name
    if not (is_env_class(obj) or is_env_like(obj)):
        raise ConfigError("%s is not a gymnasium Env class (nor a gymnasium id its module registers)" % env_id)
    gid = "grpo_edge_user/%s.%s-v0" % (module, name)
    if gid not in gym.registry:
        gym.register(id=gid, entry_point=obj if is_env_class(obj) else gym_adapter(obj))
    return gid


def is_env_like(obj):
    """A plain class with gymnasium-API reset / step that does not inherit gymnasium.Env (the online trainer's
    NumPy envs, grpo_edge/online/envs.py, which must import without gymnasium on a Jetson)."""
    return (isinstance(obj, type) and all(callable(getattr(obj, a, None)) for a in ("reset", "step"))
            and not hasattr(obj, "rollout"))


def gym_adapter(cls):
    """A gymnasium.Env class around `cls` (is_env_like): its spaces become gymnasium's (an object with `n` a
    Discrete, one with `shape` [and `low` / `high`] a float32 Box); reset / step / close are passed through."""
    import gymnasium

    def space(env, what):
        sp = getattr(env, what, None)
        if sp is None:
            raise ValueError("%s has no %s: a gymnasium-API env declares observation_space and action_space "
                             "(gymnasium spaces, or objects with shape / n)" % (cls.__name__, what))
        if isinstance(sp, gymnasium.spaces.Space):
            return sp
        if getattr(sp, "n", None) is not None:
            return gymnasium.spaces.Discrete(int(sp.n))
        shape = tuple(int(d) for d in getattr(sp, "shape", ()))
        low = np.broadcast_to(np.asarray(getattr(sp, "low", -np.inf), np.float32), shape)
        high = np.broadcast_to(np.asarray(getattr(sp, "high", np.inf), np.float32), shape)
        return gymnasium.spaces.Box(low=low, high=high, shape=shape, dtype=np.float32)

    class Adapted(gymnasium.Env):
        def __init__(self, **kwargs):
            self.env = cls(**kwargs)
            self.observation_space = space(self.env, "observation_space")
            self.action_space = space(self.env, "action_space")

        def reset(self, seed=None, options=None):
            return self.env.reset(seed=seed) if options is None else self.env.reset(seed=seed, options=options)

        def step(self, action):
            return self.env.step(action)

        def close(self):
            getattr(self.env, "close", lambda: None)()
    Adapted.__name__ = Adapted.__qualname__ = cls.__name__
    return Adapted


def is_env_class(obj):
    """A gymnasium Env subclass (what gymnasium.make builds)."""
    try:
        import gymnasium
    except ImportError:
        return False
    return isinstance(obj, type) and issubclass(obj, gymnasium.Env)


def make_env(gym, env_id, env_kwargs):
    """gym.make with one-line errors: an unknown id (close matches), a missing extra (its pip name), bad
    keyword arguments, an environment whose constructor or reset fails."""
    gid = registered_id(gym, env_id)
    if gid not in gym.registry:
        raise unknown_env(gym, env_id)
    try:
        return gym.make(gid, **env_kwargs)
    except (gym.error.DependencyNotInstalled, ImportError) as e:
        entry = str(getattr(gym.spec(gid), "entry_point", "")).lower()
        msg = str(e).lower() + " " + entry
        extra = next((x for key, x in _EXTRAS if key in msg), None)
        how = ('pip install "gymnasium[%s]"' % extra) if extra else "install the package gymnasium names"
        if extra == "box2d":        # gymnasium[box2d] builds box2d-py from source (swig, a C++ compiler); this is a wheel
            how = 'pip install box2d (or pip install -e ".[box2d]" in grpo-edge\'s checkout)'

        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError("gymnasium environment %s needs a package that is not installed: %s (%s)"
                          % (env_id, how, first[:160]))
    except TypeError as e:
        raise ConfigError("task.env_kwargs for %s: %s" % (env_id, str(e).strip().splitlines()[0].split(" was raised")[0]))
    except Exception as e:  # the user's environment class: its own error, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError("environment %s could not be built: %s: %s" % (env_id, type(e).__name__, first[:200]))


def check_env_outputs(env, env_id):
    """One reset and one random step of `env`: its own failure, a step that does not return gymnasium's five
    values, or an observation of another shape than its observation_space, as one line naming the env."""
    import warnings

    def call(what, fn, *args, **kwargs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")       # gymnasium's env checker: our own line says it better
                return fn(*args, **kwargs)
        except GrpoEdgeError:
            raise
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise GrpoEdgeError("environment %s failed in %s: %s%s" % (env_id, what, type(e).__name__,
                                                                   (": " + first[:200]) if first else ""))

    def check_obs(what, obs):
        want = tuple(env.observation_space.shape or ())
        got = np.shape(obs)
        if type(env.observation_space).__name__ == "Box" and got != want:
            raise ConfigError("environment %s: %s returned an observation of shape %s; its observation_space "
                              "is a Box of shape %s" % (env_id, what, got, want))

    out = call("reset", env.reset, seed=0)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ConfigError("environment %s: reset must return (observation, info), got %s"
                          % (env_id, type(out).__name__ if not isinstance(out, tuple) else "%d values" % len(out)))
    check_obs("reset", out[0])
    out = call("step", env.step, env.action_space.sample())
    if not (isinstance(out, tuple) and len(out) == 5):
        raise ConfigError("environment %s: step must return (observation, reward, terminated, truncated, info), "
                          "got %s" % (env_id, type(out).__name__ if not isinstance(out, tuple)
                                      else "%d values" % len(out)))
    check_obs("step", out[0])


def describe_space(space, what, env_id, allowed):
    """{'kind', 'size'[, 'low', 'high']} of a gymnasium space the policy can take, else a ConfigError
    naming it. Observations: Box (flattened) or Discrete (one-hot); actions: Discrete or a 1-D Box."""
    kind = type(space).__name__
    if kind not in allowed:
        raise ConfigError("%s's %s space is %s, which grpo-edge does not support (it takes %s)"
                          % (env_id, what, kind, " or ".join(allowed)))
    if kind == "Discrete":                # values start..start+n-1 (gymnasium's Discrete(n, start=...))
        return {"kind": kind, "size": int(space.n), "start": int(getattr(space, "start", 0))}
    shape = tuple(space.shape or ())
    if what == "action" and len(shape) != 1:
        raise ConfigError("%s's action space is a Box of shape %s; grpo-edge takes 1-D Box actions"
                          % (env_id, shape))
    out = {"kind": kind, "size": int(np.prod(shape)) if shape else 1}
    if what == "action":
        out["low"] = [float(v) for v in np.asarray(space.low, np.float64).reshape(-1)]
        out["high"] = [float(v) for v in np.asarray(space.high, np.float64).reshape(-1)]
    return out


class ObservationAdapter(object):
    """Batched environments whose observations reach the policy as float32 (n, obs_dim): Box flattened,
    Discrete one-hot. A non-finite observation stops the run with one line naming the environment."""

    def __init__(self, envs, obs_space, env_id, action_start=0):
        self.envs, self.space, self.env_id, self.action_start = envs, obs_space, env_id, action_start

    def encode(self, obs):
        obs = np.asarray(obs)
        n = obs.shape[0]
        if self.space["kind"] == "Discrete":
            out = np.zeros((n, self.space["size"]), np.float32)
            out[np.arange(n), obs.reshape(n).astype(np.int64) - self.space.get("start", 0)] = 1.0
            return out
        out = obs.reshape(n, -1).astype(np.float32)
        if not np.isfinite(out).all():
            from grpo_edge.errors import NonFiniteError
            raise NonFiniteError("%s returned a non-finite observation (NaN or inf): check the environment "
                                 "(task.env_kwargs)" % self.env_id)
        return out

    def reset(self, seeds):
        return self.encode(self._call("reset", self.envs.reset, seeds))

    def step(self, actions):
        if self.action_start:
            actions = np.asarray(actions) + self.action_start
        obs, rew, term, trunc = self._call("step", self.envs.step, actions)
        return self.encode(obs), rew, term, trunc

    def _call(self, what, fn, arg):
        """The environment's own failure, in one line naming it and the call (a user's env raising)."""
        try:
            return fn(arg)
        except GrpoEdgeError:
            raise
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise GrpoEdgeError("environment %s failed in %s: %s%s" % (self.env_id, what, type(e).__name__,
                                                                   (": " + first[:200]) if first else ""))

    def close(self):
        self.envs.close()
