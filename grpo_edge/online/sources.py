"""Where online experience comes from: an environment, or a stream of JSON-lines records.

Python 3.6 + torch 1.10 safe; imports torch, numpy and grpo_edge.core only. Both sources are tasks in the
core Trainer's sense (rollout / logprobs / evaluate / get_state), with one difference that makes online
training safe: the episodes are acted by `self.behaviour`, the SERVED policy, and `old_logp` is the served
policy's log-prob, so the candidate learns off the served policy's experience through the clipped ratio
pi_candidate / pi_served and never acts before it has passed a gate.

Record format of a stream (one JSON object per line, UTF-8; see docs/online.md):

    {"obs": [0.01, -0.2, 0.03, 0.1], "action": 1, "reward": 1.0}
    {"obs": [...], "action": 0, "reward": 1.0, "done": true}          # last step of an episode
    optional: "truncated": true (cut by a time limit, not a failure), "logp": -0.69 (log-prob of the
    action under the policy that acted; default: computed with the served weights), "group": "start-3"

`reward` is what the step earned after `action` was taken in `obs`. An episode ends at a record with
done or truncated true. A group is G episodes: by default G consecutive episodes; with a "group" key,
the G episodes that carry the same key (for instance the same start configuration of a robot).

One policy for every bad record (online.bad_records): a line that is not UTF-8, over the line bound, not
JSON, with a missing or wrong field, or with numbers training cannot use (NaN / inf or |obs| > 1e9 in
float32, |reward| > 1e6, a logp that is not finite or below -50). "drop" (the default): the record's whole
episode is dropped and the reason reported (decisions.jsonl "drop" events, `dropped_episodes`); "stop":
the trainer stops with one line naming it. A connection that resets or ends mid-record is not a bad
record: that connection ends, its episode in progress is dropped, the server keeps listening.
"""
import json
import math
import socket
import sys
from collections import OrderedDict, deque

import numpy as np
import torch

from grpo_edge.core import distributions
from grpo_edge.core.rollout import Rollout, rollout_episodes
from grpo_edge.errors import ConfigError, GrpoEdgeError


class StreamError(GrpoEdgeError):
    """A stream record is malformed (the message names the line)."""


class StreamEnded(Exception):
    """The record stream reached end of file."""


def _rng_to_plain(rng):
    st = rng.get_state()
    return [st[0], torch.as_tensor(st[1].astype("int64")), int(st[2]), int(st[3]), float(st[4])]


def _rng_from_plain(rng, r):
    rng.set_state((r[0], r[1].cpu().numpy().astype("uint32"), r[2], r[3], r[4]))


def policy_logprobs(policy, obs, actions):
    """obs (N, T, d), actions (N, T) long or (N, T, A) float -> (logp (N, T), entropy (N, T)) of a
    vector-observation policy (categorical, or Gaussian: grpo_edge/core/distributions.py)."""
    n, t, d = obs.shape
    out = policy(obs.reshape(n * t, d)).float()                               # (N*T, A)
    flat = actions.reshape((n * t,) + tuple(actions.shape[2:]))
    logp, entropy = distributions.logp_entropy(policy, out, flat)
    return logp.reshape(n, t), entropy.reshape(n, t)


def make_env_factory(spec, kwargs):
    """'package.module:Class' (reset/step in the gymnasium API), 'module:Id' (an id the module registers with
    gymnasium on import) or a gymnasium id -> a function making one env. The current folder is importable."""
    kwargs = dict(kwargs or {})
    if ":" in spec:
        from grpo_edge.tasks.user_code import import_user_object
        try:
            obj = import_user_object(spec)
        except ConfigError as e:
            raise ConfigError("online.env: %s" % e)
        if isinstance(obj, str):                      # 'module:Id': gymnasium makes the id the module registered
            import gymnasium
            return lambda: gymnasium.make(spec.split(":", 1)[1], **kwargs)
        if not callable(obj):
            raise ConfigError("online.env %r is not a class (an env with reset/step)" % spec)
        return lambda: obj(**kwargs)
    try:
        import gymnasium as gym
    except ImportError:
        raise ConfigError("online.env %r looks like a gymnasium id, but gymnasium is not installed here; "
                          "name a class instead, as module:Class (e.g. grpo_edge.online.envs:CartPole)" % spec)
    try:
        gym.spec(spec)
    except Exception as e:
        raise ConfigError("online.env %r is not a registered gymnasium id (%s)" % (spec, str(e).splitlines()[0]))
    return lambda: gym.make(spec, **kwargs)


def _slug(name):
    """'CartPole' -> 'cartpole', 'Pendulum-v1' -> 'pendulum_v1': the name deploy gives files and C symbols."""
    import re
    s = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()[:24].strip("_")
    return ("env_" + s) if not s or s[0].isdigit() else s


class EnvTask(object):
    """Experience from an environment, G episodes per group from the same seeded start, run in lockstep.

    schedule: [[episode_count, {param: value}], ...]: scripted changes of the world for simulation
    studies, applied to every env instance once `episodes` (experience episodes so far) reaches the
    count; through env.set_dynamics(**params) when the env has it, else setattr on env.unwrapped.
    """
    kind = "control"
    metric_name = "return"
    higher_is_better = True

    def __init__(self, spec, factory, max_steps, eval_episodes, seed=0, schedule=None):
        self.name = "online:%s" % spec
        self.spec = spec
        self._factory = factory
        probe = factory()
        if not (hasattr(probe, "reset") and hasattr(probe, "step")):
            raise ConfigError("online.env %r has no reset/step methods" % spec)
        space = getattr(probe, "action_space", None)
        self.continuous = getattr(space, "n", None) is None
        self.action_low = self.action_high = None
        if self.continuous:              # a 1-D Box: a Gaussian policy, actions clipped to the bounds
            shape = tuple(getattr(space, "shape", None) or ())
            if len(shape) != 1 or not hasattr(space, "low"):
                raise ConfigError("online.env %r: online training needs a discrete action space (action_space.n) "
                                  "or a 1-D Box (low, high)" % spec)
            self.action_low = [float(v) for v in np.asarray(space.low, np.float64).reshape(-1)]
            self.action_high = [float(v) for v in np.asarray(space.high, np.float64).reshape(-1)]
        self.obs_dim = int(np.prod(probe.observation_space.shape))
        self.n_actions = int(shape[0]) if self.continuous else int(space.n)
        self.max_steps = int(max_steps)
        self.eval_episodes = int(eval_episodes)
        self.behaviour = None            # the served policy; None: the policy being trained acts
        self.episodes = 0                # experience episodes so far (the schedule's clock)
        self.schedule = sorted(([int(at), dict(params)] for at, params in (schedule or [])), key=lambda e: e[0])
        self._check_schedule()
        self._applied = 0                # schedule entries in effect
        self._envs, self._eval_envs = [], []
        self._rng = np.random.RandomState(seed)
        self._eval_seed_base = 10000000 + 1000 * int(seed)
        self.io_wait = False

    # ---------------------------------------------------------------- environments and the schedule
    def _get(self, pool, n):
        while len(pool) < n:
            env = self._factory()
            for _, params in self.schedule[:self._applied]:
                self._set(env, params)
            pool.append(env)
        return pool[:n]

    def _set(self, env, params):
        if hasattr(env, "set_dynamics"):
            env.set_dynamics(**params)
            return
        target = getattr(env, "unwrapped", env)
        for k, v in params.items():
            if not hasattr(target, k):
                raise ConfigError("online.env_schedule: %s has no attribute %r" % (self.spec, k))
            setattr(target, k, v)

    def _check_schedule(self):
        """Every schedule entry, applied in order to a probe env that then resets and steps: a misspelt parameter
        or an impossible value is one line now, not a traceback after hours of training."""
        if not self.schedule:
            return
        env = self._factory()
        for at, params in self.schedule:
            what = "online.env_schedule entry [%d, %s]" % (at, json.dumps(params))
            if at < 0:
                raise ConfigError("%s: the episode count must be >= 0" % what)
            try:
                self._set(env, params)
                obs, _ = env.reset(seed=0)
                obs = env.step(self._probe_action())[0]
            except ConfigError as e:
                raise ConfigError("%s: %s" % (what, str(e).split(": ", 1)[-1]))
            except Exception as e:
                raise ConfigError("%s: %s" % (what, (str(e).strip().splitlines() or [type(e).__name__])[0]))
            if not np.all(np.isfinite(np.asarray(obs, dtype=np.float64))):
                raise ConfigError("%s: the env's first step after it gives a non-finite observation" % what)

    def _probe_action(self):
        if self.continuous:
            return np.zeros(self.n_actions, dtype=np.float32)
        return 0

    def _apply_schedule(self):
        while self._applied < len(self.schedule) and self.schedule[self._applied][0] <= self.episodes:
            for env in self._envs + self._eval_envs:
                self._set(env, self.schedule[self._applied][1])
            self._applied += 1

    def dynamics(self):
        """The parameters the schedule has changed so far ({} = the env as constructed)."""
        out = {}
        for _, params in self.schedule[:self._applied]:
            out.update(params)
        return out

    def dynamics_phase(self):
        """How many schedule entries are in effect (0 = the original world)."""
        return self._applied

    # ---------------------------------------------------------------- the core Task interface
    def model_kwargs(self):
        kw = {"obs_dim": self.obs_dim, "n_actions": self.n_actions}
        if self.continuous:
            kw.update(continuous=True, action_low=self.action_low, action_high=self.action_high)
        return kw

    def checkpoint_meta(self):
        meta = {"env": self.spec, "obs_dim": self.obs_dim, "n_actions": self.n_actions,
                "input_shape": [self.obs_dim], "input_dtype": "float32", "max_steps": self.max_steps,
                "dynamics": self.dynamics(), "slug": _slug(self.spec.split(":")[-1])}
        if self.continuous:
            meta.update(action_space="Box", action_low=self.action_low, action_high=self.action_high)
        return meta

    def _bounds(self):
        return distributions.action_bounds(self)

    def rollout(self, policy, num_groups, group_size, generator=None):
        """num_groups * G episodes acted by the served policy (or `policy` when no behaviour is set)."""
        actor = self.behaviour if self.behaviour is not None else policy
        self._apply_schedule()
        seeds = self._rng.randint(0, 2 ** 31 - 1, size=num_groups)
        device = next(actor.parameters()).device
        ro = rollout_episodes(actor, self._get(self._envs, num_groups * group_size), seeds, group_size,
                              self.max_steps, device=device, action_bounds=self._bounds())
        self.episodes += num_groups * group_size
        return ro

    def logprobs(self, policy, ro):
        return policy_logprobs(policy, ro.inputs["obs"], ro.actions)

    def evaluate(self, policy, split="test", n=0):
        """Mean return of n greedy episodes from fixed held-out seeds, in the world as it is now."""
        n = n or self.eval_episodes
        self._apply_schedule()
        was_training = policy.training
        policy.eval()
        seeds = [self._eval_seed_base + i for i in range(n)]
        ro = rollout_episodes(policy, self._get(self._eval_envs, n), seeds, 1, self.max_steps,
                              device=next(policy.parameters()).device, greedy=True, action_bounds=self._bounds())
        policy.train(was_training)
        returns = ro.rewards.numpy()
        return {"return": float(returns.mean()), "return_std": float(returns.std()), "n": n}

    def get_state(self):
        return {"rng": _rng_to_plain(self._rng), "episodes": self.episodes}

    def set_state(self, state):
        if state:
            _rng_from_plain(self._rng, state["rng"])
            self.episodes = int(state.get("episodes", 0))

    def shrink(self):
        """Memory pressure: drop the env pools (they are rebuilt on demand, with the schedule applied)."""
        self._envs, self._eval_envs = [], []


class Dropped(object):
    """In place of a line the stream could not use (bytes that are not UTF-8, a line over the bound, a
    record cut off, a connection reset): why. The task drops it and logs a `drop` event."""

    def __init__(self, reason, ends_connection=False):
        self.reason, self.ends_connection = reason, ends_connection


def max_line_bytes(budget):
    """The longest record line read: 1/64 of the memory budget, within 4 KiB .. 1 MiB."""
    return int(max(4096, min(int(budget) // 64, 1 << 20)))


def _decode(raw):
    if not isinstance(raw, bytes):
        return raw
    try:
        return raw.decode("utf-8").lstrip("\ufeff")          # a byte-order mark (Windows editors) is not data
    except UnicodeDecodeError as e:
        return Dropped("bytes that are not UTF-8 (at byte %d of the line): the record is dropped" % e.start)


def _read_lines(f, max_bytes, name):
    """(where, text or Dropped) for each line of the binary stream f: over-long lines are skipped whole, a
    last line without its newline is kept only if it is a complete JSON value."""
    i = 0
    while True:
        raw = f.readline(max_bytes + 1)
        if not raw:
            return
        i += 1
        where = "%s line %d" % (name, i)
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):                 # skip the rest of it, bounded reads
                raw = f.readline(max_bytes + 1)
            yield where, Dropped("a line over %d bytes (online.max_memory / 64): dropped" % max_bytes)
        elif not raw.endswith(b"\n"):
            text = _decode(raw)
            try:
                json.loads(text)
                yield where, text
            except (ValueError, TypeError):
                yield where, Dropped("a record cut off at the end of the stream (no newline): dropped", True)
        else:
            yield where, _decode(raw)


def stdin_lines(max_bytes=1 << 20):
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:                                          # a text stream (tests): no bytes to check
        for i, line in enumerate(sys.stdin, 1):
            yield "stdin line %d" % i, line
        return
    for item in _read_lines(stream, max_bytes, "stdin"):
        yield item


def tcp_lines(port, host="127.0.0.1", max_bytes=1 << 20):
    """Listen on host:port (localhost) now; return an iterator over the lines of one connection after another.
    A connection's failure (reset, a record cut off, a line over max_bytes) ends that connection with a
    Dropped; the server keeps listening for the next one."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError("online.stream: the record socket listens on localhost only, not %r" % host)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((host, int(port)))
    except OSError as e:
        raise ConfigError("online.stream tcp:%s: cannot listen (%s)" % (port, e.strerror or e))
    srv.listen(1)

    def lines():
        conn_no = 0
        try:
            while True:
                conn, _ = srv.accept()
                conn_no += 1
                for item in _connection_lines(conn, conn_no, max_bytes):
                    yield item
        finally:
            srv.close()
    return lines()


def _connection_lines(conn, conn_no, max_bytes):
    name = "tcp connection %d" % conn_no
    with conn:
        f = conn.makefile("rb")
        try:
            for where, text in _read_lines(f, max_bytes, name):
                yield where, text
                if isinstance(text, Dropped) and text.reason.startswith("a line over"):
                    yield where, Dropped("%s closed after a line over %d bytes" % (name, max_bytes), True)
                    return
        except (ConnectionError, OSError) as e:          # reset by the peer: that connection ends, not the server
            yield name, Dropped("%s failed (%s): closed; the server keeps listening" % (
                name, getattr(e, "strerror", None) or type(e).__name__), True)
        finally:
            f.close()


OBS_LIMIT = 1e9          # |obs| in float32
REWARD_LIMIT = 1e6       # |reward| per step: group statistics of larger values overflow float32
LOGP_MIN = -50.0         # exp(logp_new - logp_old) of an action below this overflows the clipped ratio
MAX_OPEN_GROUPS = 64     # group keys waiting for their G-th episode; the oldest beyond this is forgotten
STALLED = 10             # records skipped after a cut, in units of max_steps, before a "stalled" event
COUNTS = ("bad_records", "dropped_lines", "dropped_episodes", "cut_episodes", "skipped_records",
          "unmatched_groups", "unmatched_episodes")        # what a stream dropped, cut or never grouped


def record_problem(rec):
    """None, or why a parsed record's numbers are unusable for training (its episode is then dropped)."""
    obs, _, r, _, _, logp, _ = rec
    if not np.all(np.isfinite(obs)):
        return "obs holds NaN / inf (in float32)"
    if obs.size and float(np.abs(obs).max()) > OBS_LIMIT:
        return "obs beyond %g (max |obs| = %.3g)" % (OBS_LIMIT, float(np.abs(obs).max()))
    if not math.isfinite(r) or abs(r) > REWARD_LIMIT:
        return "reward %r is not a finite number within +-%g" % (r, REWARD_LIMIT)
    if logp is not None and (not math.isfinite(logp) or logp < LOGP_MIN):
        return "logp %r is not a finite log-probability >= %g" % (logp, LOGP_MIN)
    return None


def _ends_episode(text):
    """Whether a record training cannot use still says it ends its episode ("done" / "truncated" true)."""
    try:
        rec = json.loads(text)
    except ValueError:
        return False
    return isinstance(rec, dict) and (rec.get("done") is True or rec.get("truncated") is True)


def parse_record(text, where, obs_dim, n_actions):
    """One JSON line -> (obs (d,) float32, action, reward, done, truncated, logp or None, group or None)."""
    try:
        rec = json.loads(text)
    except ValueError as e:
        raise StreamError("%s: not JSON (%s)" % (where, e))
    if not isinstance(rec, dict):
        raise StreamError("%s: a record must be a JSON object with obs, action, reward" % where)
    for key in ("obs", "action", "reward"):
        if key not in rec:
            raise StreamError("%s: missing %r (a record is {\"obs\": [...], \"action\": a, \"reward\": r})" % (where, key))
    obs = rec["obs"]
    if (not isinstance(obs, list) or len(obs) != obs_dim
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obs)):
        raise StreamError("%s: 'obs' must be a list of %d numbers" % (where, obs_dim))
    a = rec["action"]
    if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < n_actions:
        raise StreamError("%s: 'action' must be an integer in 0..%d, got %r" % (where, n_actions - 1, a))
    r = rec["reward"]
    if isinstance(r, bool) or not isinstance(r, (int, float)):
        raise StreamError("%s: 'reward' must be a number, got %r" % (where, r))
    logp = rec.get("logp")
    if logp is not None and (isinstance(logp, bool) or not isinstance(logp, (int, float)) or logp > 0):
        raise StreamError("%s: 'logp' must be a log-probability (<= 0), got %r" % (where, logp))
    done, trunc = rec.get("done", False), rec.get("truncated", False)
    if not isinstance(done, bool) or not isinstance(trunc, bool):
        raise StreamError("%s: 'done' and 'truncated' must be true or false" % where)
    group = rec.get("group")
    with np.errstate(over="ignore"):           # 1e39 -> inf in float32: record_problem reports it
        obs = np.asarray(obs, dtype=np.float32)
    return (obs, a, float(r), done, trunc,
            None if logp is None else float(logp), None if group is None else str(group))


class StreamTask(object):
    """Experience from JSON-lines records (stdin or a localhost TCP socket), grouped into episodes and groups.

    Every `holdout_every`-th complete group is held out (never trained on) for the gate's evaluation,
    which is an off-policy estimate: per-decision weighted importance sampling of the evaluated policy's
    return from the held-out episodes of the behaviour (served) policy. For the served policy itself the
    estimate is the plain mean return of those episodes.
    """
    kind = "control"
    metric_name = "return"
    higher_is_better = True

    def __init__(self, lines, source, obs_dim, n_actions, group_size, max_steps, eval_episodes,
                 holdout_every, buffer_groups, bad_records="drop"):
        self.name = "online:%s" % source
        self.lines = lines
        self.obs_dim, self.n_actions, self.group_size = int(obs_dim), int(n_actions), int(group_size)
        self.max_steps = int(max_steps)
        self.holdout_every = int(holdout_every)
        self.bad_records = bad_records                     # "drop" or "stop" (online.bad_records)
        self.behaviour = None
        self.groups = deque(maxlen=int(buffer_groups))     # complete groups waiting to be trained on
        self.eval_eps = deque(maxlen=int(eval_episodes))   # held-out episodes for the gate
        self._open = OrderedDict()                          # group key -> episodes so far
        self._steps = []                                    # records of the episode in progress
        self.episodes = self.records = self.complete_groups = 0
        self.counts = dict((k, 0) for k in COUNTS)          # what was dropped, cut, skipped, forgotten
        self._bad = None                                    # why the episode in progress will be dropped
        self._skipping = None                               # records skipped since an episode was cut
        self.on_event = None                                # fn(event, where, reason): the runner logs it
        self.io_wait = False

    @property
    def dropped_episodes(self):
        return self.counts["dropped_episodes"]

    @property
    def open_groups(self):
        """Group keys still waiting for their G-th episode."""
        return len(self._open)

    def model_kwargs(self):
        return {"obs_dim": self.obs_dim, "n_actions": self.n_actions}

    def checkpoint_meta(self):
        return {"env": self.name, "obs_dim": self.obs_dim, "n_actions": self.n_actions,
                "input_shape": [self.obs_dim], "input_dtype": "float32", "max_steps": self.max_steps}

    # ---------------------------------------------------------------- reading records
    def _event(self, event, where, reason):
        if self.on_event is not None:
            self.on_event(event, where, reason)

    def _pump(self):
        """Read one record; close episodes and groups as they complete."""
        self.io_wait = True
        try:
            where, text = next(self.lines)
        except StopIteration:
            raise StreamEnded()
        finally:
            self.io_wait = False
        if isinstance(text, Dropped):
            self._dropped_line(where, text)
            return
        text = text.lstrip("\ufeff")
        if not text.strip():
            return
        self.records += 1
        try:
            rec = parse_record(text, where, self.obs_dim, self.n_actions)
        except StreamError as e:
            self._bad_record(where, str(e).split(": ", 1)[-1], _ends_episode(text))
            return
        problem = record_problem(rec)
        if problem is not None:           # keep the episode's shape (done / group), drop its numbers
            self._bad_record(where, problem, rec[3] or rec[4])
            return
        if self._skipping is not None:     # the rest of an episode cut at max_steps
            self._skip(where, rec[3] or rec[4])
            return
        self._steps.append(rec)
        if rec[3] or rec[4]:
            self._close_episode(truncated=not rec[3])
        elif len(self._steps) >= self.max_steps:
            self.counts["cut_episodes"] += 1
            self._event("cut", where, "episode reached online.max_steps=%d records without done / truncated: kept "
                        "as one truncated episode, its later records skipped until one ends it (raise max_steps "
                        "if episodes are this long)" % self.max_steps)
            self._close_episode(truncated=True)
            self._skipping = 0

    def _skip(self, where, ends_episode):
        """One record of an episode cut at max_steps: skipped; a "stalled" event when no end comes."""
        self._skipping += 1
        self.counts["skipped_records"] += 1
        if self._skipping == STALLED * self.max_steps:
            self._event("stalled", where, "no record has ended an episode for %d records: does the robot send "
                        "\"done\" / \"truncated\"? (nothing is trained on until one does)" % self._skipping)
        if ends_episode:
            self._skipping = None

    def _bad_record(self, where, problem, ends_episode):
        """online.bad_records: "stop" raises; "drop" drops the record's episode (when it closes)."""
        self.counts["bad_records"] += 1
        if self.bad_records == "stop":
            raise StreamError("%s: %s" % (where, problem))
        if self._skipping is not None:     # part of an episode already cut: skipped anyway
            self._skip(where, ends_episode)
            return
        if self._bad is None:
            self._bad = (where, problem)
        self._steps.append(None)
        if ends_episode or len(self._steps) >= self.max_steps:
            self._close_episode(truncated=True)

    def _dropped_line(self, where, d):
        """A line the stream could not read: a bad record, or the end of a connection (its episode in progress
        cannot go on and is dropped now, whatever online.bad_records says)."""
        self.counts["dropped_lines"] += 1
        if not d.ends_connection:
            self._event("drop", where, d.reason)
            self._bad_record(where, d.reason, False)
            return
        self._event("drop", where, d.reason)
        if self._steps:
            self.counts["dropped_episodes"] += 1
        self._steps, self._bad, self._skipping = [], None, None

    def _close_episode(self, truncated):
        steps, self._steps = self._steps, []
        if self._bad is not None:
            where, problem = self._bad
            self._bad = None
            self.counts["dropped_episodes"] += 1
            self._event("drop", where, "episode of %d records dropped: %s" % (len(steps), problem))
            return
        obs = np.stack([s[0] for s in steps])                              # (T, d)
        actions = np.array([s[1] for s in steps], dtype=np.int64)          # (T,)
        logp = np.array([0.0 if s[5] is None else s[5] for s in steps], dtype=np.float32)
        missing = np.array([s[5] is None for s in steps])
        if missing.any():       # the robot did not send logp: it ran the served weights we hold
            with torch.no_grad():
                dev = next(self.behaviour.parameters()).device
                lp, _ = policy_logprobs(self.behaviour, torch.as_tensor(obs, device=dev)[None],
                                        torch.as_tensor(actions, device=dev)[None])
            logp[missing] = lp[0].cpu().numpy()[missing]
        ep = {"obs": obs, "actions": actions, "logp": logp, "truncated": bool(truncated),
              "rewards": np.array([s[2] for s in steps], dtype=np.float32)}
        self.episodes += 1
        key = steps[-1][6]
        group = self._open.setdefault(key, [])
        group.append(ep)
        if len(group) == self.group_size:
            del self._open[key]
            self.complete_groups += 1
            if self.holdout_every and self.complete_groups % self.holdout_every == 0:
                self.eval_eps.extend(group)
            else:
                self.groups.append(group)
        while len(self._open) > MAX_OPEN_GROUPS:            # bounded: forget the oldest unfinished group
            key, eps = self._open.popitem(last=False)
            self.counts["unmatched_groups"] += 1
            self.counts["unmatched_episodes"] += len(eps)
            self._event("unmatched", "group %r" % key, "forgotten with %d of %d episodes: more than %d groups were "
                        "open at once (episodes with the same \"group\" key make a group of grpo.group_size)"
                        % (len(eps), self.group_size, MAX_OPEN_GROUPS))

    # ---------------------------------------------------------------- the core Task interface
    def rollout(self, policy, num_groups, group_size, generator=None):
        while len(self.groups) < num_groups:
            self._pump()
        return self._to_rollout([ep for _ in range(num_groups) for ep in self.groups.popleft()], group_size)

    def _to_rollout(self, eps, group_size):
        n, t, d = len(eps), max(len(e["actions"]) for e in eps), self.obs_dim
        obs = torch.zeros(n, t, d)
        actions = torch.zeros(n, t, dtype=torch.long)
        mask, logp, rew = torch.zeros(n, t), torch.zeros(n, t), torch.zeros(n, t)
        for i, e in enumerate(eps):
            k = len(e["actions"])
            obs[i, :k] = torch.as_tensor(e["obs"])
            actions[i, :k] = torch.as_tensor(e["actions"])
            logp[i, :k] = torch.as_tensor(e["logp"])
            rew[i, :k] = torch.as_tensor(e["rewards"])
            mask[i, :k] = 1.0
        return Rollout(actions=actions, mask=mask, old_logp=logp, rewards=rew.sum(1), group_size=group_size,
                       inputs={"obs": obs}, reward_parts={"return": rew.sum(1)}, step_rewards=rew,
                       truncated=torch.tensor([e["truncated"] for e in eps]), num_env_steps=int(mask.sum()))

    def logprobs(self, policy, ro):
        return policy_logprobs(policy, ro.inputs["obs"], ro.actions)

    def evaluate(self, policy, split="test", n=0):
        """Per-decision weighted importance sampling estimate of `policy`'s return on held-out episodes."""
        eps = list(self.eval_eps)
        if not eps:
            return {"return": float("nan"), "n": 0}
        ro = self._to_rollout(eps, 1)
        dev = next(policy.parameters()).device
        was_training = policy.training
        policy.eval()
        with torch.no_grad():
            lp, _ = policy_logprobs(policy, ro.inputs["obs"].to(dev), ro.actions.to(dev))
        policy.train(was_training)
        log_rho = (lp.cpu() - ro.old_logp) * ro.mask                     # (M, T), 0 after an episode ends
        w = torch.exp(torch.cumsum(log_rho, 1).clamp(-20.0, 20.0))       # (M, T) cumulative ratios
        est = ((w * ro.step_rewards).sum(0) / w.sum(0)).sum()            # sum over t of weighted means
        w_end = w[:, -1]
        ess = float(w_end.sum() ** 2 / (w_end ** 2).sum())
        return {"return": float(est), "n": len(eps), "ess": ess}

    def get_state(self):
        return dict(self.counts, episodes=self.episodes, records=self.records)

    def set_state(self, state):
        if state:
            self.episodes = int(state.get("episodes", 0))
            self.records = int(state.get("records", 0))
            for k in COUNTS:
                self.counts[k] = int(state.get(k, 0))

    def shrink(self):
        """Memory pressure: drop the groups waiting to be trained on (held-out episodes stay)."""
        self.groups.clear()
        self._open.clear()
