"""Batched gymnasium environments for lockstep rollouts (grpo_edge.core.rollout.rollout_lockstep).

lockstep_envs(gym, env_id, n, env_kwargs) -> an object with reset(seeds) and step(actions):
  * gymnasium's numpy-vectorized implementation when the environment registers one (CartPole-v1:
    `make_vec(..., vectorization_mode="vector_entry_point")`, all n episodes in a few array operations);
  * else gymnasium's SyncVectorEnv over n ordinary instances (any registered environment).
Both start episode i from the same state as `gym.make(env_id).reset(seed=seeds[i])`, so a rollout is
the one the per-environment loop (rollout_episodes) gives for the same seeds.
"""
import numpy as np


class _SyncEnvs(object):
    """n ordinary instances behind gymnasium's SyncVectorEnv; reset seeds each instance."""

    def __init__(self, gym, env_id, n, env_kwargs):
        self.venv = gym.vector.SyncVectorEnv([lambda: gym.make(env_id, **env_kwargs) for _ in range(n)])

    def reset(self, seeds):
        obs, _ = self.venv.reset(seed=[int(s) for s in seeds])
        return obs

    def step(self, actions):
        obs, rew, term, trunc, _ = self.venv.step(actions)
        return obs, rew, term, trunc

    def close(self):
        self.venv.close()


class _VectorEntryEnvs(object):
    """gymnasium's vectorized implementation (one state array for all n episodes).

    Its reset draws every episode from one generator, so per-episode seeds are applied by resetting one
    ordinary instance per distinct seed and copying its (float64) state into the batch state."""

    def __init__(self, gym, env_id, n, env_kwargs):
        self.venv = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **env_kwargs)
        self.single = gym.make(env_id, **env_kwargs).unwrapped
        self.n = n

    def reset(self, seeds):
        self.venv.reset(seed=0)
        states = {}
        for s in set(int(s) for s in seeds):
            self.single.reset(seed=s)
            states[s] = np.array(self.single.state, dtype=np.float64)
        core = self.venv.unwrapped
        core.state = np.stack([states[int(s)] for s in seeds], 1)          # (state_dim, n)
        return core.state.T.astype(np.float32)

    def step(self, actions):
        obs, rew, term, trunc, _ = self.venv.step(np.asarray(actions))
        return obs, rew, term, trunc

    def close(self):
        self.venv.close()
        self.single.close()


def _copies_state(gym, env_id, env_kwargs):
    """True when env_id's vectorized implementation keeps a (state_dim, n) `state` array that is the
    ordinary instance's `state` stacked (checked on a 2-env batch), i.e. per-episode seeds can be set."""
    spec = gym.spec(env_id)
    if not getattr(spec, "vector_entry_point", None):
        return False
    try:
        v = gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", **env_kwargs)
        one = gym.make(env_id, **env_kwargs).unwrapped
    except Exception:        # kwargs the vectorized version does not take: use the generic path
        return False
    try:
        v.reset(seed=0)
        one.reset(seed=0)
        st, single = getattr(v.unwrapped, "state", None), getattr(one, "state", None)
        return (isinstance(st, np.ndarray) and single is not None
                and st.shape == (np.asarray(single).size, 2))
    finally:
        v.close()
        one.close()


def lockstep_envs(gym, env_id, n, env_kwargs=None):
    """n environments stepped together; see the module docstring."""
    env_kwargs = dict(env_kwargs or {})
    if _copies_state(gym, env_id, env_kwargs):
        return _VectorEntryEnvs(gym, env_id, n, env_kwargs)
    return _SyncEnvs(gym, env_id, n, env_kwargs)
