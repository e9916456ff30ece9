"""Exploration noise correlated in time for continuous policies (task.noise_correlation, issue 41): the draws
are standard normal with the asked lag-1 correlation, the default path is unchanged, and on the real
MountainCarContinuous-v0 an untrained policy reaches the flag only with correlated noise."""
import pytest
import torch

from conftest import cli_in, one_error_line
from grpo_edge.core.distributions import CorrelatedNoise
from grpo_edge.core.models import build_model
from grpo_edge.tasks import get_task


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_draws_are_standard_normal_with_the_asked_correlation(rho):
    torch.manual_seed(0)
    noise = CorrelatedNoise(rho)
    like = torch.zeros(4000, 2)
    draws = torch.stack([noise(like) for _ in range(50)])            # (T, B, A)
    assert abs(float(draws.mean())) < 0.02 and abs(float(draws.std()) - 1.0) < 0.02
    lag1 = float((draws[1:] * draws[:-1]).mean())
    assert abs(lag1 - rho) < 0.02, lag1


def test_a_correlation_outside_0_1_is_refused():
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ValueError, match="noise correlation must be in"):
            CorrelatedNoise(bad)


def _reached(rho, seed=0):
    task = get_task("MountainCarContinuous-v0", {"noise_correlation": rho}, seed=seed)
    torch.manual_seed(seed)
    policy = build_model("mlp", hidden=64, **task.model_kwargs())
    rollout = task.rollout(policy, 4, 4)
    return int((rollout.rewards > 50).sum()), rollout


def test_only_correlated_noise_finds_the_flag_of_mountain_car():
    """MountainCarContinuous-v0 pays +100 at the flag: an untrained policy with independent noise never gets
    there (0 of 32 measured), with noise correlated by 0.9 most episodes do (24 of 32)."""
    white, _ = _reached(0.0)
    colored, rollout = _reached(0.9)
    assert white == 0 and colored >= 6, (white, colored)
    # the stored log-probabilities are those of the per-step Gaussian, as the update recomputes them
    task = get_task("MountainCarContinuous-v0", {"noise_correlation": 0.9}, seed=0)
    torch.manual_seed(0)
    policy = build_model("mlp", hidden=64, **task.model_kwargs())
    logp, _ = task.logprobs(policy, rollout)
    assert torch.allclose(logp * rollout.mask, rollout.old_logp * rollout.mask, atol=1e-5)


def test_no_correlation_is_the_independent_draw_of_before():
    task = get_task("Pendulum-v1", {}, seed=0)
    policy = build_model("mlp", hidden=16, **task.model_kwargs())
    from grpo_edge.core.rollout import rollout_lockstep
    runs = []
    for kw in ({}, {"noise_correlation": 0.0}):
        torch.manual_seed(3)
        runs.append(rollout_lockstep(policy, task._batched_envs(4), [1, 1, 2, 2], 2, 20,
                                     action_bounds=task._bounds(), **kw).actions)
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0][0], runs[0][1])                  # sampled, not greedy


def test_a_bad_noise_correlation_is_one_line(tmp_path):
    r = cli_in(tmp_path, "train", "--set", "task.name=Pendulum-v1", "--set", "task.noise_correlation=1.5",
               "--set", "training.steps=1")
    assert r.returncode == 2 and "noise_correlation" in one_error_line(r)


def test_noise_correlation_on_a_discrete_env_is_refused_not_ignored(tmp_path):
    r = cli_in(tmp_path, "train", "--set", "task.name=CartPole-v1", "--set", "task.noise_correlation=0.9",
               "--set", "training.steps=1")
    assert r.returncode == 2
    assert "task.noise_correlation applies to continuous actions; CartPole-v1's are discrete" in one_error_line(r)
