"""Control tasks on gymnasium's classic-control environments (CartPole-v1, Acrobot-v1).

A group is G episodes that start from the same seeded reset; they run in lockstep so the policy sees one
(G * groups, obs_dim) batch per step, and the environments are stepped as one batch too (gymnasium's
vectorized CartPole, else its SyncVectorEnv; see grpo_edge/tasks/vector_env.py).
"""
import numpy as np
import torch

from grpo_edge.core.rollout import rollout_lockstep
from grpo_edge.tasks.base import Task


class ControlTask(Task):
    """A gymnasium environment with a discrete action space.

    Config keys (task section):
      env_id         gymnasium id (default: the task's environment)
      max_steps      cap on episode length during training and evaluation
      eval_episodes  greedy episodes per evaluation (default 100)
      env_kwargs     extra keyword arguments for gymnasium.make
    """
    kind = "control"
    metric_name = "return"
    default_arch = "mlp"
    archs = ("mlp",)                       # vector observations -> action logits
    ranges = {"max_steps": (1, None, True), "eval_episodes": (1, None, True)}
    types = {"env_id": str}                # keys whose default is None
    env_id = "CartPole-v1"
    defaults = {"env_id": None, "max_steps": 500, "eval_episodes": 100, "env_kwargs": {}}

    def __init__(self, cfg, seed=0):
        super().__init__(cfg, seed)
        import gymnasium as gym
        self._gym = gym
        self.env_id = cfg.get("env_id") or self.env_id
        self.max_steps = int(cfg.get("max_steps", 500))
        self.eval_episodes = int(cfg.get("eval_episodes", 100))
        self.env_kwargs = dict(cfg.get("env_kwargs") or {})
        probe = self._make()
        if not hasattr(probe.action_space, "n"):
            raise ValueError("task %s: %s has no discrete action space" % (self.name, self.env_id))
        self.obs_dim = int(np.prod(probe.observation_space.shape))
        self.n_actions = int(probe.action_space.n)
        probe.close()
        self._lockstep = {}       # number of environments -> batched environments (training, evaluation)
        self._eval_seed_base = 10_000_000 + seed * 1000  # evaluation resets never overlap training's
        self._rng = np.random.RandomState(seed)

    def _make(self):
        return self._gym.make(self.env_id, **self.env_kwargs)

    def _batched_envs(self, n):
        if n not in self._lockstep:
            from grpo_edge.tasks.vector_env import lockstep_envs
            self._lockstep[n] = lockstep_envs(self._gym, self.env_id, n, self.env_kwargs)
        return self._lockstep[n]

    def model_kwargs(self):
        return {"obs_dim": self.obs_dim, "n_actions": self.n_actions}

    def checkpoint_meta(self):
        return {"env_id": self.env_id, "obs_dim": self.obs_dim, "n_actions": self.n_actions,
                "input_shape": [self.obs_dim], "input_dtype": "float32", "max_steps": self.max_steps}

    def rollout(self, policy, num_groups, group_size, generator=None):
        seeds = self._rng.randint(0, 2 ** 31 - 1, size=num_groups)
        device = next(policy.parameters()).device
        env_seeds = np.repeat(seeds, group_size)
        return rollout_lockstep(policy, self._batched_envs(len(env_seeds)), env_seeds, group_size,
                                self.max_steps, device=device)

    def logprobs(self, policy, rollout):
        """(logp, entropy), each (N, T), computed on the real steps only (episodes of one batch differ
        in length by up to 50x, so most of the padded (N, T) grid can be padding). At padding, logp is
        old_logp (a ratio of 1, no gradient) and entropy is 0; the losses mask both out."""
        obs = rollout.inputs["obs"]                                # (N, T, obs_dim)
        n, t, d = obs.shape
        real = (rollout.mask.reshape(-1) > 0).nonzero().squeeze(1)           # (R,)
        logp_all = torch.log_softmax(policy(obs.reshape(n * t, d)[real]), dim=-1)   # (R, A)
        logp_r = logp_all.gather(-1, rollout.actions.reshape(-1)[real].unsqueeze(-1)).squeeze(-1)
        ent_r = -(logp_all.exp() * logp_all).sum(-1)
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
        device = next(policy.parameters()).device
        was_training = policy.training
        policy.eval()
        seeds = [self._eval_seed_base + i for i in range(n)]
        ro = rollout_lockstep(policy, self._batched_envs(n), seeds, 1, self.max_steps, device=device,
                              greedy=greedy)
        policy.train(was_training)
        returns = ro.rewards.numpy()
        return {"return": float(returns.mean()), "return_std": float(returns.std()),
                "episode_length": float(ro.mask.sum(1).mean()), "n": n}

    def calibration_inputs(self, n, policy=None, episodes: int = 8):
        """Observations visited by `policy` (or by random actions), float32 (n, obs_dim).

        Every k-th step is kept, k chosen so that the n states span about `episodes` full-length
        episodes: consecutive states of one episode would cover only its own stretch of the state space
        (a balancing cart drifts; 512 consecutive CartPole states are one episode)."""
        rng = np.random.RandomState(self.seed + 1)
        env = self._make()
        stride = max(1, -(-episodes * self.max_steps // max(int(n), 1)))
        out, t = [], 0
        obs, _ = env.reset(seed=int(rng.randint(2 ** 31 - 1)))
        while len(out) < n:
            if t % stride == 0:
                out.append(np.asarray(obs, dtype=np.float32))
            t += 1
            if policy is not None:
                with torch.no_grad():
                    a = int(policy(torch.as_tensor(obs, dtype=torch.float32)[None]).argmax(-1))
            else:
                a = int(rng.randint(self.n_actions))
            obs, _, term, trunc, _ = env.step(a)
            if term or trunc:
                obs, _ = env.reset(seed=int(rng.randint(2 ** 31 - 1)))
        return np.stack(out)


class CartPoleTask(ControlTask):
    """CartPole-v1: balance a pole; return 500 is the maximum, >= 475 counts as solved."""
    name = "cartpole"
    env_id = "CartPole-v1"
    defaults = {"env_id": None, "max_steps": 500, "eval_episodes": 100, "env_kwargs": {}}


class AcrobotTask(ControlTask):
    """Acrobot-v1: swing the end up; returns are negative step counts (-500 worst, about -60 good)."""
    name = "acrobot"
    env_id = "Acrobot-v1"
    defaults = {"env_id": None, "max_steps": 500, "eval_episodes": 100, "env_kwargs": {}}
