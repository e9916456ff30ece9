"""Tiny text checkpoints (micro-gpt arithmetic, tiny-transformer zh-en-numbers) for the deploy tests.

250 steps (a few seconds) of teacher-forced warm start on small tasks (operands 0..9, numbers 0..99), saved with
the trainer's checkpoint layout (arch, model_config, task, task_meta, config, model), so deploy and bench
treat them like real ones. Built once per test session by tests/session_cache.py.
"""
import torch

from grpo_edge.core.checkpoint import save_checkpoint
from grpo_edge.core.models import build_model

TEXT = {
    "arithmetic": ({"name": "arithmetic", "max_operand": 9},
                   "micro-gpt", dict(d_model=32, n_layer=2, n_head=2, max_len=16), 250),
    "zh-en-numbers": ({"name": "zh-en-numbers", "max_number": 99},
                      "tiny-transformer", dict(d_model=32, nhead=2, num_layers=1, dim_feedforward=64, max_len=32), 250),
}


def make_text_checkpoint(path, kind, seed=0):
    from grpo_edge.tasks import get_task
    task_cfg, arch, kwargs, steps = TEXT[kind]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # tiny model: more threads only contend on a shared CPU
    try:
        return _train_and_save(path, kind, task_cfg, arch, kwargs, steps, seed, get_task)
    finally:
        torch.set_num_threads(threads)


def _train_and_save(path, kind, task_cfg, arch, kwargs, steps, seed, get_task):
    torch.manual_seed(seed)
    task = get_task(kind, dict(task_cfg), seed=seed)
    model = build_model(arch, **dict(task.model_kwargs(), **kwargs))
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    done = 0
    while done < steps:
        for batch in task.warm_start_batches(32, gen):
            loss = task.supervised_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done >= steps:
                break
    model.eval()
    save_checkpoint(path, {"arch": model.arch, "model_config": model.config(), "task": kind,
                           "task_meta": task.checkpoint_meta(), "config": {"task": dict(task_cfg)},
                           "model": model.state_dict(), "step": steps})
    return path
