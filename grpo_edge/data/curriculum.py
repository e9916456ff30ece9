"""Dynamic curriculum: difficulty-stratified sampling of a text task's training items, easy to hard.

    trainer = GRPOTrainer(config="configs/arithmetic.yaml")
    trainer.enable_curriculum(difficulty_metric="perplexity", stages=5)     # or config `curriculum:`
    trainer.train()                                                         # metrics: curriculum_stage

How it works. When GRPO starts (after the warm start, so that a model-based difficulty sees the
warm-started policy), every training item (prompt, reference) gets a difficulty:

    length     characters of prompt + reference (no model needed)
    perplexity per-token perplexity of the reference under the policy (teacher-forced, eval mode)
    pass_rate  1 - mean primary reward of `samples` completions sampled from the policy

Items are sorted by difficulty (ties in random order) and cut into `stages` equal bins. At stage s
(1-based) a rollout batch draws `new_fraction` of its prompts from bin s and the rest from bins
1..s-1 (stage 1: all from bin 1), so earlier stages stay in the mix. Stage s is mastered when the mean
primary reward (the task's metric part, e.g. exact_match) of the bin-s prompts over the last `window`
steps reaches `threshold`; then stage s+1 starts. After the last stage is mastered, sampling is
uniform over all items. `max_stage_steps` > 0 advances a stage that takes longer than that.
The ranking is computed once; it is saved in checkpoints, so a resumed run continues exactly.
"""
from typing import List, Optional

import numpy as np
import torch

from grpo_edge.core import devices
from grpo_edge.errors import ConfigError

METRICS = ("perplexity", "length", "pass_rate")


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ConfigError("unknown curriculum difficulty metric %r; valid: %s" % (metric, ", ".join(METRICS)))
    return metric


def _primary(task, rewards, parts):
    """The task's main reward per sample: its metric part (exact_match) when it has one, else the total."""
    return parts.get(task.metric_name, rewards).float()


def difficulties(task, policy, metric: str, samples: int = 4, generator=None, batch_size: int = 512) -> torch.Tensor:
    """(n_items,) float difficulty of each of task.train_problems (higher = harder)."""
    check_metric(metric)
    items = task.train_problems
    if metric == "length":
        return torch.tensor([float(len(p) + len(r)) for p, r in items])
    from grpo_edge.core.devices import device_of
    device = device_of(policy)
    was_training = policy.training
    policy.eval()
    out = []
    try:
        with torch.no_grad():
            for i in range(0, len(items), batch_size):
                chunk = items[i:i + batch_size]
                prompts, refs = [p for p, _ in chunk], [r for _, r in chunk]
                x = task.encode_inputs(prompts).to(device)                     # (b, L)
                if metric == "perplexity":
                    target, mask = task.encode_targets(refs)                   # (b, T) each
                    logp, _ = policy.sequence_logprobs(x, target.to(device))   # (b, T)
                    mask = mask.to(device)
                    nll = -(logp * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                    out.append(nll.exp().cpu())
                else:                                                          # pass_rate
                    xs = x.repeat_interleave(samples, 0)                       # (b * k, L)
                    tokens, _, _ = policy.generate(xs, task.max_new_tokens, temperature=task.temperature,
                                                   generator=generator)
                    comps = [task.tokenizer.decode(row) for row in tokens.tolist()]
                    rep = [r for r in refs for _ in range(samples)]
                    rp = [p for p in prompts for _ in range(samples)]
                    total, parts = task.rewards.score(comps, rep, rp)
                    rate = _primary(task, total, parts).view(len(chunk), samples).mean(1)
                    out.append(1.0 - rate.cpu())
    finally:
        policy.train(was_training)
    return torch.cat(out)


class Curriculum(object):
    """The sampler a TextTask consults (task.sampler): stage bins, sampling, mastery and state."""

    def __init__(self, metric: str = "perplexity", stages: int = 5, threshold: float = 0.6, window: int = 3,
                 new_fraction: float = 0.5, max_stage_steps: int = 0, samples: int = 4):
        self.metric = check_metric(metric)
        if not isinstance(stages, int) or stages < 1:
            raise ConfigError("curriculum stages must be an integer >= 1, got %r" % (stages,))
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError("curriculum threshold must be in [0, 1] (a mean reward), got %r" % (threshold,))
        if not 0.0 < new_fraction <= 1.0:
            raise ConfigError("curriculum new_fraction must be in (0, 1], got %r" % (new_fraction,))
        if window < 1 or max_stage_steps < 0 or samples < 1:
            raise ConfigError("curriculum window and samples must be >= 1 and max_stage_steps >= 0")
        self.stages, self.threshold, self.window = stages, float(threshold), int(window)
        self.new_fraction, self.max_stage_steps, self.samples = float(new_fraction), int(max_stage_steps), int(samples)
        self.order = None            # (n,) long: item indices, easiest first
        self.bounds = []             # bin s = order[bounds[s]:bounds[s + 1]]
        self.stage = 0               # 0-based; == stages once every stage is mastered
        self.steps_in_stage = 0
        self.recent = []             # per step: (sum of newest-bin scores, count)
        self.advanced_at = []        # step (sample call count) at which each stage was mastered
        self.calls = 0

    # --- set-up ---------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.order is not None

    def fit(self, task, policy=None, generator=None) -> None:
        """Score every training item and cut the ranking into stage bins."""
        if not hasattr(task, "train_problems") or not hasattr(task, "encode_inputs"):
            raise ConfigError("curriculum needs a task that exposes its training items (text tasks such as "
                              "arithmetic or zh-en-numbers); %s does not" % getattr(task, "name", task))
        n = len(task.train_problems)
        if n < self.stages:
            raise ConfigError("curriculum: %d training items cannot fill %d stages" % (n, self.stages))
        if self.metric != "length" and policy is None:
            raise ConfigError("curriculum metric %r needs the policy to score items" % self.metric)
        d = difficulties(task, policy, self.metric, self.samples, generator)
        tie = devices.randperm(n, generator).numpy()                   # equal difficulty: random order
        self.set_order(torch.from_numpy(np.lexsort((tie, d.double().numpy()))))
        self.difficulty_range = (float(d.min()), float(d.max()))

    def set_order(self, order) -> None:
        self.order = torch.as_tensor(order, dtype=torch.long)
        n = len(self.order)
        self.bounds = [int(round(s * n / float(self.stages))) for s in range(self.stages + 1)]

    def bin(self, s: int) -> torch.Tensor:
        return self.order[self.bounds[s]:self.bounds[s + 1]]

    # --- the sampler protocol (TextTask.rollout) ---------------------------------------------
    def sample(self, num_groups: int, generator) -> List[int]:
        """Train item indices for one rollout batch: new_fraction from the current bin, the rest easier."""
        self.calls += 1
        self.batch_stage = min(self.stage, self.stages - 1)                      # what this batch is logged as
        if self.stage >= self.stages:                                            # done: uniform
            return devices.randint(len(self.order), (num_groups,), generator).tolist()
        new = self.bin(self.stage)
        n_new = num_groups if self.stage == 0 else max(1, int(round(self.new_fraction * num_groups)))
        pick = new[devices.randint(len(new), (n_new,), generator)]
        if n_new < num_groups:
            old = self.order[:self.bounds[self.stage]]
            pick = torch.cat([pick, old[devices.randint(len(old), (num_groups - n_new,), generator)]])
        self._newest = set(new.tolist())
        return pick.tolist()

    def observe(self, items: List[int], scores: torch.Tensor, group_size: int) -> None:
        """Per-sample primary rewards (N,) of a batch drawn by sample(); updates mastery and the stage."""
        if self.stage >= self.stages:
            return
        per_group = scores.detach().float().cpu().view(-1, group_size).mean(1)   # (B,)
        newest = [float(s) for i, s in zip(items, per_group.tolist()) if i in self._newest]
        self.recent = (self.recent + [(sum(newest), len(newest))])[-self.window:]
        self.steps_in_stage += 1
        if (len(self.recent) >= self.window and self.pass_rate() >= self.threshold) or \
                (self.max_stage_steps and self.steps_in_stage >= self.max_stage_steps):
            self.advanced_at.append(self.calls)
            self.stage += 1
            self.steps_in_stage = 0
            self.recent = []

    def pass_rate(self) -> Optional[float]:
        total = sum(c for _, c in self.recent)
        return sum(s for s, _ in self.recent) / total if total else None

    def metrics(self) -> dict:
        """What the trainer logs each step: the 1-based stage of the last batch, done (every stage mastered:
        sampling is uniform from now on) and the current stage's pass rate."""
        rate = self.pass_rate()
        out = {"curriculum_stage": float(getattr(self, "batch_stage", min(self.stage, self.stages - 1)) + 1),
               "curriculum_done": float(self.stage >= self.stages)}
        if rate is not None:
            out["curriculum_pass"] = rate
        return out

    # --- resume ---------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"metric": self.metric, "order": self.order, "stage": self.stage,
                "steps_in_stage": self.steps_in_stage, "recent": [list(r) for r in self.recent],
                "advanced_at": list(self.advanced_at), "calls": self.calls,
                "newest": sorted(getattr(self, "_newest", ()))}

    def load_state_dict(self, state: dict) -> None:
        self.set_order(state["order"])
        self.stage, self.steps_in_stage = int(state["stage"]), int(state["steps_in_stage"])
        self.recent = [tuple(r) for r in state["recent"]]
        self.advanced_at, self.calls = list(state["advanced_at"]), int(state["calls"])
        self._newest = set(state.get("newest", []))
