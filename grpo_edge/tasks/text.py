"""Task `text`: your own text data, in TRL's column names.

    grpo-edge train --set task.name=text --data-path data/train.jsonl

Each record has a `prompt` and a reference, `completion` or `answer` (grpo_edge/data/records.py reads
JSONL, CSV and TSV); the policy generates a completion per prompt and the rewards score it. Every other
column travels with its record. The vocabulary is the data's characters (stored in the checkpoint: eval and
deploy use the checkpoint's, and name a character outside it with its file and line). Prompts are padded to
the longest one, on the left by default or on the right (`padding: right`); either architecture trains and
deploys with either.
"""
import numpy as np
import torch

from grpo_edge.core.tokenizer import PAD, CharTokenizer
from grpo_edge.data.records import column_text, read_records
from grpo_edge.errors import ConfigError
from grpo_edge.tasks.rewards import chrf, exact_match
from grpo_edge.tasks.text_base import TextTask, cfg_get, padding_of

REFERENCE_COLUMNS = ("completion", "answer")


class TextDataTask(TextTask):
    """Your prompts and references (task.data_path), rewarded by exact match and chrF unless you give rewards.

    Config keys (``task`` section):
      data_path (required)    JSONL, CSV or TSV: a `prompt` column and a `completion` or `answer` column
      test_path (None)        held-out records; default: a seeded test_fraction of data_path
      test_fraction (0.1)     held-out share when there is no test_path
      split_seed (0)          seed of that split (independent of the training seed)
      padding ("left")        where prompts are padded: left or right (micro-gpt and tiny-transformer take either)
      max_prompt_len (None)   prompt length in characters; default the longest prompt
      max_new_tokens (None)   generation budget; default the longest reference + EOS
      vocab (None)            the characters the model knows; default the data's (a checkpoint keeps its own)
      temperature, rewards, reward, reward_errors, eval_size: as every text task (grpo_edge/tasks/text_base.py)
    """
    name = "text"
    input_key = "prompt"
    default_arch = "micro-gpt"
    default_rewards = {"exact_match": 1.0, "chrf": 0.5}
    defaults = {"data_path": None, "test_path": None, "test_fraction": 0.1, "split_seed": 0, "padding": "left",
                "max_prompt_len": None, "max_new_tokens": None, "vocab": None, "temperature": 1.0,
                "rewards": dict(default_rewards), "reward": None, "reward_errors": "raise", "eval_size": 500}
    types = {"data_path": str, "test_path": str, "vocab": str}
    eval_metrics = {"exact_match": exact_match, "chrf": chrf}

    def __init__(self, cfg=None, seed=0):
        cfg = dict(cfg or {})
        super(TextDataTask, self).__init__(cfg, seed)
        if not cfg.get("data_path"):
            raise ConfigError("task text needs task.data_path (--data-path FILE): JSONL, CSV or TSV with a 'prompt' "
                              "column and a 'completion' or 'answer' column (docs/own_task.md)")
        self.padding = padding_of(cfg)
        train, test = self._split(cfg)
        texts = [t for recs in (train, test) for r in recs for t in r[:2]]
        chars = cfg.get("vocab")
        self.tokenizer = CharTokenizer(chars if chars is not None else "".join(sorted(set("".join(texts)))))
        for recs in (train, test):
            for prompt, ref, _, where in recs:
                self._check_chars(prompt + ref, where)
        self.prompt_len = self._length(cfg, "max_prompt_len", [(len(r[0]), r[3]) for r in train + test], 0)
        self.max_new_tokens = self._length(cfg, "max_new_tokens", [(len(r[1]), r[3]) for r in train + test], 1)
        self.train_problems = [(p, r) for p, r, _, _ in train]
        self.test_problems = [(p, r) for p, r, _, _ in test]
        self.train_columns = [c for _, _, c, _ in train]          # the records' other columns, for the rewards
        self.test_columns = [c for _, _, c, _ in test]
        self.check_rewards()

    # --- data -----------------------------------------------------------------------------------
    def _split(self, cfg):
        """(train, test): lists of (prompt, reference, other columns, 'path:line')."""
        records = self._problems(cfg["data_path"], "task.data_path")
        if cfg.get("test_path"):
            return records, self._problems(cfg["test_path"], "task.test_path")
        fraction = float(cfg_get(cfg, "test_fraction", 0.1, (int, float)))
        if not 0.0 < fraction < 1.0:
            raise ConfigError("task.test_fraction must be in (0, 1), got %r" % fraction)
        if len(records) < 2:
            raise ConfigError("task.data_path %s has %d record: too few to hold some out for evaluation (give "
                              "task.test_path)" % (cfg["data_path"], len(records)))
        order = np.random.RandomState(cfg_get(cfg, "split_seed", 0, int)).permutation(len(records))
        n_test = min(len(records) - 1, max(1, int(round(fraction * len(records)))))
        return [records[i] for i in order[n_test:]], [records[i] for i in order[:n_test]]

    @staticmethod
    def _problems(path, what):
        records = read_records(path, what)
        found = list(records[0].values)
        ref_col = next((c for c in REFERENCE_COLUMNS if c in found), None)
        if "prompt" not in found or ref_col is None:
            raise ConfigError("%s %s: %s (columns found: %s)" % (
                what, path, "no 'prompt' column" if "prompt" not in found else "no 'completion' or 'answer' column",
                ", ".join(found) or "none"))
        out = []
        for rec in records:
            prompt, ref = column_text(rec, "prompt"), column_text(rec, ref_col)
            if not prompt:
                raise ConfigError("%s: empty prompt" % rec.where)
            others = dict((k, v) for k, v in rec.values.items() if k != "prompt")   # the reference too, by name
            out.append((prompt, ref, others, rec.where))
        return out

    def _check_chars(self, text, where):
        for c in text:
            if c not in self.tokenizer.stoi:
                raise ConfigError("%s: character %r is not in the model's vocabulary (%d characters, from the "
                                  "training data)" % (where, c, len(self.tokenizer.chars)))

    @staticmethod
    def _length(cfg, key, lengths, extra):
        longest, where = max(lengths)
        value = cfg.get(key)
        if value is None:
            return longest + extra
        value = cfg_get(cfg, key, None, int, 1)
        if value < longest + extra:
            raise ConfigError("task.%s=%d is too short for %s (%d characters%s)"
                              % (key, value, where, longest, " + EOS" if extra else ""))
        return value

    # --- model ----------------------------------------------------------------------------------
    def model_kwargs(self):
        return {"vocab_size": self.tokenizer.vocab_size, "max_len": self.prompt_len + self.max_new_tokens}

    def encode_inputs(self, texts):
        """Prompts -> (B, prompt_len) long, padded with PAD on the task's side."""
        out = torch.full((len(texts), self.prompt_len), PAD, dtype=torch.long)
        for i, t in enumerate(texts):
            try:
                ids = self.tokenizer.encode(t)
            except ValueError:
                self._check_chars(t, "prompt %r" % t[:40])
                raise
            if len(ids) > self.prompt_len:
                raise ConfigError("prompt %r has %d characters; the model takes %d" % (t[:40], len(ids),
                                                                                       self.prompt_len))
            if self.padding == "left":
                out[i, self.prompt_len - len(ids):] = torch.tensor(ids, dtype=torch.long)
            else:
                out[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out

    def checkpoint_meta(self):
        return {"tokenizer": self.tokenizer.to_dict(), "vocab_size": self.tokenizer.vocab_size,
                "prompt_len": self.prompt_len, "max_new_tokens": self.max_new_tokens,
                "input_shape": [self.prompt_len], "input_name": self.input_key, "padding": self.padding,
                "slug": "text"}

    @classmethod
    def restore_cfg(cls, meta):
        """What a checkpoint fixes when the task is rebuilt from it: its vocabulary and lengths."""
        out = {}
        if isinstance(meta.get("tokenizer"), dict) and isinstance(meta["tokenizer"].get("chars"), str):
            out["vocab"] = meta["tokenizer"]["chars"]
        for key in ("prompt_len", "max_new_tokens"):
            if isinstance(meta.get(key), int):
                out["max_prompt_len" if key == "prompt_len" else key] = meta[key]
        return out
