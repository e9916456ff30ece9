"""Micro-batches (grpo_edge/core/microbatch.py): the split backward gives the unsplit gradient, and the
default budget splits the seed-size micro-gpt step while leaving small models whole."""
import pytest
import torch

from grpo_edge.core import microbatch
from grpo_edge.training_run import GRPOTrainer


def _trainer(grpo=None, model=None, task=None):
    cfg = {"model": dict({"arch": "micro-gpt", "d_model": 32, "n_layer": 2, "n_head": 2, "max_len": 32}, **(model or {})),
           "task": dict({"name": "arithmetic", "max_new_tokens": 8}, **(task or {})),
           "training": {"batch_size": 3, "seed": 0, "device": "cpu", "threads": 1},
           "grpo": dict({"group_size": 4}, **(grpo or {}))}
    return GRPOTrainer(config=cfg, progress=False)


def _grads(tr, ro, micro):
    tr.policy.zero_grad()
    if tr.critic is not None:
        tr.critic.zero_grad()
    keep = torch.arange(len(ro))
    st = tr._minibatch_backward(ro, keep, keep, 1, 0.0, ro.mask.shape[1], float(ro.mask_loss.sum()), micro)
    params = list(tr.policy.parameters()) + (list(tr.critic.parameters()) if tr.critic is not None else [])
    return torch.cat([p.grad.flatten() for p in params if p.grad is not None]), st


@pytest.mark.parametrize("grpo", [{"loss_type": "grpo"}, {"loss_type": "bnpo"}, {"loss_type": "dapo"},
                                  {"loss_type": "dr_grpo", "scale_rewards": "none"},
                                  {"importance_level": "sequence", "entropy_coef": 0.01},
                                  {"beta": 0.05}, {"algo": "ppo"}])
def test_micro_batches_give_the_unsplit_gradient(grpo):
    tr = _trainer(grpo)
    tr.policy.eval()
    ro = tr._rollout(4)
    tr.compute_advantages(ro)
    ro.mask_loss = ro.mask.clone()
    if tr.ref_policy is not None:
        with torch.no_grad():
            ro.ref_logp, _ = tr.task.logprobs(tr.ref_policy, ro)
    tr.policy.train()
    whole, st_whole = _grads(tr, ro, 0)
    for micro in (1, 5):                     # 12 samples: 12 pieces of 1, or 5 + 5 + 2
        split, st = _grads(tr, ro, micro)
        assert torch.allclose(split, whole, rtol=1e-4, atol=1e-7), (micro, float((split - whole).abs().max()))
        assert abs(st["loss"] - st_whole["loss"]) < 1e-5


def test_default_budget_splits_seed_size_microgpt_only():
    tr = _trainer(model={"d_model": 232, "n_layer": 6, "n_head": 8, "max_len": 128}, task={"max_new_tokens": 64})
    ro = type("R", (), {})()                 # 256 samples x (8 prompt + 64 completion) tokens
    ro.mask = torch.ones(256, 64)
    ro.inputs = {"prompt": torch.zeros(256, 8, dtype=torch.long)}
    size = microbatch.micro_batch_size(tr.policy, ro, 128)
    assert 4 <= size < 64, size
    assert microbatch.micro_batch_size(tr.policy, ro, 0) == 0
    cart = GRPOTrainer(config="configs/cartpole.yaml", progress=False)
    ro.mask, ro.inputs = torch.ones(32, 500), {"obs": torch.zeros(32, 500, 4)}
    assert microbatch.micro_batch_size(cart.policy, ro, 128) >= 32     # the CartPole update stays whole


def test_weights_sum_to_the_minibatch_loss():
    mask = torch.tensor([[1., 1., 0.], [1., 0., 0.], [1., 1., 1.]])
    parts = microbatch.split(torch.arange(3), 2)
    assert [len(p) for p in parts] == [2, 1]
    assert microbatch.weights(parts, mask, "grpo") == [2 / 3., 1 / 3.]
    assert microbatch.weights(parts, mask, "bnpo") == [0.5, 0.5]
    assert microbatch.weights(parts, mask, "dapo", True) == [1.0, 1.0]
