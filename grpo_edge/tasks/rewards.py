"""Reward functions for the text tasks, and the weighted set a task scores completions with.

A reward comes in one of two forms, told apart by its parameter names:

- TRL's (batch): ``fn(prompts, completions, **columns) -> list[float | None]``, any function with a parameter
  named ``prompts`` or ``completions``. It is called by keyword with a batch: ``prompts`` and ``completions``
  (lists of str) and one list per data column (task ``text``: every column of the file but ``prompt``, the
  reference included under its own name, ``answer`` or ``completion``; the built-in tasks pass their reference
  as ``answer``). Take ``**kwargs`` to ignore columns you do not use. ``None`` marks a sample the reward does
  not apply to: it adds nothing to that sample's total and is left out of the reward's logged mean.
- per sample: ``fn(completion: str, reference: str, prompt: str) -> float`` (the built-ins).

Built-ins:

- ``exact_match``: 1.0 when the completion equals the reference (outer whitespace ignored), else 0.0.
- ``format`` (``format_reward``): 1.0 when the completion is an integer written with digits only and an
  optional leading '-' (the arithmetic task's answer format), else 0.0.
- ``chrf`` : character n-gram F-score (chrF, n = 1..6, beta = 2), in [0, 1].
- ``parses``: 1.0 when the completion is non-blank Python that ``ast.parse`` accepts (nothing is run), else 0.0.
- ``similarity``: difflib's ratio of the completion to the reference, whitespace included, in [0, 1] (the
  pyfix task's "closeness to the reference fix": an indentation fix counts, as chrF's would not).
- ``tests_pass`` (TRL's form, a ``tests`` column): 1.0 where the completion followed by its record's tests runs
  to its end and exits 0 in ``grpo_edge.sandbox`` (a separate, limited process), else 0.0; ``None`` for a
  record without tests. Programs that do not parse are not run; a program is run once (the last 20,000 kept).

A config names rewards with weights, e.g. ``rewards: {exact_match: 1.0, format: 0.1}``; a user callable
is named ``"mypkg.rewards:fn"`` (``load_reward``). ``WeightedRewards.check`` calls each on a few samples when
a task starts, so a wrong signature, length or value is one line naming the function before any training;
during training a reward that raises or returns NaN/inf is one line naming the function and the sample (or a
warning and 0.0 with ``reward_errors: skip``).
"""
import functools
import importlib
import math
import re
import warnings
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

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


def parses(completion: str, reference: str = "", prompt: str = "") -> float:
    """1.0 if ``completion`` is non-blank Python source that parses (``ast.parse``; never run), else 0.0 (an
    empty answer parses, but fixes nothing)."""
    import ast
    if not completion.strip():
        return 0.0
    try:
        ast.parse(completion)
    except (SyntaxError, ValueError):          # ValueError: a NUL character
        return 0.0
    return 1.0


def similarity(completion: str, reference: str, prompt: str = "") -> float:
    """difflib.SequenceMatcher's ratio 2 M / (len(completion) + len(reference)), M the matched characters."""
    import difflib
    if not completion and not reference:
        return 1.0
    return difflib.SequenceMatcher(None, completion, reference, autojunk=False).ratio()


SANDBOX_REASONS = Counter()     # why tests_pass scored what it did, over the process' life: {reason: n}
_REASON_CACHE = {}              # program -> the sandbox's reason: a program the policy writes again is not rerun
_REASON_CACHE_SIZE = 20000


def run_tests(completions: Sequence[str], tests: Sequence[str]) -> List[str]:
    """The sandbox's reason for each completion + its tests ("ok" where they pass; "syntax" for a completion
    that does not parse, which is not run); each distinct program runs once, the programs in parallel."""
    from grpo_edge.sandbox import run_many
    programs = [c.rstrip("\n") + "\n\n" + t + "\n" for c, t in zip(completions, tests)]
    todo = sorted(set(p for c, p in zip(completions, programs) if parses(c) and p not in _REASON_CACHE))
    if len(_REASON_CACHE) + len(todo) > _REASON_CACHE_SIZE:
        _REASON_CACHE.clear()
    _REASON_CACHE.update(zip(todo, (r.reason for r in run_many(todo))) if todo else ())
    out = [_REASON_CACHE.get(p, "syntax") for p in programs]
    SANDBOX_REASONS.update(out)
    return out


def tests_pass(completions, tests=None, **columns) -> List[Optional[float]]:
    """TRL's form: 1.0 where the completion, then its record's `tests`, passes in the sandbox; None without tests."""
    if tests is None:
        raise ConfigError("reward tests_pass needs a `tests` column in the data (asserts the answer must pass)")
    have = [i for i, t in enumerate(tests) if isinstance(t, str) and t.strip()]
    reasons = run_tests([completions[i] for i in have], [tests[i] for i in have])
    out = [None] * len(completions)
    for i, reason in zip(have, reasons):
        out[i] = 1.0 if reason == "ok" else 0.0
    return out


BUILTIN_REWARDS = {
    "exact_match": exact_match,
    "format": format_reward,
    "chrf": chrf,
    "parses": parses,
    "similarity": similarity,
    "tests_pass": tests_pass,
}


def load_reward(spec: str) -> RewardFn:
    """Import a user reward named ``"module.path:fn"``, from the current folder or an installed package."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("reward %r: expected 'module.path:function' or one of %s"
                          % (spec, ", ".join(sorted(BUILTIN_REWARDS))))
    from grpo_edge.tasks.user_code import current_folder_importable
    current_folder_importable()
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


@functools.lru_cache(maxsize=256)
def _parameters(fn):
    """fn's parameters {name: Parameter}, or {} when Python cannot tell (a builtin)."""
    import inspect
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def takes_batch(fn) -> bool:
    """True for TRL's form (a parameter named prompts or completions), False for fn(completion, reference, prompt)."""
    params = _parameters(fn)
    return "completions" in params or "prompts" in params


def _named_per_sample(fn) -> bool:
    """True when fn's parameters are all named completion, reference or prompt (so they go by name)."""
    names = [n for n, p in _parameters(fn).items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return bool(names) and set(names) <= {"completion", "reference", "prompt"}


def _problem(value):
    """None when `value` is a finite float32 number, else what is wrong with it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)               # numpy scalars, 0-d tensors
        except (TypeError, ValueError):
            return "returned %s %r, not a number" % (type(value).__name__, value)
    value = float(value)
    return None if math.isfinite(value) and abs(value) <= FLOAT32_MAX else "returned %r" % value


def _fail(name, problem, prompt, completion, skip, reference=None):
    msg = "reward %r %s on prompt=%r completion=%r" % (name, problem, _short(prompt), _short(completion))
    if reference is not None:
        msg += " reference=%r" % _short(reference)
    if skip:
        warnings.warn(msg + " (scored 0.0: reward_errors=skip)", RuntimeWarning)
        return
    raise GrpoEdgeError(msg + " (set task.reward_errors: skip to score such samples 0)")


def batch_reward(fn, name, prompts, completions, columns, skip_errors=False) -> List[float]:
    """TRL's form: fn(prompts=..., completions=..., **columns) -> N values, None -> NaN (not applicable)."""
    n = len(completions)
    try:
        values = fn(prompts=list(prompts), completions=list(completions), **columns)
    except Exception as e:  # a user callable may raise anything; we report it in one line
        _fail(name, "raised %s: %s" % (type(e).__name__, e), prompts[0], completions[0], skip_errors)
        return [0.0] * n
    if not isinstance(values, (list, tuple)) and not hasattr(values, "__len__"):
        raise GrpoEdgeError("reward %r returned %s, not a list of %d values (one per completion)"
                            % (name, type(values).__name__, n))
    values = list(values)
    if len(values) != n:
        raise GrpoEdgeError("reward %r returned %d values for %d completions" % (name, len(values), n))
    out = []
    for i, v in enumerate(values):
        problem = None if v is None else _problem(v)
        if problem is not None:
            _fail(name, problem + " for sample %d" % i, prompts[i], completions[i], skip_errors)
            v = 0.0
        out.append(float("nan") if v is None else float(v))
    return out


def safe_reward(fn: RewardFn, name: str, completion: str, reference: str, prompt: str,
                skip_errors: bool = False) -> float:
    """Call ``fn(completion, reference, prompt)`` and return a finite float. A function whose parameters are
    named completion / reference / prompt gets them by name, whatever their order.

    When it raises, returns something that is not a number, or returns NaN/inf: raise GrpoEdgeError
    naming the function and the example, or (``skip_errors=True``) warn and return 0.0.
    """
    try:
        if _named_per_sample(fn):
            value = float(fn(completion=completion, reference=reference, prompt=prompt))
        else:
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

    def score(self, completions: Sequence[str], references: Sequence[str], prompts: Sequence[str], columns=None):
        """Score N samples. columns: one dict of data columns per sample (None: the reference as `answer`).
        Returns (total (N,) float32 tensor, {name: (N,) float32 tensor}; NaN where a reward does not apply)."""
        parts = {}
        total = torch.zeros(len(completions), dtype=torch.float32)
        batch_columns = None
        for name, fn, weight in self.items:
            if takes_batch(fn):
                if batch_columns is None:
                    batch_columns = columns_by_name(columns, references)
                values = torch.tensor(batch_reward(fn, name, prompts, completions, batch_columns, self.skip_errors),
                                      dtype=torch.float32)
            else:
                values = torch.tensor([safe_reward(fn, name, c, r, p, self.skip_errors)
                                       for c, r, p in zip(completions, references, prompts)],
                                      dtype=torch.float32)                      # (N,)
            parts[name] = values
            total += weight * torch.nan_to_num(values, nan=0.0)
        return total, parts

    def check(self, prompts: Sequence[str], references: Sequence[str], columns=None, where="the data") -> None:
        """Call every reward on a few samples (their references as the completions): a reward that cannot be
        called so, returns the wrong number of values or a non-number / NaN / inf is one line (ConfigError)
        naming it, before any training."""
        cols = columns_by_name(columns, references)
        for name, fn, _ in self.items:
            try:
                if takes_batch(fn):      # reward_errors: skip warns about values; a wrong length still stops
                    batch_reward(fn, name, prompts, references, cols, self.skip_errors)
                else:
                    for c, r, p in zip(references, references, prompts):
                        safe_reward(fn, name, c, r, p, self.skip_errors)
            except GrpoEdgeError as e:
                form = ("fn(prompts=[...], completions=[...], %s)" % ", ".join("%s=[...]" % k for k in cols)
                        if takes_batch(fn) else "fn(completion, reference, prompt)")
                raise ConfigError("checking rewards on %d samples of %s, called as %s: %s"
                                  % (len(prompts), where, form, str(e).split(" (set task.reward_errors")[0]))


def columns_by_name(columns, references) -> Dict[str, list]:
    """[{column: value}] per sample -> {column: [values]}; without columns the references as `answer`."""
    if columns is None:
        return {"answer": list(references)}
    names = []
    for row in columns:
        names += [k for k in row if k not in names]
    return dict((k, [row.get(k) for row in columns]) for k in names)
