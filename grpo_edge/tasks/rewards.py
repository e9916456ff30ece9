"""Reward functions for the text tasks, and the weighted set a task scores completions with.

A reward is a plain callable ``fn(completion: str, reference: str, prompt: str) -> float``. Built-ins:

- ``exact_match``: 1.0 when the completion equals the reference (outer whitespace ignored), else 0.0.
- ``format`` (``format_reward``): 1.0 when the completion is an integer written with digits only and an
  optional leading '-' (the arithmetic task's answer format), else 0.0.
- ``chrf`` : character n-gram F-score (chrF, n = 1..6, beta = 2), in [0, 1].

A config names rewards with weights, e.g. ``rewards: {exact_match: 1.0, format: 0.1}``; a user callable
is named ``"mypkg.rewards:fn"`` (``load_reward``). ``safe_reward`` turns a reward that raises or returns
NaN/inf into a one-line error naming the function and the example (or a warning and 0.0 when skipping).
"""
import importlib
import math
import re
import warnings
from collections import Counter
from typing import Callable, Dict, List, Sequence, Tuple

import torch

from grpo_edge.errors import ConfigError, GrpoEdgeError

RewardFn = Callable[[str, str, str], float]

_INT_RE = re.compile(r"-?[0-9]+")


def exact_match(completion: str, reference: str, prompt: str = "") -> float:
    """1.0 if ``completion`` equals ``reference`` after stripping outer whitespace, else 0.0."""
    return 1.0 if completion.strip() == reference.strip() else 0.0


def format_reward(completion: str, reference: str = "", prompt: str = "") -> float:
    """1.0 if ``completion`` is a non-empty integer: digits with an optional leading '-', nothing else."""
    return 1.0 if _INT_RE.fullmatch(completion) else 0.0


def _char_ngrams(text: str, n: int) -> Counter:
    return Counter(text[i:i + n] for i in range(len(text) - n + 1))


def chrf(completion: str, reference: str, prompt: str = "", max_order: int = 6, beta: float = 2.0) -> float:
    """Character n-gram F-score (chrF, Popovic 2015) of one completion against one reference, in [0, 1].

    Whitespace is removed first (as chrF does). For each order n = 1..max_order, matches are the clipped
    counts of n-grams common to both strings. Precision P is the mean of matches / hypothesis n-grams over
    the orders the completion has n-grams of; recall R the mean of matches / reference n-grams over the
    orders the reference has n-grams of (so short strings are not penalized for orders they cannot have).
    chrF = (1 + beta^2) P R / (beta^2 P + R); beta = 2 weighs recall twice as much as precision.
    Both empty -> 1.0; exactly one empty -> 0.0.
    """
    hyp = "".join(completion.split())
    ref = "".join(reference.split())
    if not hyp or not ref:
        return 1.0 if hyp == ref else 0.0
    precisions, recalls = [], []
    for n in range(1, max_order + 1):
        h, r = _char_ngrams(hyp, n), _char_ngrams(ref, n)
        n_hyp, n_ref = sum(h.values()), sum(r.values())
        matches = sum((h & r).values())
        if n_hyp:
            precisions.append(matches / n_hyp)
        if n_ref:
            recalls.append(matches / n_ref)
    p = sum(precisions) / len(precisions)
    rec = sum(recalls) / len(recalls)
    if p + rec == 0:
        return 0.0
    b2 = beta * beta
    return (1 + b2) * p * rec / (b2 * p + rec)


BUILTIN_REWARDS = {
    "exact_match": exact_match,
    "format": format_reward,
    "chrf": chrf,
}


def load_reward(spec: str) -> RewardFn:
    """Import a user reward named ``"module.path:fn"`` (the module must be importable, e.g. on PYTHONPATH)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("reward %r: expected 'module.path:function' or one of %s"
                          % (spec, ", ".join(sorted(BUILTIN_REWARDS))))
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError("reward %r: cannot import module %r (%s)" % (spec, module_name, e)) from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise ConfigError("reward %r: module %r has no attribute %r" % (spec, module_name, attr))
    if not callable(fn):
        raise ConfigError("reward %r: %r is not callable" % (spec, attr))
    return fn


def resolve_reward(name: str) -> RewardFn:
    """A built-in reward by name, or a user callable by ``"module.path:fn"``."""
    if name in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[name]
    if ":" in name:
        return load_reward(name)
    raise ConfigError("unknown reward %r: use one of %s, or 'module.path:function'"
                      % (name, ", ".join(sorted(BUILTIN_REWARDS))))


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


FLOAT32_MAX = 3.4028234663852886e38


def safe_reward(fn: RewardFn, name: str, completion: str, reference: str, prompt: str,
                skip_errors: bool = False) -> float:
    """Call ``fn(completion, reference, prompt)`` and return a finite float.

    When it raises, returns something that is not a number, or returns NaN/inf: raise GrpoEdgeError
    naming the function and the example, or (``skip_errors=True``) warn and return 0.0.
    """
    try:
        value = float(fn(completion, reference, prompt))
        # finite in the training dtype: 1e300 is a float64 but inf in float32
        problem = None if math.isfinite(value) and abs(value) <= FLOAT32_MAX else "returned %r" % value
    except Exception as e:  # a user callable may raise anything; we report it in one line
        problem = "raised %s: %s" % (type(e).__name__, e)
    if problem is None:
        return value
    msg = ("reward %r %s on prompt=%r completion=%r reference=%r"
           % (name, problem, _short(prompt), _short(completion), _short(reference)))
    if skip_errors:
        warnings.warn(msg + " (scored 0.0: reward_errors=skip)", RuntimeWarning)
        return 0.0
    raise GrpoEdgeError(msg + " (set task.reward_errors: skip to score such samples 0)")


class WeightedRewards(object):
    """The weighted reward functions of a task, built from the task config.

    spec: ``{name: weight}``; a name is a built-in (``exact_match``, ``format``, ``chrf``) or a user
    callable ``"module.path:fn"``. ``extra``: an optional single user reward (config ``task.reward``)
    added with weight 1.0. ``reward_errors``: "raise" (default) or "skip" (see ``safe_reward``).
    """

    def __init__(self, spec: Dict[str, float], extra=None, reward_errors: str = "raise"):
        if not isinstance(spec, dict) or not spec and not extra:
            raise ConfigError("task.rewards must be a non-empty mapping of reward name -> weight, got %r" % (spec,))
        if reward_errors not in ("raise", "skip"):
            raise ConfigError("task.reward_errors must be 'raise' or 'skip', got %r" % (reward_errors,))
        items = list(spec.items())
        if extra:
            for name in ([extra] if isinstance(extra, str) else list(extra)):
                if name not in spec:
                    items.append((name, 1.0))
        self.items = []  # type: List[Tuple[str, RewardFn, float]]
        for name, weight in items:
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise ConfigError("task.rewards.%s: weight must be a finite number, got %r" % (name, weight))
            self.items.append((name, resolve_reward(name), float(weight)))
        self.skip_errors = reward_errors == "skip"

    @property
    def names(self) -> List[str]:
        return [name for name, _, _ in self.items]

    def score(self, completions: Sequence[str], references: Sequence[str], prompts: Sequence[str]):
        """Score N samples. Returns (total (N,) float32 tensor, {name: (N,) float32 tensor})."""
        parts = {}
        total = torch.zeros(len(completions), dtype=torch.float32)
        for name, fn, weight in self.items:
            values = torch.tensor([safe_reward(fn, name, c, r, p, self.skip_errors)
                                   for c, r, p in zip(completions, references, prompts)],
                                  dtype=torch.float32)                      # (N,)
            parts[name] = values
            total += weight * values
        return total, parts
