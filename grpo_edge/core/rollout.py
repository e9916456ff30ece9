"""Containers for sampled experience, and the lockstep control rollout (Python 3.6 safe).

A Rollout holds N = num_groups * G samples; sample i belongs to group i // G.
Per-step / per-token tensors are (N, T) and padded; `mask` marks real steps/tokens.
"""
import numpy as np
import torch

from grpo_edge.core import distributions


class Rollout(object):
    """A batch of sampled groups.

    Attributes (N = num_groups * group_size, T = longest episode / completion):
      actions     (N, T) long    sampled actions / tokens
      mask        (N, T) float   1 for real steps/tokens, 0 for padding
      old_logp    (N, T) float   log-prob of each action under the policy that sampled it
      rewards     (N,)   float   total weighted reward per sample
      reward_parts dict name -> (N,) float, each reward function's raw value
      step_rewards (N, T) float or None   per-step rewards (control tasks)
      truncated   (N,)   bool    episode cut by a time limit / completion cut by max length
      inputs      dict name -> tensor with leading dim N: what the task needs to recompute log-probs
      group_size  int
      num_env_steps int          environment steps (control) or generated tokens (text) in this batch
      extras      dict           anything else for logging (e.g. sampled texts)
    """

    def __init__(self, actions, mask, old_logp, rewards, group_size, inputs=None, reward_parts=None,
                 step_rewards=None, truncated=None, num_env_steps=0, extras=None):
        n = actions.shape[0]
        if n % group_size != 0:
            raise ValueError("rollout of %d samples is not a whole number of groups of %d" % (n, group_size))
        self.actions = actions
        self.mask = mask
        self.old_logp = old_logp
        self.rewards = rewards
        self.group_size = group_size
        self.inputs = inputs if inputs is not None else {}
        self.reward_parts = reward_parts if reward_parts is not None else {}
        self.step_rewards = step_rewards
        self.truncated = truncated if truncated is not None else torch.zeros(n, dtype=torch.bool)
        self.num_env_steps = int(num_env_steps)
        self.extras = extras if extras is not None else {}

    def __len__(self):
        return self.actions.shape[0]

    @property
    def num_groups(self):
        return len(self) // self.group_size

    def select(self, idx):
        """A view of samples `idx` (a LongTensor of sample indices) for minibatching."""
        def take(x):
            return x[idx] if torch.is_tensor(x) else x
        r = Rollout.__new__(Rollout)
        r.actions = take(self.actions)
        r.mask = take(self.mask)
        r.old_logp = take(self.old_logp)
        r.rewards = take(self.rewards)
        r.group_size = self.group_size
        r.inputs = dict((k, take(v)) for k, v in self.inputs.items())
        r.reward_parts = dict((k, take(v)) for k, v in self.reward_parts.items())
        r.step_rewards = take(self.step_rewards) if self.step_rewards is not None else None
        r.truncated = take(self.truncated)
        r.num_env_steps = self.num_env_steps
        r.extras = self.extras
        for k in ("advantages", "ref_logp", "returns", "values", "mask_loss"):
            if hasattr(self, k):
                setattr(r, k, take(getattr(self, k)))
        return r

    def to(self, device):
        for k in ("actions", "mask", "old_logp", "rewards", "truncated"):
            setattr(self, k, getattr(self, k).to(device))
        if self.step_rewards is not None:
            self.step_rewards = self.step_rewards.to(device)
        self.inputs = dict((k, v.to(device)) for k, v in self.inputs.items())
        self.reward_parts = dict((k, v.to(device)) for k, v in self.reward_parts.items())
        return self


def _pad_dim1(x, length):
    """Zero-pad dim 1 of x (N, T, ...) to `length` (mask 0, PAD id 0 and logp 0 mark padding)."""
    if x.dim() < 2 or x.shape[1] == length:
        return x
    pad = x.new_zeros((x.shape[0], length - x.shape[1]) + tuple(x.shape[2:]))
    return torch.cat([x, pad], 1)


def concat_rollouts(rollouts):
    """One Rollout of several shards' samples, in order (groups stay whole); each (N, T, ...) tensor is
    zero-padded along T to the longest shard's. extras come from the first shard."""
    first = rollouts[0]
    if any(r.group_size != first.group_size for r in rollouts):
        raise ValueError("rollouts to concatenate must have the same group size")

    def cat(get):
        xs = [get(r) for r in rollouts]
        t = max(x.shape[1] for x in xs) if xs[0].dim() > 1 else None
        return torch.cat([_pad_dim1(x, t) for x in xs], 0)
    return Rollout(
        actions=cat(lambda r: r.actions), mask=cat(lambda r: r.mask), old_logp=cat(lambda r: r.old_logp),
        rewards=cat(lambda r: r.rewards), group_size=first.group_size,
        inputs=dict((k, cat(lambda r, k=k: r.inputs[k])) for k in first.inputs),
        reward_parts=dict((k, cat(lambda r, k=k: r.reward_parts[k])) for k in first.reward_parts),
        step_rewards=cat(lambda r: r.step_rewards) if first.step_rewards is not None else None,
        truncated=cat(lambda r: r.truncated), num_env_steps=sum(r.num_env_steps for r in rollouts),
        extras=first.extras)


def rollout_episodes(policy, envs, group_seeds, group_size, max_steps, device="cpu", greedy=False,
                     action_bounds=None):
    """rollout_lockstep over a list of gym-like envs (reset(seed=...) -> (obs, info); step(a) -> obs, r,
    terminated, truncated, info), len(envs) == len(group_seeds) * group_size; the episodes of one group start
    from the same seeded reset. Returns a Rollout with inputs["obs"] (N, T, obs_dim) and step_rewards (N, T)."""
    assert len(envs) == len(group_seeds) * group_size
    seeds = np.repeat(np.asarray(group_seeds), group_size)
    return rollout_lockstep(policy, EnvList(envs), seeds, group_size, max_steps, device=device, greedy=greedy,
                            action_bounds=action_bounds)


class EnvList(object):
    """A list of gym-like envs behind the batched interface rollout_lockstep steps. An env whose episode has
    ended is not stepped again: its row repeats its last observation, with reward 0, until the next reset."""

    def __init__(self, envs):
        self.envs = list(envs)
        self.done = np.zeros(len(self.envs), dtype=bool)
        self.last = None

    def reset(self, seeds):
        self.done[:] = False
        self.last = np.stack([np.asarray(env.reset(seed=int(s))[0], dtype=np.float32)
                              for env, s in zip(self.envs, seeds)])
        return self.last.copy()

    def step(self, actions):
        n = len(self.envs)
        rew, term, trunc = np.zeros(n, np.float32), self.done.copy(), np.zeros(n, dtype=bool)
        for i in np.flatnonzero(~self.done):
            a = np.asarray(actions[i])
            o2, r, te, tr, _ = self.envs[i].step(a.item() if a.ndim == 0 else a)   # a Discrete action: an int
            self.last[i], rew[i], term[i], trunc[i] = np.asarray(o2, dtype=np.float32), r, bool(te), bool(tr)
            self.done[i] = bool(te) or bool(tr)
        return self.last.copy(), rew, term, trunc


def rollout_lockstep(policy, envs, seeds, group_size, max_steps, device="cpu", greedy=False, action_bounds=None,
                     noise_correlation=0.0):
    """Episodes in lockstep over a batched environment: one policy call and one env call per step.

    envs: an object with reset(seeds) -> obs (n, obs_dim) and step(actions (n,) int array, or (n, A) float
    for a continuous policy) -> (obs (n, obs_dim), reward (n,), terminated (n,), truncated (n,)), numpy
    arrays; action_bounds (low (A,), high (A,)) clips continuous actions on their way to the environment
    (the rollout keeps the sampled ones, whose log-probabilities it records); `seeds` holds one
    reset seed per environment (group_seeds repeated G times). The batched environment may keep
    stepping (and auto-resetting) finished episodes: their results are ignored and their rows keep the
    last observation, so a batched environment and an EnvList give the same Rollout for the same seeds.
    noise_correlation: a continuous policy's exploration noise is distributions.CorrelatedNoise of that rho
    (0: an independent draw each step).
    """
    n = len(seeds)
    obs = np.asarray(envs.reset(seeds), dtype=np.float32).copy()
    alive = np.ones(n, dtype=bool)
    truncated = np.zeros(n, dtype=bool)
    obs_buf, act_buf, logp_buf, rew_buf, mask_buf = [], [], [], [], []
    env_steps = 0
    noise = None
    if noise_correlation and not greedy and action_bounds is not None:
        noise = distributions.CorrelatedNoise(noise_correlation)
    with torch.inference_mode():
        for _ in range(max_steps):
            if not alive.any():
                break
            out = policy(torch.as_tensor(obs, device=device))
            a, logp = distributions.sample(policy, out, greedy, continuous=action_bounds is not None,
                                           noise=noise(out) if noise is not None else None)
            obs_buf.append(obs)
            act_buf.append(a)                                              # (n,) long or (n, A) float
            logp_buf.append(logp)                                          # (n,)
            mask_buf.append(alive.astype(np.float32))
            a_env = a.cpu().numpy()
            if action_bounds is not None:                                  # Box actions: the env gets them clipped
                a_env = distributions.clip_to_bounds(a_env, action_bounds[0], action_bounds[1])
            o2, r, term, trunc = envs.step(a_env)
            env_steps += int(alive.sum())
            rew_buf.append(np.where(alive, r, 0.0).astype(np.float32))
            done = alive & (np.asarray(term) | np.asarray(trunc))
            truncated[done] = np.asarray(trunc)[done] & ~np.asarray(term)[done]
            keep = alive.reshape((n,) + (1,) * (obs.ndim - 1))
            obs = np.where(keep, np.asarray(o2, dtype=np.float32), obs)
            alive = alive & ~done
        actions = torch.stack(act_buf, 1)                                   # (N, T) or (N, T, A)
        old_logp = torch.stack(logp_buf, 1)                                 # (N, T)
    actions, old_logp = actions.cpu().clone(), old_logp.cpu().clone()
    truncated |= alive
    mask = torch.as_tensor(np.stack(mask_buf, 1))
    step_rewards = torch.as_tensor(np.stack(rew_buf, 1)) * mask
    return Rollout(
        actions=actions, mask=mask, old_logp=old_logp, rewards=step_rewards.sum(1), group_size=group_size,
        inputs={"obs": torch.as_tensor(np.stack(obs_buf, 1))}, reward_parts={"return": step_rewards.sum(1)},
        step_rewards=step_rewards, truncated=torch.as_tensor(truncated), num_env_steps=env_steps)
