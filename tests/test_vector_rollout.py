"""Lockstep control rollouts over gymnasium's batched environments give the per-environment loop's
results bit for bit; the padding-free log-probs equal the padded ones at every real step."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_edge.core.rollout import rollout_episodes, rollout_lockstep
from grpo_edge.tasks import get_task
from grpo_edge.tasks.vector_env import lockstep_envs

FIELDS = ("actions", "mask", "old_logp", "rewards", "step_rewards", "truncated")


def _policy(env_id):
    env = gym.make(env_id)
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(env.observation_space.shape[0], 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, env.action_space.n))


@pytest.mark.parametrize("env_id,kind,max_steps", [("CartPole-v1", "_VectorEntryEnvs", 500),
                                                   ("Acrobot-v1", "_SyncEnvs", 60)])
@pytest.mark.parametrize("greedy", [False, True])
def test_lockstep_rollout_equals_per_env_loop(env_id, kind, max_steps, greedy):
    policy, seeds, g = _policy(env_id), [11, 22, 33], 4
    torch.manual_seed(1)
    a = rollout_episodes(policy, [gym.make(env_id) for _ in range(len(seeds) * g)], seeds, g, max_steps,
                         greedy=greedy)
    envs = lockstep_envs(gym, env_id, len(seeds) * g)
    assert type(envs).__name__ == kind
    for _ in range(2):                       # the batched environments are reused across rollouts
        torch.manual_seed(1)
        b = rollout_lockstep(policy, envs, np.repeat(seeds, g), g, max_steps, greedy=greedy)
        for k in FIELDS:
            assert torch.equal(getattr(a, k), getattr(b, k)), k
        assert torch.equal(a.inputs["obs"], b.inputs["obs"]) and a.num_env_steps == b.num_env_steps


def test_padding_free_logprobs_match_padded():
    task = get_task("cartpole", {}, seed=0)
    policy = _policy("CartPole-v1")
    ro = task.rollout(policy, 3, 4)
    assert ro.mask.min() == 0                # episodes of different lengths: there is padding
    logp, ent = task.logprobs(policy, ro)
    n, t, d = ro.inputs["obs"].shape
    full = torch.log_softmax(policy(ro.inputs["obs"].reshape(n * t, d)), -1).reshape(n, t, -1)
    want = full.gather(-1, ro.actions.unsqueeze(-1)).squeeze(-1)
    real = ro.mask > 0
    assert torch.allclose(logp[real], want[real], atol=1e-6)
    assert torch.allclose(ent[real], -(full.exp() * full).sum(-1)[real], atol=1e-6)
    assert torch.equal(logp[~real], ro.old_logp[~real]) and float(ent.detach()[~real].abs().sum()) == 0.0
    logp.sum().backward()                    # gradients flow through the real steps
    assert all(p.grad is not None for p in policy.parameters())
