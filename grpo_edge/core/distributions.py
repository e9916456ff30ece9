"""Action distributions of control policies (Python 3.6 / torch 1.10 safe, imports torch only).

A discrete policy's output is logits (B, A): a categorical distribution, actions (B,) long.
A continuous policy (MLPPolicy with continuous=True) outputs the mean (B, A) of a diagonal Gaussian whose
log standard deviation is a learned, state-independent parameter `policy.log_std` (A,): actions (B, A)
float. The sampled action itself is stored and scored (its log-probability is that of the Gaussian
draw); the environment receives it clipped to the action bounds (clip_to_bounds), the convention of
CleanRL and Stable-Baselines3 for Box actions. Greedy actions are the argmax / the mean.
"""
import math

import numpy as np
import torch

_LOG_2PI = math.log(2.0 * math.pi)


def is_continuous(policy):
    return bool(getattr(policy, "continuous", False))


def sample(policy, out, greedy=False, continuous=None, noise=None):
    """(actions, logp (B,)) from the policy's output `out` for one batch of observations.

    continuous: the task's word (a Box action space); None asks the policy. A deployed artifact run as a
    policy (grpo_edge/export/evaluate.py) outputs the greedy action itself and has no log_std: greedy only.
    noise: a continuous policy's standard-normal draw (B, A) to use (correlated_noise makes one); None draws
    a fresh one."""
    if continuous is None:
        continuous = is_continuous(policy)
    if continuous:
        if not hasattr(policy, "log_std"):
            if not greedy:
                raise ValueError("sampling a continuous action needs the policy's log_std")
            return out, torch.zeros(out.shape[0], dtype=out.dtype, device=out.device)
        log_std = policy.log_std.to(out.dtype).expand_as(out)
        if not greedy and noise is None:
            noise = torch.randn_like(out)
        a = out if greedy else out + log_std.exp() * noise.to(out.dtype)           # (B, A)
        return a, gaussian_logp(out, log_std, a)
    logp_all = torch.log_softmax(out, dim=-1)                                       # (B, A)
    a = logp_all.argmax(-1) if greedy else torch.multinomial(logp_all.exp(), 1).squeeze(-1)
    return a, logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)


class CorrelatedNoise(object):
    """Standard-normal exploration noise that is correlated in time: e_t = rho e_(t-1) + sqrt(1 - rho^2) n_t,
    n_t independent N(0, 1), e_0 ~ N(0, 1), so every e_t is N(0, 1) and steps k apart correlate by rho^k
    (rho 0: independent draws, the default). A continuous action a_t = mean_t + std * e_t then keeps pushing in
    one direction for about 1 / (1 - rho) steps, which a task that needs momentum (MountainCarContinuous)
    cannot be found without. Log-probabilities stay those of the per-step Gaussian, as with independent noise
    (the approximation colored-noise exploration makes for on-policy methods)."""

    def __init__(self, rho):
        if not 0.0 <= float(rho) < 1.0:
            raise ValueError("noise correlation must be in [0, 1), got %r" % (rho,))
        self.rho, self.state = float(rho), None

    def __call__(self, like):
        """The next draw, shaped like `like` (B, A)."""
        n = torch.randn_like(like)
        if self.state is None:
            self.state = n
        else:
            self.state = self.rho * self.state + math.sqrt(1.0 - self.rho * self.rho) * n
        return self.state


def gaussian_logp(mean, log_std, a):
    """log N(a; mean, exp(log_std)^2), summed over the action dimensions: (B, A) -> (B,)."""
    z = (a - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum(-1)


def logp_entropy(policy, out, actions):
    """(logp (R,), entropy (R,)) of stored `actions` ((R,) long or (R, A) float) under the output `out`."""
    if is_continuous(policy):
        log_std = policy.log_std.to(out.dtype).expand_as(out)
        ent = (log_std + 0.5 * (_LOG_2PI + 1.0)).sum(-1)
        return gaussian_logp(out, log_std, actions.to(out.dtype)), ent
    logp_all = torch.log_softmax(out, dim=-1)
    logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def action_bounds(policy_or_task):
    """(low (A,), high (A,)) float32 arrays of a continuous policy or task, for clip_to_bounds; None otherwise."""
    if not getattr(policy_or_task, "continuous", False) or getattr(policy_or_task, "action_low", None) is None:
        return None
    return np.asarray(policy_or_task.action_low, np.float32), np.asarray(policy_or_task.action_high, np.float32)


def action_range(policy_or_task):
    """high - low per action dimension (float64 array) of a continuous policy or task; None otherwise. An
    unbounded dimension (an infinite bound) counts 1.0, so errors relative to the range are absolute there."""
    if not getattr(policy_or_task, "continuous", False) or getattr(policy_or_task, "action_low", None) is None:
        return None
    r = np.asarray(policy_or_task.action_high, np.float64) - np.asarray(policy_or_task.action_low, np.float64)
    return np.where(np.isfinite(r), r, 1.0)


def clip_to_bounds(actions, low, high):
    """What the environment receives: continuous actions clipped into [low, high] (numpy, per dimension)."""
    return np.clip(actions, low, high)
