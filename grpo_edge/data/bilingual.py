"""BilingualPairLoader: (source, target) sentence pairs -> a shared char tokenizer -> padded id batches.

    loader = BilingualPairLoader(src_lang="zh", tgt_lang="en", max_length=64)   # built-in numbers
    loader = BilingualPairLoader(data_path="my_pairs.tsv", batch_size=16)       # your own pairs
    for batch in loader:                       # one shuffled epoch over the train split
        batch["src"], batch["tgt"]             # (B, S) long, (B, T) long (target + EOS, PAD after)

Files (UTF-8): ``.tsv`` / ``.txt`` with ``source<TAB>target`` per line, or ``.jsonl`` / ``.json`` with
one object per line, ``{"src": ..., "tgt": ...}`` or keyed by language (``{"zh": ..., "en": ...}``).
Blank lines are skipped. ``data_path`` may also be a folder holding ``train.<ext>`` and optionally
``test.<ext>``; without a test file the pairs are split by ``seed`` (``test_fraction``).
Every problem (missing or empty path, malformed line, not UTF-8, pairs in the wrong language direction)
is a one-line GrpoEdgeError naming the file (and line).
"""
import json
import os
import random
import sys
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

from grpo_edge.core import devices
from grpo_edge.core.tokenizer import PAD, CharTokenizer
from grpo_edge.data.back_translation import BT_STEPS, read_mono, synthetic_pairs
from grpo_edge.data.text_files import read_lines
from grpo_edge.data.zh_numbers import number_pairs
from grpo_edge.errors import ConfigError, GrpoEdgeError

Pair = Tuple[str, str]
_EXTS = (".tsv", ".txt", ".jsonl", ".json")
BUILTIN_MAX_NUMBER = 999999      # the built-in pairs are all enumerated: 1M pairs at most


def has_cjk(text: str) -> bool:
    """True if `text` holds a CJK ideograph (U+3400..U+9FFF, U+F900..U+FAFF, U+20000..U+2FFFF)."""
    for c in text:
        o = ord(c)
        if 0x3400 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FFFF:
            return True
    return False


def _check_language(text: str, lang: str, side: str, where: str, other: str) -> None:
    """zh text must hold CJK characters; en text must not. Other languages are not checked."""
    if lang == "zh" and not has_cjk(text):
        hint = " (the other side does: the pairs look reversed, swap src_lang/tgt_lang)" if has_cjk(other) else ""
        raise GrpoEdgeError("%s: %s side %r has no Chinese characters but %s_lang='zh'%s"
                            % (where, side, text[:40], side, hint))
    if lang == "en" and has_cjk(text):
        hint = " (the pairs look reversed, swap src_lang/tgt_lang)" if not has_cjk(other) else ""
        raise GrpoEdgeError("%s: %s side %r holds Chinese characters but %s_lang='en'%s"
                            % (where, side, text[:40], side, hint))


def _check_mono(text: str, lang: str, where: str) -> None:
    """Monolingual (target-language) text: the same language rules as a pair's target side."""
    if lang == "zh" and not has_cjk(text):
        raise GrpoEdgeError("%s: monolingual text %r has no Chinese characters but tgt_lang='zh'" % (where, text[:40]))
    if lang == "en" and has_cjk(text):
        raise GrpoEdgeError("%s: monolingual text %r holds Chinese characters but tgt_lang='en'" % (where, text[:40]))


def read_pairs(path: str, src_lang: str = "zh", tgt_lang: str = "en") -> List[Pair]:
    """Read (source, target) pairs from a TSV or JSONL file, checking format and language direction."""
    if not os.path.isfile(path):
        raise GrpoEdgeError("data path %s does not exist" % path)
    is_json = path.lower().endswith((".jsonl", ".json"))
    pairs = []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        where = "%s:%d" % (path, lineno)
        if is_json:
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise GrpoEdgeError("%s: not valid JSON (%s)" % (where, e)) from None
            if not isinstance(obj, dict):
                raise GrpoEdgeError("%s: expected a JSON object, got %s" % (where, type(obj).__name__))
            keys = ("src", "tgt") if "src" in obj or "tgt" in obj else (src_lang, tgt_lang)
            if keys[0] not in obj or keys[1] not in obj:
                raise GrpoEdgeError('%s: expected keys "src" and "tgt" (or %r and %r), got %s'
                                    % (where, src_lang, tgt_lang, sorted(obj)))
            src, tgt = obj[keys[0]], obj[keys[1]]
            if not isinstance(src, str) or not isinstance(tgt, str):
                raise GrpoEdgeError("%s: %r and %r must be strings" % (where, keys[0], keys[1]))
        else:
            cols = line.split("\t")
            if len(cols) != 2:
                raise GrpoEdgeError("%s: expected 'source<TAB>target' (2 columns), got %d column(s)"
                                    % (where, len(cols)))
            src, tgt = cols
        src, tgt = src.strip(), tgt.strip()
        if not src or not tgt:
            raise GrpoEdgeError("%s: empty %s side" % (where, "source" if not src else "target"))
        _check_language(src, src_lang, "src", where, tgt)
        _check_language(tgt, tgt_lang, "tgt", where, src)
        pairs.append((src, tgt))
    if not pairs:
        raise GrpoEdgeError("data path %s holds no pairs" % path)
    return pairs


def split_pairs(pairs: List[Pair], test_fraction: float, seed: int) -> Tuple[List[Pair], List[Pair]]:
    """Deterministic disjoint split: a seeded shuffle, then the first round(test_fraction * n) are test.

    Duplicated pairs are removed first so that no held-out pair also appears in train. Both lists keep
    the shuffled order, so any prefix (e.g. an evaluation subset) is a uniform sample.
    """
    unique = list(dict.fromkeys(pairs))
    order = list(range(len(unique)))
    random.Random(seed).shuffle(order)
    n_test = int(round(test_fraction * len(unique)))
    if len(unique) > 1:
        n_test = min(max(n_test, 1 if test_fraction > 0 else 0), len(unique) - 1)
    test = [unique[i] for i in order[:n_test]]
    train = [unique[i] for i in order[n_test:]]
    return train, test


def _stderr_line(text):
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class BilingualPairLoader(object):
    """Sentence pairs for a translation task, tokenized with one CharTokenizer shared by both sides.

    src_lang, tgt_lang: language codes; "zh" sides must hold Chinese characters, "en" sides must not.
    max_length: longest source (ids) and target (ids, EOS included); longer sides are cut
        (``num_truncated`` counts the pairs cut).
    data_path: a TSV/JSONL file or a folder with train/test files; None = the built-in zh-en-numbers
        pairs (0..max_number, either direction).
    augment, mono_path: back-translation: a reverse (target -> source) tiny-transformer trained on the
        train pairs turns each line of mono_path (target-language text, UTF-8) into a synthetic pair
        added to ``train_pairs`` (see grpo_edge.data.back_translation; ``synthetic_pairs`` and
        ``augment_stats`` say what was added, and what was dropped: a synthetic source that does not
        translate back into its line is). bt_steps / bt_epochs / bt_model / bt_seed: the reverse and
        forward models' optimizer steps (default 800, about a minute each on one CPU core; bt_epochs,
        when given, counts whole epochs instead), tiny-transformer kwargs and seed (default: `seed`).
        progress: fn(line) for the back-translation's progress lines (default: print to stderr; None: quiet).
    vocab, src_len: the characters and padded source length a trained model fixes (its checkpoint's; the
        task's restore_cfg passes them); default: the data's.
    batch_size: pairs per batch when iterating; seed: the train/test split and the shuffling.
    test_fraction: held-out share when the data has no separate test file.
    max_number, liang: the built-in pairs' range and 两 form (see grpo_edge.data.zh_numbers).

    Attributes: ``train_pairs``, ``test_pairs`` (lists of (src, tgt) strings), ``tokenizer``,
    ``src_len`` (fixed padded source length), ``tgt_len`` (longest target + EOS).
    """

    def __init__(self, src_lang: str = "zh", tgt_lang: str = "en", max_length: int = 64,
                 data_path: Optional[str] = None, augment: bool = False, mono_path: Optional[str] = None,
                 batch_size: int = 32, seed: int = 0, test_fraction: float = 0.1,
                 max_number: int = 9999, liang: bool = False, bt_epochs: Optional[int] = None,
                 bt_model: Optional[dict] = None, bt_seed: Optional[int] = None, bt_steps: int = BT_STEPS,
                 progress: Optional[Callable[[str], None]] = _stderr_line, vocab: Optional[str] = None,
                 src_len: Optional[int] = None):
        if src_lang == tgt_lang:
            raise ConfigError("src_lang and tgt_lang are both %r: a translation needs two languages" % src_lang)
        if not isinstance(max_length, int) or max_length < 2:
            raise ConfigError("max_length must be an integer >= 2, got %r" % (max_length,))
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError("batch_size must be an integer >= 1, got %r" % (batch_size,))
        if not 0.0 <= test_fraction < 1.0:
            raise ConfigError("test_fraction must be in [0, 1), got %r" % (test_fraction,))
        if mono_path is not None and not augment:
            raise ConfigError("mono_path is only used for back-translation: set augment=True or drop mono_path")
        if augment and mono_path is None:
            raise ConfigError("augment=True (back-translation) needs mono_path: a UTF-8 file of %s text, one line "
                              "each, that the training pairs do not hold; it becomes synthetic pairs" % tgt_lang)
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.max_length = max_length
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0

        if data_path is None:
            pairs, test = self._builtin(max_number, liang), None
        else:
            pairs, test = self._from_path(str(data_path))
        self.num_truncated = 0
        pairs = self._truncate(pairs)                    # cut before splitting: the split stays disjoint
        if test is None:
            self.train_pairs, self.test_pairs = split_pairs(pairs, test_fraction, seed)
        else:
            self.test_pairs = list(dict.fromkeys(self._truncate(test)))
            held = set(self.test_pairs)
            self.train_pairs = [p for p in dict.fromkeys(pairs) if p not in held]
        mono = read_mono(str(mono_path), tgt_lang, _check_mono) if augment else []
        chars = set("".join(mono))
        for s, t in self.train_pairs + self.test_pairs:
            chars.update(s)
            chars.update(t)
        if vocab is not None:
            missing = chars - set(vocab)
            if missing:
                raise ConfigError("the data holds characters the model's vocabulary does not: %r"
                                  % "".join(sorted(missing))[:40])
            chars = set(vocab)
        self.tokenizer = CharTokenizer("".join(chars))
        self.synthetic_pairs, self.augment_stats = [], {}
        if augment:
            src_chars = set("".join(s for s, _ in self.train_pairs))

            def src_ok(text):   # in the source language and only characters real sources use
                return set(text) <= src_chars and (src_lang != "zh" or has_cjk(text))
            self.synthetic_pairs, self.augment_stats = synthetic_pairs(
                self.train_pairs, self.test_pairs, mono, self.tokenizer, max_length, src_ok,
                epochs=bt_epochs, seed=seed if bt_seed is None else bt_seed, model_kwargs=bt_model, steps=bt_steps,
                progress=progress)
            self.train_pairs = self.train_pairs + self.synthetic_pairs
        everything = self.train_pairs + self.test_pairs
        self.src_len = int(src_len) if src_len else max(len(s) for s, _ in everything)   # sources padded to this
        self.tgt_len = max(len(t) for _, t in everything) + 1       # + EOS

    # --- reading -----------------------------------------------------------------------------
    def _builtin(self, max_number, liang):
        langs = (self.src_lang, self.tgt_lang)
        if set(langs) != {"zh", "en"}:
            raise ConfigError("the built-in pairs are zh<->en; for %s->%s give data_path" % langs)
        if not isinstance(max_number, int) or not 1 <= max_number <= BUILTIN_MAX_NUMBER:
            raise ConfigError("max_number must be an integer in 1..%d, got %r" % (BUILTIN_MAX_NUMBER, max_number))
        pairs = number_pairs(max_number, liang)                     # (zh, en)
        if langs == ("en", "zh"):
            pairs = [(en, zh) for zh, en in pairs]
        return pairs

    def _from_path(self, path):
        """(pairs, test pairs or None when the data has no separate test file)."""
        if os.path.isdir(path):
            found = dict((os.path.splitext(f)[0], os.path.join(path, f)) for f in sorted(os.listdir(path))
                         if f.lower().endswith(_EXTS))
            if "train" not in found:
                raise GrpoEdgeError("data folder %s has no train file (train.tsv or train.jsonl)" % path)
            train = read_pairs(found["train"], self.src_lang, self.tgt_lang)
            test = read_pairs(found["test"], self.src_lang, self.tgt_lang) if "test" in found else None
            return train, test
        if not os.path.exists(path):
            raise GrpoEdgeError("data path %s does not exist" % path)
        if not path.lower().endswith(_EXTS):
            raise GrpoEdgeError("data path %s: expected a .tsv, .txt, .jsonl or .json file" % path)
        if os.path.getsize(path) == 0:
            raise GrpoEdgeError("data path %s is empty" % path)
        return read_pairs(path, self.src_lang, self.tgt_lang), None

    def _truncate(self, pairs):
        out = []
        for s, t in pairs:
            s2, t2 = s[:self.max_length], t[:self.max_length - 1]      # target keeps room for EOS
            self.num_truncated += (s2, t2) != (s, t)
            out.append((s2, t2))
        return out

    # --- tensors -------------------------------------------------------------------------------
    def encode_src(self, texts: List[str]) -> torch.Tensor:
        """Sources -> (B, src_len) long, right-padded with PAD."""
        out = torch.full((len(texts), self.src_len), PAD, dtype=torch.long)
        for i, s in enumerate(texts):
            ids = self.tokenizer.encode(s[:self.src_len])
            out[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out

    def encode_tgt(self, texts: List[str]) -> Tuple[torch.Tensor, torch.Tensor]:
        """Targets -> (ids (B, T) long: text + EOS then PAD, mask (B, T) float: 1 up to and with EOS)."""
        from grpo_edge.core.tokenizer import encode_targets
        return encode_targets(self.tokenizer, texts)

    def collate(self, pairs: List[Pair]) -> Dict[str, torch.Tensor]:
        """A batch: {"src": (B, S) long, "tgt": (B, T) long, "tgt_mask": (B, T) float}."""
        tgt, mask = self.encode_tgt([t for _, t in pairs])
        return {"src": self.encode_src([s for s, _ in pairs]), "tgt": tgt, "tgt_mask": mask}

    def pairs(self, split: str = "train") -> List[Pair]:
        if split not in ("train", "test"):
            raise ConfigError("split must be 'train' or 'test', got %r" % (split,))
        return self.train_pairs if split == "train" else self.test_pairs

    def batches(self, split: str = "train", batch_size: Optional[int] = None, shuffle: bool = True,
                generator: Optional[torch.Generator] = None) -> Iterator[Dict[str, torch.Tensor]]:
        """One epoch over `split` in batches (the last may be smaller); shuffled with `generator`."""
        data = self.pairs(split)
        bs = batch_size or self.batch_size
        order = devices.randperm(len(data), generator).tolist() if shuffle else range(len(data))
        order = list(order)
        for i in range(0, len(order), bs):
            yield self.collate([data[j] for j in order[i:i + bs]])

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        self.epoch += 1
        return self.batches("train", generator=g)

    def __len__(self):
        return (len(self.train_pairs) + self.batch_size - 1) // self.batch_size
