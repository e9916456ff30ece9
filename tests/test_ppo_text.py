"""PPO mode on a text task: the critic is a second micro-gpt with a value head (TextTask.values)."""
import torch

from grpo_edge.training_run import GRPOTrainer


def test_ppo_step_on_arithmetic():
    cfg = {"model": {"arch": "micro-gpt", "d_model": 32, "n_layer": 1, "n_head": 2, "max_len": 16},
           "task": {"name": "arithmetic", "max_operand": 9, "eval_size": 8},
           "training": {"steps": 1, "batch_size": 4, "threads": 1}, "grpo": {"algo": "ppo", "group_size": 4}}
    tr = GRPOTrainer(config=cfg, progress=False)
    ro = tr.task.rollout(tr.policy, 4, 4, tr.generator)
    values = tr.task.values(tr.critic, ro)
    assert values.shape == ro.actions.shape
    before = [p.detach().clone() for p in tr.critic.parameters()]
    m = tr.train_step()
    assert m["value_loss"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.critic.parameters()))
