"""Built-in task `pyfix`: a character-level model reads a small broken Python function and writes it fixed.

    task = PyFixTask({}, seed=0)
    policy = build_model("micro-gpt", **task.model_kwargs())
    task.train_problems[0]     # ("def add(a, b)\\n    return a + b\\n# fix\\n", "def add(a, b):\\n    return a + b")

The data (grpo_edge/tasks/pyfix_programs.py) is about 2,000 train pairs by default and a held-out test split
of other functions, the same for every training seed. Each pair is a function with one bug of BUG_KINDS
(missing colon, wrong indentation, unbalanced bracket, misspelt name or keyword, wrong operator, off-by-one,
wrong return) and the few asserts the fixed function passes; the asserts are data columns (`tests`, with
`bug` and `template`), never shown to the model. The prompt is the broken program followed by PROMPT_END;
the completion is the whole fixed program.

Rewards, in TRL's convention and each logged by name: `tests_pass` (the completion and its asserts run in
grpo_edge.sandbox: a separate, limited process), `parses` (ast.parse, nothing run) and `similarity` (to the
reference fix, so that a partly right answer counts). The metric is the held-out fix rate: the share of test
programs whose fix passes its asserts in the sandbox; evaluate() also gives it and the other metrics by bug
kind (`fix_rate/missing_colon`, ...) and the sandbox's reasons (`sandbox/syntax`, `sandbox/failed`, ...).
"""
import random
from collections import OrderedDict

import numpy as np
import torch

from grpo_edge.core.tokenizer import PAD, CharTokenizer
from grpo_edge.errors import ConfigError
from grpo_edge.core import devices
from grpo_edge.tasks.pyfix_programs import BUG_KINDS, fresh_pair, make_split
from grpo_edge.tasks.rewards import exact_match, parses, run_tests, similarity
from grpo_edge.tasks.text_base import TextTask, cfg_get, padding_of

PROMPT_END = "\n# fix\n"
OUTPUTS = ("edit", "program")    # task.output: what the model writes (module docstring)
# every character a program may hold: printable ASCII but tab (indentation is spaces) and the backslash
CHARS = "\n" + "".join(chr(c) for c in range(32, 127) if chr(c) != "\\")
MAX_PROGRAM_CHARS = 400          # the longest program the task (and a deployed model) reads by default


class PyFixTask(TextTask):
    """Repair small broken Python functions: ~2,000 generated pairs, 7 bug kinds, tests run in a sandbox.

    Config keys (``task`` section), all optional:
      n_train (2000)         train pairs (function, bug)
      n_test (300)           held-out pairs, of functions no train pair has
      test_fraction (0.2)    share of each template's functions held out
      split_seed (0)         seed of the generator and of the split (not the training seed)
      prompt_len (auto)      padded prompt length; default and minimum: the longest broken program + PROMPT_END
      max_new_tokens (auto)  generation budget; default and minimum: the longest fixed program + EOS
      output ("edit")        "edit": the prompt's lines are numbered ("2|    return a + b") and the model writes the
                             one line it changes, numbered ("2|    return a - b"; apply_edit makes the fixed program);
                             "program": the prompt is the program as it is and the model writes the whole fix
      augment (0.0)          share of the train pairs that each warm start epoch and GRPO batch replaces with a
                             fresh pair of the same template and bug kind (pyfix_programs.fresh_pair; never a
                             held-out function)
      made_up_names (0.0)    share of a fresh pair's names that are made up (random letters: names the model
                             cannot recall, only copy); the rest are drawn as the split's names are
      padding ("left")       where prompts are padded: "left" (the prompt ends where the fix begins) or
                             "right" (character i of the program and of its fix are always prompt_len apart)
      temperature (1.0)      sampling temperature of rollouts
      rewards ({"tests_pass": 1.0, "parses": 0.1, "similarity": 0.3})   weighted rewards (built-ins or
                             "module.path:fn"; TRL-style ones get the columns tests, bug, template, answer)
      reward (None)          one more user reward "module.path:fn", weight 1.0
      reward_errors ("raise") "raise" or "skip" a reward that raises or returns NaN/inf
      eval_size (0)          test pairs scored by evaluate(n=0); 0 = all
    """
    name = "pyfix"
    metric_name = "fix_rate"
    default_rewards = {"tests_pass": 1.0, "parses": 0.1, "similarity": 0.3}
    defaults = {"n_train": 2000, "n_test": 300, "test_fraction": 0.2, "split_seed": 0, "prompt_len": None,
                "max_new_tokens": None, "output": "edit", "augment": 0.0, "made_up_names": 0.0, "padding": "left", "temperature": 1.0, "rewards": dict(default_rewards), "reward": None,
                "reward_errors": "raise", "eval_size": 0}
    eval_metrics = {"exact_match": exact_match, "parses": parses, "similarity": similarity}
    ranges = dict(TextTask.ranges, augment=(0, 1, True, True), made_up_names=(0, 1, True, True))

    def __init__(self, cfg: dict = None, seed: int = 0):
        cfg = dict(cfg or {})
        super(PyFixTask, self).__init__(cfg, seed)
        n_train = cfg_get(cfg, "n_train", 2000, int, 1)
        n_test = cfg_get(cfg, "n_test", 300, int, 1)
        test_fraction = float(cfg_get(cfg, "test_fraction", 0.2, (int, float)))
        if not 0.0 < test_fraction < 1.0:
            raise ConfigError("task.test_fraction must be in (0, 1), got %r" % test_fraction)
        self.split_seed = cfg_get(cfg, "split_seed", 0, int)
        self.eval_size = cfg_get(cfg, "eval_size", 0, int, 0)
        self.padding = padding_of(cfg)
        self.output = cfg_get(cfg, "output", "edit", str)
        if self.output not in OUTPUTS:
            raise ConfigError("task.output must be one of %s, got %r" % ("|".join(OUTPUTS), self.output))
        self.augment = float(cfg_get(cfg, "augment", 0.0, (int, float)))
        if not 0.0 <= self.augment <= 1.0:
            raise ConfigError("task.augment must be in [0, 1], got %r" % self.augment)
        self.made_up_names = float(cfg_get(cfg, "made_up_names", 0.0, (int, float)))
        if not 0.0 <= self.made_up_names <= 1.0:
            raise ConfigError("task.made_up_names must be in [0, 1], got %r" % self.made_up_names)
        train, test = make_split(n_train, n_test, test_fraction, self.split_seed)
        self._train_pairs, self._test_functions = train, set(p.fixed for p in test)
        self.tokenizer = CharTokenizer(CHARS)
        self.train_problems = [self.problem_of(p.broken, p.fixed) for p in train]
        self.test_problems = [self.problem_of(p.broken, p.fixed) for p in test]
        self.train_columns = [self._columns(p) for p in train]
        self.test_columns = [self._columns(p) for p in test]
        longest_prompt = max(len(p) for p, _ in self.train_problems + self.test_problems)
        longest_fix = max(len(r) for _, r in self.train_problems + self.test_problems)
        self.prompt_len = cfg_get(cfg, "prompt_len", longest_prompt, int)
        if self.prompt_len < longest_prompt:
            raise ConfigError("task.prompt_len=%d is shorter than the longest broken program + %r (%d characters)"
                              % (self.prompt_len, PROMPT_END, longest_prompt))
        self.max_new_tokens = cfg_get(cfg, "max_new_tokens", longest_fix + 1, int)
        if self.max_new_tokens < longest_fix + 1:
            raise ConfigError("task.max_new_tokens=%d cannot hold the longest %s (%d characters) plus EOS"
                              % (self.max_new_tokens, "numbered changed line" if self.output == "edit"
                                 else "fixed program", longest_fix))
        self.check_rewards()

    def prompt_of(self, program):
        """The prompt of a broken program: its lines numbered (task.output edit) or as they are, then PROMPT_END."""
        return (numbered(program) if self.output == "edit" else program) + PROMPT_END

    def problem_of(self, broken, fixed):
        """(prompt, reference completion) of a (broken, fixed) pair: the changed line (edit) or the whole fix."""
        return self.prompt_of(broken), edit_of(broken, fixed) if self.output == "edit" else fixed

    def program_of(self, prompt):
        """prompt_of()'s inverse: the broken program a prompt shows."""
        program = prompt[:-len(PROMPT_END)]
        return unnumbered(program) if self.output == "edit" else program

    def answers(self, texts, prompts):
        """The fixed programs that completions (or references) `texts` of `prompts` stand for."""
        if self.output == "program":
            return list(texts)
        return [apply_edit(self.program_of(p), t) for t, p in zip(texts, prompts)]

    def _augmented(self, idx, generator):
        """(problems, columns) of train indices idx, each made a fresh pair of its template and bug kind with
        names task.made_up_names of them made up, with probability task.augment (about 0.3 ms a pair)."""
        rng = random.Random(int(devices.randint(2 ** 31, (1,), generator).item()))
        problems, columns = [self.train_problems[i] for i in idx], [self.train_columns[i] for i in idx]
        for k, i in enumerate(idx):
            if rng.random() < self.augment:
                pair = self._train_pairs[i]
                fresh = fresh_pair(pair.template, pair.bug, rng, self._test_functions, made_up=self.made_up_names)
                problem = None if fresh is None else self.problem_of(fresh.broken, fresh.fixed)
                if problem and len(problem[0]) <= self.prompt_len and len(problem[1]) < self.max_new_tokens:
                    problems[k], columns[k] = problem, self._columns(fresh)   # (too long: the pair as it is)
        return problems, columns

    def warm_start_batches(self, batch_size, generator, problems=None):
        """One shuffled epoch; with task.augment, that share of the train pairs (drawn anew each epoch) made
        fresh pairs with made-up names, the rest as they are."""
        if self.augment and problems is None:
            problems = self._augmented(range(len(self.train_problems)), generator)[0]
        return super(PyFixTask, self).warm_start_batches(batch_size, generator, problems)

    def rollout_problems(self, idx, generator):
        """The train problems of idx, task.augment of them made fresh pairs (as in the warm start)."""
        if not self.augment:
            return super(PyFixTask, self).rollout_problems(idx, generator)
        return self._augmented(idx, generator)

    @staticmethod
    def _columns(pair):
        return {"tests": pair.tests, "bug": pair.bug, "template": pair.template, "answer": pair.fixed}

    def encode_inputs(self, texts):
        """Prompts (broken program + PROMPT_END) -> (B, prompt_len) long, padded with PAD (task.padding)."""
        out = torch.full((len(texts), self.prompt_len), PAD, dtype=torch.long)
        for i, t in enumerate(texts):
            ids = self.tokenizer.encode(t)
            if len(ids) > self.prompt_len:
                raise ConfigError("a program of %d characters is longer than the %d this model reads"
                                  % (len(ids) - len(PROMPT_END), self.prompt_len - len(PROMPT_END)))
            at = self.prompt_len - len(ids) if self.padding == "left" else 0
            out[i, at:at + len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out

    def model_kwargs(self) -> dict:
        return {"vocab_size": self.tokenizer.vocab_size, "max_len": self.prompt_len + self.max_new_tokens}

    def checkpoint_meta(self) -> dict:
        return {"tokenizer": self.tokenizer.to_dict(), "vocab_size": self.tokenizer.vocab_size,
                "prompt_len": self.prompt_len, "max_new_tokens": self.max_new_tokens,
                "input_shape": [self.prompt_len], "input_name": self.input_key, "padding": self.padding,
                "output": self.output,
                "prompt_end": PROMPT_END, "slug": "pyfix"}

    @classmethod
    def restore_cfg(cls, meta):
        """The lengths and the padding a checkpoint was trained with."""
        out = dict((k, meta[k]) for k in ("prompt_len", "max_new_tokens") if isinstance(meta.get(k), int))
        if meta.get("padding") in ("left", "right"):
            out["padding"] = meta["padding"]
        out["output"] = meta["output"] if meta.get("output") in OUTPUTS else "program"   # (older checkpoints)
        return out

    def columns_of(self, problems):
        """The data columns of given (prompt, reference) problems of either split, found by their prompt."""
        if not hasattr(self, "_by_prompt"):
            self._by_prompt = dict((p, c) for split in ("train", "test")
                                   for (p, _), c in zip(self.problems(split), self.columns(split)))
        return [self._by_prompt[p] for p, _ in problems]

    def metric_of(self, completions, problems):
        """The fix rate of completions of (prompt, reference) problems from any runtime (a deploy's runner)."""
        return self.report(completions, problems)["fix_rate"]

    def report(self, completions, problems):
        """breakdown() of raw completions (edits or programs) of (prompt, reference) problems of either split."""
        prompts = [p for p, _ in problems]
        refs = self.answers([r for _, r in problems], prompts)
        return self.breakdown(self.answers(completions, prompts), list(zip(prompts, refs)), self.columns_of(problems))

    def breakdown(self, completions, problems, columns):
        """(completions and references: fixed programs, answers()) The fix rate (tests pass in the sandbox), it and each eval metric by bug kind ('fix_rate/indentation'),
        and how many programs ended for each of the sandbox's reasons ('sandbox/failed')."""
        reasons = run_tests(completions, [c["tests"] for c in columns])
        scores = {"fix_rate": [float(why == "ok") for why in reasons]}
        for name, fn in sorted(self.eval_metrics.items()):
            scores[name] = [fn(c, r, p) for c, (p, r) in zip(completions, problems)]
        out = {"fix_rate": float(np.mean(scores["fix_rate"]))}
        bugs = [c["bug"] for c in columns]
        for name, values in scores.items():
            for bug, score in by_bug(values, bugs).items():
                out["%s/%s" % (name, bug)] = score
        for why in sorted(set(reasons)):
            out["sandbox/" + why] = float(reasons.count(why))
        return out


def by_bug(values, bugs):
    """{bug kind: mean of values over the samples of that kind}, in BUG_KINDS order (kinds present only)."""
    out = OrderedDict()
    for kind in BUG_KINDS:
        mine = [v for v, b in zip(values, bugs) if b == kind]
        if mine:
            out[kind] = float(np.mean(mine))
    return out


# ------------------------------------------------------------------------------------- the edit output
def numbered(program):
    """'def f(a)\n    return a' -> '1|def f(a)\n2|    return a': each line after its number and a bar."""
    return "\n".join("%d|%s" % (i + 1, line) for i, line in enumerate(program.split("\n")))


def unnumbered(prompt_program):
    """numbered()'s inverse."""
    return "\n".join(line.split("|", 1)[1] if "|" in line else line for line in prompt_program.split("\n"))


def edit_of(broken, fixed):
    """The numbered line of `fixed` that differs from `broken` ('3|    return acc'): a pyfix bug changes one line."""
    old, new = broken.split("\n"), fixed.split("\n")
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    if len(old) != len(new) or len(changed) != 1:
        raise ValueError("a pyfix pair must differ in exactly one line: %r -> %r" % (broken, fixed))
    return "%d|%s" % (changed[0] + 1, new[changed[0]])


def apply_edit(program, edit):
    """`program` with line N replaced by the edit 'N|text'; `program` unchanged for an edit that is not of that
    form or names no line of it (so that it fails as the broken program does). The Pi folder's runner, which
    imports nothing of grpo_edge, has its own copy (runtime/pi_runner.fixed_program; tests/test_rpi_pyfix.py
    checks that they agree)."""
    number, bar, text = edit.partition("|")
    lines = program.split("\n")
    if not bar or not number.isdigit() or not 1 <= int(number) <= len(lines) or "\n" in text.rstrip("\n"):
        return program
    lines[int(number) - 1] = text.rstrip("\n")
    return "\n".join(lines)
