"""Synthetic-data distillation: a larger local teacher answers prompts, the task's reward filters the
answers, and the survivors are mixed into the student's training data (warm start and GRPO).

    from grpo_edge.data.distill import distill, mix_into
    pairs, stats = distill(task, "runs/arith_big/best.pt", prompts=unlabeled, ratio=1.0)
    mix_into(task, pairs)
    # or trainer.distill_from("runs/arith_big/best.pt", prompts=unlabeled), or the config section
    # `distill: {teacher: runs/arith_big/best.pt, prompts_path: prompts.txt, ratio: 1.0}`

The teacher is local only (no model hub): a grpo-edge checkpoint of the same task and vocabulary
(typically a larger model config), any generation model with the policies' contract
``generate(x, max_new_tokens, temperature=, greedy=, generator=) -> (tokens, logp, mask)``, or a plain
callable ``fn(prompts: List[str], k: int) -> List[List[str]]`` (k answers per prompt) wrapping any
other local model.

Filter. The teacher samples `candidates` answers per prompt. A labeled prompt (one of the task's train
problems) scores each answer against its reference; an unlabeled prompt (``prompts``) scores against
the teacher's own majority answer, and only when at least `min_agreement` of its answers agree
(self-consistency). An answer is kept when the task's primary reward (its metric part, e.g.
exact_match; else the weighted total) is >= `min_reward` and the (prompt, answer) pair is new. With an
exact-match reward a labeled prompt can only yield its reference again (nothing new), so the gain comes
from unlabeled prompts. Prompts of the held-out test split are never used. At most
round(ratio * number of real train problems) pairs are mixed in (a seeded random subset).
"""
import os
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from grpo_edge.errors import CheckpointError, ConfigError

Pair = Tuple[str, str]


class _ModelTeacher(object):
    """A generation model driven through the task's own input encoding."""

    def __init__(self, model, task):
        self.model, self.task = model, task

    def answer(self, prompts: List[str], k: int, temperature: float, generator, batch_size: int = 512):
        from grpo_edge.core.devices import device_of
        device = device_of(self.model)
        was_training = getattr(self.model, "training", False)
        if hasattr(self.model, "eval"):
            self.model.eval()
        out = []
        try:
            with torch.no_grad():
                for i in range(0, len(prompts), batch_size):
                    chunk = prompts[i:i + batch_size]
                    x = self.task.encode_inputs(chunk).to(device).repeat_interleave(k, 0)   # (b * k, L)
                    tokens, _, _ = self.model.generate(x, self.task.max_new_tokens, temperature=temperature,
                                                       generator=generator)
                    texts = [self.task.tokenizer.decode(row) for row in tokens.tolist()]
                    out += [texts[j * k:(j + 1) * k] for j in range(len(chunk))]
        finally:
            if hasattr(self.model, "train"):
                self.model.train(was_training)
        return out


class _CallableTeacher(object):
    def __init__(self, fn):
        self.fn = fn

    def answer(self, prompts: List[str], k: int, temperature: float, generator):
        out = self.fn(list(prompts), k)
        if not isinstance(out, (list, tuple)) or len(out) != len(prompts) or \
                any(not isinstance(a, (list, tuple)) or not all(isinstance(s, str) for s in a) for a in out):
            raise ConfigError("teacher callable must return one list of answer strings per prompt "
                              "(%d prompts)" % len(prompts))
        return [list(a) for a in out]


def load_teacher(teacher, task):
    """A checkpoint path, a generation model, or a callable -> an object with .answer(prompts, k, T, gen)."""
    if isinstance(teacher, (str, os.PathLike)):
        return _ModelTeacher(_teacher_checkpoint(str(teacher), task), task)
    if hasattr(teacher, "generate"):
        return _ModelTeacher(teacher, task)
    if callable(teacher):
        return _CallableTeacher(teacher)
    raise ConfigError("teacher must be a checkpoint path, a model with generate(), or a callable "
                      "fn(prompts, k) -> answers; got %s" % type(teacher).__name__)


def _teacher_checkpoint(path: str, task):
    from grpo_edge.core.checkpoint import load_policy
    if not os.path.isfile(path):
        raise CheckpointError("teacher checkpoint %s does not exist (distill.teacher is a local grpo-edge "
                              "checkpoint; no model hub)" % path)
    model, state = load_policy(path)
    meta, mine = state.get("task_meta", {}), task.checkpoint_meta()
    if state.get("task") != task.name:
        raise CheckpointError("teacher %s was trained on task %r, not %r" % (path, state.get("task"), task.name))
    if meta.get("tokenizer") != mine.get("tokenizer"):
        theirs = (meta.get("tokenizer") or {}).get("chars", "?")
        raise CheckpointError("teacher %s has another vocabulary (%d characters %r; the task has %d %r)"
                              % (path, len(theirs), theirs[:30], len(task.tokenizer.chars), task.tokenizer.chars[:30]))
    if meta.get("input_shape") != mine.get("input_shape"):
        raise CheckpointError("teacher %s takes inputs of shape %s, the task gives %s"
                              % (path, meta.get("input_shape"), mine.get("input_shape")))
    if not hasattr(model, "generate"):
        raise CheckpointError("teacher %s is a %s, which does not generate text" % (path, state["arch"]))
    return model


def read_prompts(path: str, task) -> List[str]:
    """Non-blank lines of a UTF-8 file; every character must be in the task's vocabulary."""
    from grpo_edge.data.bilingual import read_lines
    if not os.path.isfile(path):
        raise ConfigError("distill prompts file %s does not exist" % path)
    out = []
    for lineno, line in enumerate(read_lines(path), 1):
        text = line.strip()
        if not text:
            continue
        bad = sorted(set(c for c in text if c not in task.tokenizer.stoi))
        if bad:
            raise ConfigError("%s:%d: prompt %r has characters outside the task's vocabulary: %r"
                              % (path, lineno, text[:40], "".join(bad)))
        out.append(text)
    if not out:
        raise ConfigError("distill prompts file %s holds no prompts" % path)
    return out


def primary_scores(task, completions: List[str], refs: List[str], prompts: List[str]) -> torch.Tensor:
    """(n,) the task's primary reward: its metric part (exact_match) when it has one, else the total."""
    total, parts = task.rewards.score(completions, refs, prompts)
    return parts.get(task.metric_name, total).float()


def filter_candidates(task, prompts: Sequence[str], refs: Sequence[Optional[str]], answers: Sequence[List[str]],
                      min_reward: float = 1.0, min_agreement: float = 0.5, known=()) -> Tuple[List[Pair], Dict]:
    """Keep (prompt, answer) pairs whose primary reward against the reference (or, for ref None, the
    majority answer when >= min_agreement of the answers agree) is >= min_reward; skip `known` pairs."""
    stats = {"prompts": len(prompts), "answers": 0, "low_agreement": 0, "below_reward": 0, "duplicate": 0}
    seen = set(known)
    flat_p, flat_c, flat_r = [], [], []
    for p, r, cands in zip(prompts, refs, answers):
        cands = [c.strip() for c in cands]
        stats["answers"] += len(cands)
        if r is None:
            top, count = Counter(cands).most_common(1)[0] if cands else ("", 0)
            if not top or count < min_agreement * len(cands):
                stats["low_agreement"] += 1
                continue
            r = top
        for c in dict.fromkeys(cands):                 # distinct answers, in order
            flat_p.append(p)
            flat_c.append(c)
            flat_r.append(r)
    kept = []
    if flat_c:
        scores = primary_scores(task, flat_c, flat_r, flat_p)
        for p, c, s in zip(flat_p, flat_c, scores.tolist()):
            if s < min_reward or not c:
                stats["below_reward"] += 1
            elif (p, c) in seen:
                stats["duplicate"] += 1
            else:
                seen.add((p, c))
                kept.append((p, c))
    stats["kept"] = len(kept)
    return kept, stats


def distill(task, teacher, prompts: Optional[Sequence[str]] = None, ratio: float = 1.0, candidates: int = 4,
            temperature: float = 1.0, min_reward: float = 1.0, min_agreement: float = 0.5,
            seed: int = 0, labeled: bool = True) -> Tuple[List[Pair], Dict]:
    """Teacher-generated, reward-filtered synthetic (prompt, answer) pairs for `task`, and counts.

    prompts: extra unlabeled prompts; labeled: also let the teacher answer the task's train prompts.
    """
    if not hasattr(task, "train_problems") or not hasattr(task, "encode_inputs"):
        raise ConfigError("distillation needs a text task (prompts and answers); %s is not one"
                          % getattr(task, "name", task))
    if ratio < 0 or candidates < 1 or temperature <= 0 or not 0 < min_agreement <= 1:
        raise ConfigError("distill: ratio >= 0, candidates >= 1, temperature > 0 and min_agreement in (0, 1] "
                          "are required, got %r, %r, %r, %r" % (ratio, candidates, temperature, min_agreement))
    t = load_teacher(teacher, task)
    gen = torch.Generator().manual_seed(seed)
    held = set(p for p, _ in task.test_problems)
    train = list(task.train_problems)
    labeled_refs = dict(train) if labeled else {}
    extra = [p for p in dict.fromkeys(prompts or []) if p not in held and p not in dict(train)]
    todo = [p for p, _ in train] if labeled else []
    todo = list(dict.fromkeys(todo)) + extra
    refs = [labeled_refs.get(p) for p in todo]
    answers = t.answer(todo, candidates, temperature, gen) if todo else []
    kept, stats = filter_candidates(task, todo, refs, answers, min_reward, min_agreement, known=train)
    stats["held_out"] = len([p for p in dict.fromkeys(prompts or []) if p in held])
    cap = int(round(ratio * len(train)))
    if len(kept) > cap:
        pick = torch.randperm(len(kept), generator=gen)[:cap].tolist()
        kept = [kept[i] for i in sorted(pick)]
    stats["mixed"] = len(kept)
    return kept, stats


def mix_into(task, pairs: List[Pair]) -> None:
    """Append synthetic pairs to the task's train problems (used by the warm start and GRPO rollouts)."""
    task.train_problems = list(task.train_problems) + list(pairs)
