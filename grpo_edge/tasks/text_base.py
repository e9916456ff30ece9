"""What the built-in text tasks share: sampling groups of completions, scoring, warm start, evaluation.

A text task holds lists of problems ``(input_text, reference_text)`` for a train and a test split, a
CharTokenizer, and a way to turn input texts into a fixed-width id tensor (``encode_inputs``). The
policy is a generation model with ``generate(x, max_new_tokens, temperature, greedy, generator)`` and
``sequence_logprobs(x, tokens, temperature)`` (micro-gpt: x is the left-padded prompt; tiny-transformer:
x is the source). ``input_key`` names x in ``Rollout.inputs`` and in warm-start batches.
"""
from typing import Dict, List, Tuple

import numpy as np
import torch

from grpo_edge.core import devices
from grpo_edge.core.rollout import Rollout
from grpo_edge.core.tokenizer import EOS
from grpo_edge.errors import ConfigError
from grpo_edge.tasks.base import Task
from grpo_edge.tasks.rewards import WeightedRewards

Problem = Tuple[str, str]   # (input text, reference completion)


def cfg_get(cfg: dict, key: str, default, kind=None, minimum=None):
    """cfg[key] or `default`, checked to be of `kind` and >= `minimum` (a one-line ConfigError if not)."""
    value = cfg.get(key, default) if cfg else default
    if value is None:
        value = default
    if kind is not None and value is not None:
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
        if not ok:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            raise ConfigError("task.%s must be %s, got %r"
                              % (key, " or ".join(k.__name__ for k in kinds), value))
    if minimum is not None and value is not None and value < minimum:
        raise ConfigError("task.%s must be >= %s, got %r" % (key, minimum, value))
    return value


def padding_of(cfg: dict) -> str:
    """task.padding: "left" (the default) or "right", where prompts are padded (a one-line ConfigError if not)."""
    padding = cfg_get(cfg, "padding", "left", str)
    if padding not in ("left", "right"):
        raise ConfigError("task.padding must be left or right, got %r" % padding)
    return padding


class TextTask(Task):
    """Base class of the generated-text tasks (arithmetic, zh-en-numbers). Subclasses set up the data.

    After ``__init__`` a subclass must have set: ``tokenizer``, ``train_problems``, ``test_problems``,
    ``max_new_tokens``; and implement ``encode_inputs``. Config keys read here:
      temperature (1.0)      sampling temperature of rollouts (log-probs are taken at the same temperature)
      rewards                {name: weight}: built-ins or "module.path:fn" user callables
      reward (None)          one more user reward "module.path:fn" with weight 1.0
      reward_errors ("raise") "raise" or "skip" a reward that raises or returns NaN/inf
      eval_size (500)        problems scored by evaluate(n=0); 0 = the whole split
    """
    kind = "sequence"
    metric_name = "exact_match"
    archs = ("micro-gpt", "tiny-transformer")     # token generators
    ranges = {"temperature": (0, None, False), "eval_size": (0, None, True), "test_fraction": (0, 1, False, False),
              "split_seed": (0, 2 ** 32 - 1, True)}
    types = {"reward": str, "prompt_len": int, "max_new_tokens": int, "data_path": str, "mono_path": str,
             "bt_epochs": int, "vocab": str, "src_len": int}
    input_key = "prompt"
    default_rewards = {"exact_match": 1.0}
    eval_metrics = {}       # name -> fn(completion, reference, prompt), reported by evaluate() besides the rewards
    sampler = None          # optional: .sample(num_groups, generator) -> train indices, .observe(indices, (N,) scores, G)
    train_columns = None    # optional: one dict of data columns per train / test problem, for TRL-style rewards
    test_columns = None     # (None: the rewards get the reference as `answer`)

    def __init__(self, cfg: dict, seed: int = 0):
        cfg = dict(cfg or {})
        super(TextTask, self).__init__(cfg, seed)
        self.temperature = float(cfg_get(cfg, "temperature", 1.0, (int, float)))
        if self.temperature <= 0:
            raise ConfigError("task.temperature must be > 0 for sampling, got %r" % self.temperature)
        self.rewards = WeightedRewards(cfg_get(cfg, "rewards", dict(self.default_rewards), dict),
                                       extra=cfg.get("reward"),
                                       reward_errors=cfg_get(cfg, "reward_errors", "raise", str))
        self.eval_size = cfg_get(cfg, "eval_size", 500, int, 0)

    # --- subclass hooks ----------------------------------------------------------------------
    def encode_inputs(self, texts: List[str]) -> torch.Tensor:
        """Input texts -> (B, L) long ids with a fixed L."""
        raise NotImplementedError

    def answers(self, texts: List[str], prompts: List[str]) -> List[str]:
        """What the rewards and metrics score for completions (or references) `texts` of `prompts`: the texts
        themselves here; a task whose model writes an edit gives the edited input (pyfix's task.output edit)."""
        return list(texts)

    # --- model ---------------------------------------------------------------------------------
    def model_kwargs(self) -> dict:
        return {"vocab_size": self.tokenizer.vocab_size}

    def check_model(self, model) -> None:
        """One line when `model` cannot hold this task's longest sequence (its max_len): a decoder-only model
        reads the input and the completion but its last token, an encoder-decoder each on its own side."""
        max_len = (model.config() if hasattr(model, "config") else {}).get("max_len")
        if not max_len:
            return
        n_in = int(self.encode_inputs([self.train_problems[0][0]]).shape[1])
        if getattr(model, "arch", "") == "micro-gpt":
            need, how = n_in + self.max_new_tokens - 1, "input %d + completion %d - 1" % (n_in, self.max_new_tokens)
        else:
            need, how = max(n_in, self.max_new_tokens), "the longer of input %d and completion %d" % (
                n_in, self.max_new_tokens)
        if max_len < need:
            raise ConfigError("model.max_len=%d is shorter than task %s's longest sequence (%s = %d tokens); set "
                              "model.max_len >= %d" % (max_len, self.name, how, need, need))

    def columns(self, split: str):
        """The data columns of `split`'s problems (a list of dicts, in problem order), or None."""
        return self.train_columns if split == "train" else self.test_columns

    def check_rewards(self, n: int = 4) -> None:
        """Every reward called on the first n train problems (references as completions): one line naming a
        reward with the wrong signature, length or values, before any training (rewards.WeightedRewards.check)."""
        problems = self.train_problems[:n]
        columns = None if self.train_columns is None else self.train_columns[:n]
        prompts = [p for p, _ in problems]
        self.rewards.check(prompts, self.answers([r for _, r in problems], prompts), columns,
                           where="task %s's train data" % self.name)

    def problems(self, split: str) -> List[Problem]:
        if split not in ("train", "test"):
            raise ConfigError("split must be 'train' or 'test', got %r" % (split,))
        return self.train_problems if split == "train" else self.test_problems

    # --- training -----------------------------------------------------------------------------
    def rollout(self, policy, num_groups: int, group_size: int, generator: torch.Generator) -> Rollout:
        """Sample num_groups train problems (with replacement), group_size completions each."""
        device = devices.device_of(policy)
        if self.sampler is not None:                  # e.g. a curriculum (grpo_edge.data.curriculum)
            idx = self.sampler.sample(num_groups, generator)
        else:
            idx = devices.randint(len(self.train_problems), (num_groups,), generator).tolist()
        chosen, chosen_columns = self.rollout_problems(idx, generator)
        problems = [p for p in chosen for _ in range(group_size)]                     # sample i -> group i // G
        prompts = [p for p, _ in problems]
        refs = [r for _, r in problems]
        x = self.encode_inputs(prompts).to(device)                                     # (N, L)
        with torch.no_grad():
            tokens, logp, mask = policy.generate(x, self.max_new_tokens, temperature=self.temperature,
                                                 generator=generator)                  # each (N, Tn)
        completions = [self.tokenizer.decode(row) for row in tokens.tolist()]
        has_eos = ((tokens == EOS) & (mask > 0)).any(dim=1)                            # (N,)
        columns = None if chosen_columns is None else [c for c in chosen_columns for _ in range(group_size)]
        rewards, parts = self.rewards.score(self.answers(completions, prompts), self.answers(refs, prompts),
                                            prompts, columns)                          # (N,), {name: (N,)}
        if self.sampler is not None:
            self.sampler.observe(idx, parts.get(self.metric_name, rewards), group_size)
        return Rollout(
            actions=tokens, mask=mask.float(), old_logp=logp, rewards=rewards.to(device),
            group_size=group_size, inputs={self.input_key: x},
            reward_parts=dict((k, v.to(device)) for k, v in parts.items()),
            truncated=~has_eos, num_env_steps=int(mask.sum().item()),
            extras={"samples": list(zip(prompts, completions, refs))[:4]},
        )

    def rollout_problems(self, idx, generator):
        """(problems, their data columns or None) a rollout asks the policy about, for train indices `idx`."""
        columns = None if self.train_columns is None else [self.train_columns[i] for i in idx]
        return [self.train_problems[i] for i in idx], columns

    def logprobs(self, policy, rollout: Rollout):
        """(logp (N, Tn), entropy (N, Tn)) of rollout.actions at the sampling temperature, with grad."""
        return policy.sequence_logprobs(rollout.inputs[self.input_key], rollout.actions,
                                        temperature=self.temperature)

    def values(self, critic, rollout: Rollout) -> torch.Tensor:
        """PPO mode: the critic's value (N, Tn) before each completion token (a micro-gpt with out_dim=1,
        teacher-forced like logprobs; position i sees the prompt and tokens < i)."""
        prompt, tokens = rollout.inputs[self.input_key], rollout.actions
        idx = torch.cat([prompt, tokens[:, :-1]], dim=1)                               # (N, Tp + Tn - 1)
        return critic(idx)[:, prompt.shape[1] - 1:, 0]                                 # (N, Tn)

    def encode_targets(self, texts: List[str]) -> Tuple[torch.Tensor, torch.Tensor]:
        """References -> (ids (B, T) long: text + EOS then PAD, mask (B, T) float: 1 up to and with EOS)."""
        from grpo_edge.core.tokenizer import encode_targets
        return encode_targets(self.tokenizer, texts)

    def warm_start_batches(self, batch_size: int, generator: torch.Generator, problems=None):
        """One shuffled epoch over the train problems (or `problems`): {input_key: (B, L), "target": (B, T),
        "target_mask": (B, T)}."""
        problems = self.train_problems if problems is None else problems
        order = devices.randperm(len(problems), generator).tolist()
        for i in range(0, len(order), batch_size):
            chunk = [problems[j] for j in order[i:i + batch_size]]
            target, target_mask = self.encode_targets([r for _, r in chunk])
            yield {self.input_key: self.encode_inputs([p for p, _ in chunk]),
                   "target": target, "target_mask": target_mask}

    def supervised_loss(self, policy, batch) -> torch.Tensor:
        """Mean cross-entropy per target token (answer + EOS), teacher-forced at temperature 1."""
        device = devices.device_of(policy)
        mask = batch["target_mask"].to(device)                                         # (B, T)
        logp, _ = policy.sequence_logprobs(batch[self.input_key].to(device), batch["target"].to(device))
        return -(logp * mask).sum() / mask.sum().clamp(min=1.0)

    # --- evaluation / deploy ----------------------------------------------------------------------
    def greedy_completions(self, policy, prompts: List[str], batch_size: int = 256) -> List[str]:
        """Greedy decode of `prompts` (eval mode; a module's train/eval mode is restored after)."""
        device = devices.device_of(policy)
        was_training = getattr(policy, "training", False)
        if hasattr(policy, "eval"):
            policy.eval()
        out = []
        try:
            with torch.no_grad():
                for i in range(0, len(prompts), batch_size):
                    x = self.encode_inputs(prompts[i:i + batch_size]).to(device)
                    tokens, _, _ = policy.generate(x, self.max_new_tokens, greedy=True)
                    out += [self.tokenizer.decode(row) for row in tokens.tolist()]
        finally:
            if hasattr(policy, "train"):
                policy.train(was_training)
        return out

    def evaluate(self, policy, split: str = "test", n: int = 0) -> Dict[str, float]:
        """Greedy decode the first n problems of `split` (n = 0: eval_size; eval_size 0: all).

        Returns {metric_name, each eval metric, "reward" (weighted total), "n"}.
        """
        problems = self.problems(split)
        n = n or self.eval_size or len(problems)
        problems = problems[:n]
        prompts = [p for p, _ in problems]
        refs = self.answers([r for _, r in problems], prompts)
        completions = self.answers(self.greedy_completions(policy, prompts), prompts)
        result = {}
        for name, fn in sorted(self.eval_metrics.items()):
            result[name] = float(np.mean([fn(c, r, p) for c, r, p in zip(completions, refs, prompts)]))
        columns = self.columns(split)
        total, _ = self.rewards.score(completions, refs, prompts, None if columns is None else columns[:n])
        result["reward"] = float(total.mean())
        result["n"] = len(problems)
        result.update(self.breakdown(completions, list(zip(prompts, refs)), None if columns is None else columns[:n]))
        return result

    def breakdown(self, completions: List[str], problems: List[Problem], columns) -> Dict[str, float]:
        """More metrics for evaluate() from the greedy completions of `problems` (e.g. by kind); none here."""
        return {}

    def examples(self, policy, split: str = "test", k: int = 3):
        """The first k problems of `split`: prompt, the model's greedy answer, the reference, and each eval
        metric of that answer."""
        problems = self.problems(split)[:k]
        prompts = [p for p, _ in problems]
        completions = self.answers(self.greedy_completions(policy, prompts), prompts)
        refs = self.answers([r for _, r in problems], prompts)
        out = []
        for p, r, c in zip(prompts, refs, completions):
            row = {"prompt": p, "answer": c, "reference": r}
            row.update((name, float(fn(c, r, p))) for name, fn in sorted(self.eval_metrics.items()))
            out.append(row)
        return out

    def calibration_inputs(self, n: int, policy=None) -> np.ndarray:
        """(n, L) int64 input token ids from the train split (cycled when n > its size); `policy` is unused.

        Unlike float tasks these are token ids: the exported decode step takes ids and embeds them.
        """
        texts = [self.train_problems[i % len(self.train_problems)][0] for i in range(n)]
        return self.encode_inputs(texts).numpy().astype(np.int64)
