"""Built-in task `arithmetic`: micro-gpt completes "12+7=" with "19", one character per token.

    task = ArithmeticTask({"max_operand": 99, "ops": ["+", "-"]}, seed=0)
    policy = build_model("micro-gpt", **task.model_kwargs())
    rollout = task.rollout(policy, num_groups=8, group_size=8, generator=torch.Generator().manual_seed(0))

Every problem "a<op>b=" with 0 <= a, b <= max_operand is enumerated, shuffled with `split_seed` and split
into held-out test problems and train problems (disjoint; the same for every training seed, so runs with
different seeds are scored on the same problems). Prompts are left-padded with PAD to `prompt_len`, so
"=" is always the last prompt token; the model attends to the PADs (no attention mask, by design: the
exported decode step then needs no mask input).
"""
import random

import torch

from grpo_edge.core.tokenizer import PAD, CharTokenizer
from grpo_edge.errors import ConfigError
from grpo_edge.tasks.rewards import exact_match, format_reward
from grpo_edge.tasks.text_base import TextTask, cfg_get

CHARS = "0123456789+-="
MAX_OPERAND_LIMIT = 999      # 999: 1M problems per op, still enumerable in about a second


class ArithmeticTask(TextTask):
    """Integer addition (and optionally subtraction) as character-level completion.

    Config keys (``task`` section), all optional:
      max_operand (99)        operands are 0..max_operand (1..999)
      ops (["+"])             operations, a subset of ["+", "-"]; "-" gives negative answers like "-12"
      test_fraction (0.1)     share of all problems held out as the test split
      split_seed (0)          seed of the train/test split (independent of the training seed)
      prompt_len (auto)       padded prompt length; default and minimum: the longest prompt ("99+99=": 6)
      max_new_tokens (auto)   generation budget; default and minimum: the longest answer + EOS
      temperature (1.0)       sampling temperature of rollouts
      rewards ({"exact_match": 1.0, "format": 0.1})   weighted rewards; names are built-ins
                              (exact_match, format, chrf) or user callables "module.path:fn"
      reward (None)           one more user reward "module.path:fn", weight 1.0
      reward_errors ("raise") "raise" or "skip" (warn, score 0) a reward that raises or returns NaN/inf
      eval_size (500)         test problems scored by evaluate(n=0); 0 = all
    """
    name = "arithmetic"
    input_key = "prompt"
    default_rewards = {"exact_match": 1.0, "format": 0.1}
    # Every config key and its default (None = derived from the data); the config validator reads it.
    defaults = {"max_operand": 99, "ops": ["+"], "test_fraction": 0.1, "split_seed": 0, "prompt_len": None,
                "max_new_tokens": None, "temperature": 1.0, "rewards": dict(default_rewards), "reward": None,
                "reward_errors": "raise", "eval_size": 500}
    eval_metrics = {"exact_match": exact_match, "format": format_reward}

    def __init__(self, cfg: dict = None, seed: int = 0):
        cfg = dict(cfg or {})
        super(ArithmeticTask, self).__init__(cfg, seed)
        self.max_operand = cfg_get(cfg, "max_operand", 99, int, 1)
        if self.max_operand > MAX_OPERAND_LIMIT:
            raise ConfigError("task.max_operand must be <= %d, got %d" % (MAX_OPERAND_LIMIT, self.max_operand))
        ops = cfg_get(cfg, "ops", ["+"], (list, tuple, str))
        self.ops = sorted(set(ops))
        if not self.ops or any(op not in ("+", "-") for op in self.ops):
            raise ConfigError("task.ops must be a non-empty subset of ['+', '-'], got %r" % (ops,))
        self.test_fraction = float(cfg_get(cfg, "test_fraction", 0.1, (int, float)))
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError("task.test_fraction must be in (0, 1), got %r" % self.test_fraction)
        self.split_seed = cfg_get(cfg, "split_seed", 0, int)
        self.tokenizer = CharTokenizer(CHARS)

        m = self.max_operand
        longest_prompt = len("%d+%d=" % (m, m))
        longest_answer = max(len(str(2 * m)) if "+" in self.ops else 0, len(str(-m)) if "-" in self.ops else 0)
        self.prompt_len = cfg_get(cfg, "prompt_len", longest_prompt, int)
        if self.prompt_len < longest_prompt:
            raise ConfigError("task.prompt_len=%d is shorter than the longest prompt %r (%d characters)"
                              % (self.prompt_len, "%d+%d=" % (m, m), longest_prompt))
        self.max_new_tokens = cfg_get(cfg, "max_new_tokens", longest_answer + 1, int)
        if self.max_new_tokens < longest_answer + 1:
            raise ConfigError("task.max_new_tokens=%d cannot hold the longest answer (%d characters) plus EOS"
                              % (self.max_new_tokens, longest_answer))

        problems = self.all_problems()
        order = list(range(len(problems)))
        random.Random(self.split_seed).shuffle(order)
        n_test = max(1, int(round(self.test_fraction * len(problems))))
        self.test_problems = [problems[i] for i in order[:n_test]]      # shuffled: any prefix is a uniform sample
        self.train_problems = [problems[i] for i in order[n_test:]]
        self.check_rewards()

    def all_problems(self):
        """Every (prompt, answer) pair, e.g. ("12+7=", "19"), in a fixed order."""
        out = []
        r = range(self.max_operand + 1)
        for op in self.ops:
            for a in r:
                for b in r:
                    out.append(("%d%s%d=" % (a, op, b), str(a + b if op == "+" else a - b)))
        return out

    def encode_inputs(self, texts):
        """Prompts -> (B, prompt_len) long, left-padded with PAD so "=" is the last token."""
        out = torch.full((len(texts), self.prompt_len), PAD, dtype=torch.long)
        for i, t in enumerate(texts):
            ids = self.tokenizer.encode(t)
            out[i, self.prompt_len - len(ids):] = torch.tensor(ids, dtype=torch.long)
        return out

    def checkpoint_meta(self) -> dict:
        return {
            "tokenizer": self.tokenizer.to_dict(),
            "vocab_size": self.tokenizer.vocab_size,
            "prompt_len": self.prompt_len,
            "max_new_tokens": self.max_new_tokens,
            "input_shape": [self.prompt_len],
            "input_name": self.input_key,
            "padding": "left",
            "max_operand": self.max_operand,
            "ops": list(self.ops),
        }
