"""PPO mode and the gradient penalty on the text models (micro-gpt: arithmetic; tiny-transformer:
zh-en-numbers). PPO's critic is a second model of the policy's architecture with a value head
(task.values); the penalty differentiates the policy gradient, so attention takes its written-out path
(core/models/_layers.py: double_backward), whose double backward torch implements."""
import pytest
import torch

from grpo_edge.core.models._layers import double_backward
from grpo_edge.training_run import GRPOTrainer

MICRO_GPT = {"model": {"arch": "micro-gpt", "d_model": 32, "n_layer": 1, "n_head": 2, "max_len": 16},
             "task": {"name": "arithmetic", "max_operand": 9, "eval_size": 8}}
TINY_TRANSFORMER = {"model": {"arch": "tiny-transformer", "d_model": 32, "num_layers": 1, "nhead": 2},
                    "task": {"name": "zh-en-numbers", "eval_size": 8}}
STEP = {"steps": 1, "batch_size": 4, "threads": 1, "warm_start_epochs": 0, "eval_every": 0, "seed": 3}


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("base", [MICRO_GPT, TINY_TRANSFORMER], ids=["micro-gpt", "tiny-transformer"])
def test_ppo_step_on_text_models(base):
    cfg = dict(base, training=STEP, grpo={"algo": "ppo", "group_size": 4})
    tr = GRPOTrainer(config=cfg, progress=False)
    ro = tr.task.rollout(tr.policy, 4, 4, tr.generator)
    values = tr.task.values(tr.critic, ro)
    assert values.shape == ro.actions.shape
    before = [p.detach().clone() for p in tr.critic.parameters()]
    m = tr.train_step()
    assert m["value_loss"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.critic.parameters()))


@pytest.mark.parametrize("base", [MICRO_GPT, TINY_TRANSFORMER], ids=["micro-gpt", "tiny-transformer"])
def test_grad_penalty_on_text_models(base):
    """issue 31: grpo.grad_penalty_lambda crashed both text models at the first step (no derivative of the
    fused attention's backward). Now it trains, and the update differs from lambda = 0."""
    def one_step(lam, **training):
        cfg = dict(base, training=dict(STEP, **training), grpo={"group_size": 4, "grad_penalty_lambda": lam})
        tr = GRPOTrainer(config=cfg, progress=False)
        m = tr.train_step()
        return _params(tr.policy), m
    p0, _ = one_step(0.0)
    p1, m = one_step(0.3)
    assert m["grad_penalty"] > 0 and m["policy_grad_norm"] > 0 and bool(torch.isfinite(p1).all())
    assert not torch.allclose(p0, p1)
    if base is MICRO_GPT:          # with gradient checkpointing: the recomputation takes the same path
        p2, _ = one_step(0.3, gradient_checkpointing=1)
        assert torch.allclose(p1, p2, atol=1e-5)


def test_double_backward_attention_computes_the_same_function():
    torch.manual_seed(0)
    tr = GRPOTrainer(config=dict(MICRO_GPT, training=STEP, grpo={"group_size": 4}), progress=False)
    ro = tr.task.rollout(tr.policy, 2, 4, tr.generator)
    fused, _ = tr.task.logprobs(tr.policy, ro)
    with double_backward():
        plain, _ = tr.task.logprobs(tr.policy, ro)
    assert torch.allclose(fused, plain, atol=1e-5)
