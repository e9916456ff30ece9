"""Built-in task `zh-en-numbers`: tiny-transformer translates Chinese numerals into English words.

    task = ZhEnNumbersTask({"max_number": 9999}, seed=0)      # 三百零五 -> "three hundred five"
    policy = build_model("tiny-transformer", **task.model_kwargs())

A verifiable translation task: the pairs are generated (grpo_edge.data.zh_numbers documents the
numeral rules: 零 for zero runs, 十/十一 at the start, optional 两), read through BilingualPairLoader,
which also reads the user's own TSV/JSONL pairs (``data_path``, the CLI's ``--data-path``).
Sources are right-padded with PAD to a fixed length; tiny-transformer masks source PADs.
"""
from grpo_edge.data.bilingual import BilingualPairLoader
from grpo_edge.tasks.rewards import chrf, exact_match
from grpo_edge.tasks.text_base import TextTask, cfg_get
from grpo_edge.errors import ConfigError


class ZhEnNumbersTask(TextTask):
    """Chinese numeral -> English words, rewarded by exact match and chrF.

    Config keys (``task`` section), all optional:
      max_number (9999)       built-in pairs cover 0..max_number (up to 999,999)
      liang (False)           write a leading 2 of hundreds/thousands/万 as 两 (两百, 两千) in the sources
      data_path (None)        the user's pairs (TSV/JSONL file or folder with train/test files) instead of
                              the built-in numbers
      src_lang ("zh"), tgt_lang ("en")   languages of the pairs (checked: zh sides must hold Chinese)
      max_length (64)         longest source / target (with EOS) in tokens; longer sides are cut
      test_fraction (0.1)     held-out share when the data has no test file
      split_seed (0)          seed of the train/test split (independent of the training seed)
      max_new_tokens (auto)   generation budget; default: the longest target + EOS
      temperature (1.0)       sampling temperature of rollouts
      rewards ({"exact_match": 1.0, "chrf": 0.5})   weighted rewards (built-ins or "module.path:fn")
      reward (None)           one more user reward "module.path:fn", weight 1.0
      reward_errors ("raise") "raise" or "skip" (warn, score 0) a reward that raises or returns NaN/inf
      eval_size (500)         test pairs scored by evaluate(n=0); 0 = all
      vocab, src_len (None)   the characters and padded source length; default the data's (a checkpoint keeps its own)
      augment (False), mono_path (None), bt_steps (800), bt_epochs (None)   back-translation: target-language
                              lines in mono_path become synthetic train pairs via a reverse model, kept when a
                              forward model translates them back (BilingualPairLoader); bt_epochs counts epochs
    """
    name = "zh-en-numbers"
    input_key = "src"
    default_rewards = {"exact_match": 1.0, "chrf": 0.5}
    # Every config key and its default (None = derived from the data); the config validator reads it.
    defaults = {"max_number": 9999, "liang": False, "data_path": None, "src_lang": "zh", "tgt_lang": "en",
                "max_length": 64, "test_fraction": 0.1, "split_seed": 0, "max_new_tokens": None,
                "temperature": 1.0, "rewards": dict(default_rewards), "reward": None, "reward_errors": "raise",
                "eval_size": 500, "augment": False, "mono_path": None, "bt_epochs": None, "bt_steps": 800,
                "vocab": None, "src_len": None}
    eval_metrics = {"exact_match": exact_match, "chrf": chrf}

    def __init__(self, cfg: dict = None, seed: int = 0):
        cfg = dict(cfg or {})
        super(ZhEnNumbersTask, self).__init__(cfg, seed)
        test_fraction = float(cfg_get(cfg, "test_fraction", 0.1, (int, float)))
        if not 0.0 < test_fraction < 1.0:
            raise ConfigError("task.test_fraction must be in (0, 1), got %r" % test_fraction)
        self.loader = BilingualPairLoader(
            src_lang=cfg_get(cfg, "src_lang", "zh", str), tgt_lang=cfg_get(cfg, "tgt_lang", "en", str),
            max_length=cfg_get(cfg, "max_length", 64, int, 2), data_path=cfg.get("data_path"),
            seed=cfg_get(cfg, "split_seed", 0, int), test_fraction=test_fraction,
            max_number=cfg_get(cfg, "max_number", 9999, int, 1), liang=cfg_get(cfg, "liang", False, bool),
            augment=cfg_get(cfg, "augment", False, bool), mono_path=cfg.get("mono_path"),
            bt_epochs=cfg_get(cfg, "bt_epochs", None, int, 1),
            bt_steps=cfg_get(cfg, "bt_steps", 800, int, 1), bt_seed=seed, vocab=cfg_get(cfg, "vocab", None, str),
            src_len=cfg_get(cfg, "src_len", None, int, 1))
        self.tokenizer = self.loader.tokenizer
        self.train_problems = self.loader.train_pairs
        self.test_problems = self.loader.test_pairs
        if not self.train_problems:
            raise ConfigError("no training pairs: every pair of the data is also in the test split (%d test pairs)"
                              % len(self.test_problems))
        if not self.test_problems:
            raise ConfigError("the data has too few pairs for a held-out test split (%d pairs)"
                              % len(self.train_problems))
        self.src_len = self.loader.src_len
        self.max_new_tokens = cfg_get(cfg, "max_new_tokens", self.loader.tgt_len, int, 1)
        self.check_rewards()

    def values(self, critic, rollout):
        """PPO mode: the critic's value (N, Tn) before each output token: a tiny-transformer with out_dim=1,
        teacher-forced like logprobs (position i sees the source and the tokens before i)."""
        import torch
        from grpo_edge.core.tokenizer import BOS
        src, tokens = rollout.inputs[self.input_key], rollout.actions
        bos = torch.full((tokens.shape[0], 1), BOS, dtype=torch.long, device=tokens.device)
        return critic(src, torch.cat([bos, tokens[:, :-1]], dim=1))[:, :, 0]               # (N, Tn)

    def encode_inputs(self, texts):
        """Sources -> (B, src_len) long, right-padded with PAD."""
        return self.loader.encode_src(texts)

    @classmethod
    def restore_cfg(cls, meta):
        """What a checkpoint fixes when the task is rebuilt from it (eval, calibrate, deploy): its vocabulary
        and lengths. Back-translation is not run again: the model is trained, and eval and calibration read
        the real pairs only (a run with --mono-path evaluates without its mono file, in seconds)."""
        out = {"augment": False, "mono_path": None}
        if isinstance(meta.get("tokenizer"), dict) and isinstance(meta["tokenizer"].get("chars"), str):
            out["vocab"] = meta["tokenizer"]["chars"]
        for key in ("src_len", "max_new_tokens"):
            if isinstance(meta.get(key), int):
                out[key] = meta[key]
        return out

    def checkpoint_meta(self) -> dict:
        return {
            "tokenizer": self.tokenizer.to_dict(),
            "vocab_size": self.tokenizer.vocab_size,
            "src_len": self.src_len,
            "max_new_tokens": self.max_new_tokens,
            "input_shape": [self.src_len],
            "input_name": self.input_key,
            "padding": "right",
            "src_lang": self.loader.src_lang,
            "tgt_lang": self.loader.tgt_lang,
        }
