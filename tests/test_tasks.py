"""Control and digits tasks: group structure, rewards, evaluation, calibration inputs (real gymnasium / sklearn)."""
import numpy as np
import torch

from grpo_edge.core.models import build_model
from grpo_edge.tasks import get_task


def test_cartpole_groups_share_their_start_state_and_rewards_are_env_rewards():
    task = get_task("cartpole", {"max_steps": 50}, seed=0)
    torch.manual_seed(0)
    policy = build_model("mlp", **task.model_kwargs())
    ro = task.rollout(policy, num_groups=3, group_size=4)
    obs0 = ro.inputs["obs"][:, 0]                                   # (N, obs_dim) first observation
    for g in range(3):
        assert torch.equal(obs0[4 * g], obs0[4 * g + 3])            # same seeded reset inside a group
    assert not torch.equal(obs0[0], obs0[4])                        # different start states across groups
    # CartPole pays +1 per step survived: total reward == episode length
    assert torch.equal(ro.rewards, ro.mask.sum(1))
    assert ro.num_env_steps == int(ro.mask.sum())
    lp, ent = task.logprobs(policy, ro)
    assert torch.allclose(lp * ro.mask, ro.old_logp * ro.mask, atol=1e-6)
    assert (ent[ro.mask > 0] > 0).all()


def test_cartpole_evaluate_and_calibration():
    task = get_task("cartpole", {"eval_episodes": 5}, seed=0)
    policy = build_model("mlp", **task.model_kwargs())
    res = task.evaluate(policy)
    assert res["n"] == 5 and 8 <= res["return"] <= 500
    assert res == task.evaluate(policy)                            # fixed held-out seeds: deterministic
    x = task.calibration_inputs(64, policy=policy)
    assert x.shape == (64, 4) and x.dtype == np.float32


def test_digits_bandit_reward_is_label_correctness():
    task = get_task("digits", {}, seed=0)
    policy = build_model("lite-resnet", **task.model_kwargs())
    g = torch.Generator().manual_seed(0)
    ro = task.rollout(policy, num_groups=16, group_size=8, generator=g)
    x = ro.inputs["x"]
    # recover each sample's label from the dataset and check the reward
    flat = task.x_train.reshape(len(task.x_train), -1)
    for i in range(0, 128, 8):
        j = int(np.argmin(np.abs(flat - x[i].numpy().reshape(1, -1)).sum(1)))
        want = (ro.actions[i:i + 8, 0].numpy() == task.y_train[j]).astype(np.float32)
        assert np.array_equal(ro.rewards[i:i + 8].numpy(), want)
    assert len(set(task.y_test.tolist())) == 10
    assert task.evaluate(policy)["n"] == len(task.y_test)
