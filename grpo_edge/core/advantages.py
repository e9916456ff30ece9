"""Group-relative advantages (Python 3.6 safe).

Samples are laid out group-major: sample i belongs to group i // G, so rewards.view(-1, G) puts one
group per row.
"""
import torch

from grpo_edge.core.defaults import REWARD_SCALES as SCALES  # one source


def group_advantages(rewards, group_size, scale="group", eps=1e-4):
    """GRPO advantage: reward minus its group's mean, scaled per `scale`.

    rewards: (N,) with N = num_groups * group_size.
    scale: "group" divides by the group's std (DeepSeekMath GRPO), "batch" by the std of the whole
           batch (REINFORCE++-style, more robust for small groups), "none" keeps the raw centred reward
           (Dr. GRPO: no std scaling, so easy/hard prompts are not re-weighted).
    Returns (N,).
    """
    if scale not in SCALES:
        raise ValueError("scale must be one of %s, got %r" % (SCALES, scale))
    r = rewards.view(-1, group_size)                      # (num_groups, G)
    centred = r - r.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif scale == "batch":
        centred = centred / (rewards.std(unbiased=False) + eps)
    return centred.reshape(-1)


def frac_zero_std(rewards, group_size):
    """Fraction of groups whose rewards are all equal (their advantages, and so their gradient, are 0)."""
    r = rewards.view(-1, group_size)
    return float((r.std(dim=1, unbiased=False) < 1e-8).float().mean())


def nonzero_std_groups(rewards, group_size):
    """Sample indices (LongTensor) of the groups whose rewards are not all equal (DAPO dynamic sampling)."""
    r = rewards.view(-1, group_size)
    keep = (r.std(dim=1, unbiased=False) >= 1e-8)          # (num_groups,)
    idx = torch.arange(rewards.shape[0], device=rewards.device).view(-1, group_size)
    return idx[keep].reshape(-1)


def discounted_returns(step_rewards, mask, gamma):
    """Reward-to-go G_t = r_t + gamma * G_{t+1} within each episode. (N, T) -> (N, T)."""
    out = torch.zeros_like(step_rewards)
    running = torch.zeros_like(step_rewards[:, 0])
    for t in range(step_rewards.shape[1] - 1, -1, -1):
        running = step_rewards[:, t] + gamma * running * mask[:, t]
        out[:, t] = running
    return out * mask


def reward_to_go_advantages(step_rewards, mask, group_size, gamma=0.99, scale="group", eps=1e-4):
    """Per-step group-relative advantage for control tasks.

    The G episodes of a group start from the same state, so at each time step t the reward-to-go of
    episode i is compared with the mean (and scaled by the std) over the group's episodes still alive at
    t. Critic-free like GRPO, but credit lands on the steps that earned it, which learns CartPole several
    times faster than the whole-episode return (measured, see docs/results.md).
    step_rewards, mask: (N, T). Returns (N, T), zero where mask is 0.
    """
    if scale not in SCALES:
        raise ValueError("scale must be one of %s, got %r" % (SCALES, scale))
    ret = discounted_returns(step_rewards, mask, gamma)                 # (N, T)
    n, t = ret.shape
    r = ret.view(-1, group_size, t)                                     # (groups, G, T)
    m = mask.view(-1, group_size, t)
    count = m.sum(1, keepdim=True).clamp(min=1.0)
    mean = (r * m).sum(1, keepdim=True) / count
    centred = (r - mean) * m
    if scale == "group":
        var = (centred ** 2).sum(1, keepdim=True) / count
        centred = centred / (var.sqrt() + eps)
    elif scale == "batch":
        std = (centred ** 2).sum().div(m.sum().clamp(min=1.0)).sqrt()
        centred = centred / (std + eps)
    return centred.view(n, t) * mask


def gae(step_rewards, values, mask, gamma=0.99, lam=0.95):
    """Generalized advantage estimation for PPO mode.

    step_rewards, values, mask: (N, T). An episode's last step (terminated or cut by the time limit) is
    not bootstrapped: the simple convention, documented, that treats a time-limit cut like an ending.
    Returns (advantages (N, T), returns (N, T)).
    """
    n, t_max = step_rewards.shape
    adv = torch.zeros_like(step_rewards)
    last = torch.zeros(n, dtype=step_rewards.dtype, device=step_rewards.device)
    for t in range(t_max - 1, -1, -1):
        if t + 1 < t_max:
            nm = mask[:, t + 1]
            v_next = values[:, t + 1] * nm
        else:
            nm = torch.zeros_like(last)
            v_next = torch.zeros_like(last)
        delta = step_rewards[:, t] + gamma * v_next - values[:, t]
        last = delta + gamma * lam * nm * last
        adv[:, t] = last * mask[:, t]
    return adv, (adv + values) * mask
