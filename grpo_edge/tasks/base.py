"""The Task interface: what the trainer, the CLI and the deploy pipelines ask of a task."""
from typing import Dict, Tuple

import numpy as np
import torch

from grpo_edge.core.rollout import Rollout


class Task:
    """A built-in or user task.

    kind: "control" (episodic env, per-step actions), "bandit" (one action per input, e.g. a label)
          or "sequence" (a completion of tokens per prompt).
    metric_name: the name of the evaluation metric in `evaluate()` ("return", "accuracy", "exact_match").
    """
    name = "task"          # a class that sets no name is named after itself (Loudest -> "loudest")
    kind = "control"
    metric_name = "return"
    higher_is_better = True

    def __init__(self, cfg: dict, seed: int = 0):
        self.cfg = cfg            # the resolved `task` section of the config (a dict)
        self.seed = seed
        if self.name == "task":
            self.name = type(self).__name__.lower()

    # --- what the model needs -------------------------------------------------------------
    def model_kwargs(self) -> dict:
        """Constructor kwargs the model takes from the task (obs_dim, n_actions, vocab_size, ...)."""
        raise NotImplementedError

    def checkpoint_meta(self) -> dict:
        """Plain data stored in the checkpoint: spaces, vocabulary, input shape, label names."""
        raise NotImplementedError

    # --- training -------------------------------------------------------------------------
    def rollout(self, policy, num_groups: int, group_size: int, generator: torch.Generator) -> Rollout:
        """Sample num_groups groups of group_size samples (inference mode)."""
        raise NotImplementedError

    def logprobs(self, policy, rollout: Rollout) -> Tuple[torch.Tensor, torch.Tensor]:
        """Re-compute (logp (N, T), entropy (N, T)) of rollout.actions under `policy` (with grad)."""
        raise NotImplementedError

    def warm_start_batches(self, batch_size: int, generator: torch.Generator):
        """Text tasks: an iterable over one epoch of supervised batches; returns None if not applicable."""
        return None

    def supervised_loss(self, policy, batch) -> torch.Tensor:
        raise NotImplementedError

    def get_state(self) -> dict:
        """Plain-data state needed for an exact resume (the task's sampling RNG)."""
        rng = getattr(self, "_rng", None)
        if rng is None:
            return {}
        st = rng.get_state()
        return {"rng": [st[0], torch.as_tensor(st[1].astype("int64")), int(st[2]), int(st[3]), float(st[4])]}

    def set_state(self, state: dict) -> None:
        if state and "rng" in state and getattr(self, "_rng", None) is not None:
            r = state["rng"]
            self._rng.set_state((r[0], r[1].cpu().numpy().astype("uint32"), r[2], r[3], r[4]))

    # --- evaluation / deploy ----------------------------------------------------------------
    def evaluate(self, policy, split: str = "test", n: int = 0) -> Dict[str, float]:
        """Greedy evaluation; the dict holds `metric_name`. n = 0 means the task's default size."""
        raise NotImplementedError

    def examples(self, policy, split: str = "test", k: int = 3):
        """k greedy examples of what the model does, as [{field: value}] (`grpo-edge eval --show k`); None when
        the task does not show any (a Task of your own may implement it)."""
        return None

    def calibration_inputs(self, n: int) -> np.ndarray:
        """Representative model inputs (float32, leading dim n) for int8 calibration."""
        raise NotImplementedError
