"""Evaluate exported artifacts: run them as if they were the torch policy, so a task scores them with its
own metric (used by every target's deploy and by the benchmarks).

    policy = ArrayPolicy(lambda x: sess.run(None, {"obs": x})[0])
    task.evaluate(policy)["return"]

Tasks call a policy like an nn.Module (policy(obs_tensor) -> logits tensor, .parameters(), .eval());
ArrayPolicy wraps any numpy function in that shape. Also: in-process latency measurement.
"""
import time

import numpy as np
import torch
from torch import nn


class ArrayPolicy(nn.Module):
    """nn.Module facade over fn(np.ndarray float32 batch) -> np.ndarray logits batch (no gradients)."""

    def __init__(self, fn, name="artifact"):
        super(ArrayPolicy, self).__init__()
        self.fn = fn
        self.name = name
        self._anchor = nn.Parameter(torch.zeros(1), requires_grad=False)   # tasks read .parameters() for the device

    def forward(self, x):
        out = self.fn(np.ascontiguousarray(x.detach().cpu().numpy()))
        return torch.as_tensor(np.asarray(out), dtype=torch.float32)


def onnx_policy(path, reference=False):
    """An ArrayPolicy running an ONNX file in onnxruntime (reference=True: graph optimizations off)."""
    from grpo_edge.export.onnx_utils import session
    sess = session(path, optimize=not reference)
    name = sess.get_inputs()[0].name
    return ArrayPolicy(lambda x: sess.run(None, {name: x})[0], name=str(path))


# a continuous action "agrees" when every dimension is within this share of its range of the reference's
ACTION_TOLERANCE = 0.01


def action_errors(got, ref, action_range):
    """Per input, the largest |got - ref| over the action dimensions, relative to each one's range:
    (B, A) x2 -> (B,)."""
    rng = np.asarray(action_range, dtype=np.float64).reshape(1, -1)
    return (np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64)) / rng).max(-1)


def agreement(got, ref, action_range=None) -> float:
    """Share of inputs where an artifact decides as the reference: the same argmax (discrete policies), or,
    with action_range (grpo_edge.core.distributions.action_range: a continuous policy), every action
    within ACTION_TOLERANCE of its range; a single output column (a user's regression or value model), within
    ACTION_TOLERANCE of the reference's range over these inputs."""
    got, ref = np.asarray(got), np.asarray(ref)
    if action_range is None and ref.ndim == 2 and ref.shape[-1] == 1:     # one output: no argmax to compare
        span = float(ref.max() - ref.min())
        action_range = [span if span > 0 else 1.0]
    if action_range is not None:
        return float((action_errors(got, ref, action_range) <= ACTION_TOLERANCE).mean())
    return float((got.argmax(-1) == ref.argmax(-1)).mean())


def task_metric(task, policy, n: int = 0) -> float:
    """The task's own metric (task.metric_name) of `policy`, greedy, on the task's evaluation split."""
    with torch.no_grad():
        res = task.evaluate(policy, n=n) if n else task.evaluate(policy)
    return float(res[task.metric_name])


def task_metric_stats(task, policy) -> dict:
    """The task's metric of `policy` (greedy, evaluation split) with its spread when the task reports one:
    {"mean", "std" (per episode, or None), "n" (episodes, or None)}."""
    with torch.no_grad():
        res = task.evaluate(policy)
    std = res.get(task.metric_name + "_std")
    return {"mean": float(res[task.metric_name]), "std": None if std is None else float(std),
            "n": int(res["n"]) if res.get("n") else None}


def median_latency(fn, example, runs: int = 500, warmup: int = 50) -> float:
    """Median seconds per call of fn(example), after warm-up (in this process, single sample)."""
    for _ in range(warmup):
        fn(example)
    t = np.empty(runs)
    for i in range(runs):
        t0 = time.perf_counter()
        fn(example)
        t[i] = time.perf_counter() - t0
    return float(np.median(t))


def retention(metric_new: float, metric_ref: float, higher_is_better: bool = True) -> float:
    """metric_new / metric_ref as a fraction (1.0 = kept everything); for lower-is-better metrics the inverse."""
    if metric_ref == 0:
        return 1.0 if metric_new == metric_ref else float("nan")
    return metric_new / metric_ref if higher_is_better else metric_ref / metric_new


def text_metric(task, completions, problems) -> float:
    """The text task's metric (task.metric_name, e.g. exact_match) of given completions of (prompt, ref) problems.

    What task.evaluate reports, computed on completions from any runtime (the ONNX generation loop).
    """
    if hasattr(task, "metric_of"):                 # a metric that needs more than (completion, reference, prompt)
        return float(task.metric_of(completions, problems))
    prompts, refs = [p for p, _ in problems], [r for _, r in problems]
    fn = getattr(task, "eval_metrics", {}).get(task.metric_name)
    if fn is not None:
        return float(np.mean([fn(c, r, p) for c, r, p in zip(completions, refs, prompts)]))
    _, parts = task.rewards.score(completions, refs, prompts)
    return float(parts[task.metric_name].mean())


def eval_problems(task, n: int = 0) -> list:
    """The (prompt, reference) problems task.evaluate(n=n) scores: the first n (0: eval_size) of the test split."""
    problems = task.problems("test")
    return problems[:n or task.eval_size or len(problems)]
