"""Back-translation: target-side monolingual text -> extra synthetic (source, target) pairs.

A small reverse model (tiny-transformer, target -> source) is trained with teacher forcing on the real
training pairs; it then translates each monolingual target-language line back into the source language
(greedy). A synthetic pair keeps the real text as its target and the model's output as its source, so
the forward model always learns to produce genuine target text. A second small model (source -> target)
checks the round trip: a pair whose source does not translate back into its target is dropped. Both
train for BT_STEPS optimizer steps by default, however many pairs there are, with a progress line about
every 10%. Used by ``BilingualPairLoader(augment=True, mono_path=...)``.
"""
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

from grpo_edge.core.tokenizer import EOS, PAD, CharTokenizer
from grpo_edge.errors import GrpoEdgeError

Pair = Tuple[str, str]
REVERSE_MODEL_DEFAULTS = {"d_model": 64, "nhead": 4, "num_layers": 2, "dim_feedforward": 128}
BT_STEPS = 800          # optimizer steps of each model (reverse, and forward for the round trip) by default


def read_mono(path: str, lang: str, check_language) -> List[str]:
    """Non-blank lines of a UTF-8 file of `lang` text; `check_language(text, lang, where)` raises on a bad line."""
    import os
    from grpo_edge.data.text_files import read_lines
    if not os.path.isfile(path):
        raise GrpoEdgeError("mono path %s does not exist" % path)
    out = []
    for lineno, line in enumerate(read_lines(path), 1):
        text = line.strip()
        if text:
            check_language(text, lang, "%s:%d" % (path, lineno))
            out.append(text)
    if not out:
        raise GrpoEdgeError("mono path %s holds no text" % path)
    return out


def _pad(seqs: List[List[int]], width: int) -> torch.Tensor:
    out = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = torch.tensor(s[:width], dtype=torch.long)
    return out


def train_seq2seq(pairs: List[Pair], tokenizer: CharTokenizer, steps: int = BT_STEPS, epochs: Optional[int] = None,
                  batch_size: int = 32, lr: float = 1e-3, seed: int = 0, model_kwargs: Optional[Dict] = None,
                  progress: Optional[Callable[[str], None]] = None, name: str = "model"):
    """Train a tiny-transformer with teacher forcing on (input text, output text) pairs; returns it in eval mode.

    `steps` optimizer steps of `batch_size` pairs (whole shuffled epochs, the last one cut), or exactly
    `epochs` epochs when given. progress(msg) gets a line about every 10% of the steps.
    Measured on 857 numeral pairs (en -> zh), 1 CPU thread: 800 steps (30 epochs) at lr 1e-3 back-translate
    141 of 142 unseen numbers exactly (about 60 s); 270 steps (10 epochs): 2 of 142; lr 3e-3 collapses to one
    output.
    """
    from grpo_edge.core.models import build_model
    kwargs = dict(REVERSE_MODEL_DEFAULTS, **(model_kwargs or {}))
    ins = [tokenizer.encode(a) for a, _ in pairs]
    outs = [tokenizer.encode(b, eos=True) for _, b in pairs]            # the output (+ EOS) is what is learned
    width_in, width_out = max(len(x) for x in ins), max(len(x) for x in outs)
    kwargs.setdefault("max_len", max(width_in, width_out, 8))
    per_epoch = (len(pairs) + batch_size - 1) // batch_size
    total = per_epoch * epochs if epochs else int(steps)
    t0, step, loss = time.time(), 0, float("nan")
    with torch.random.fork_rng():                                       # leave the caller's RNG untouched
        torch.manual_seed(seed)
        model = build_model("tiny-transformer", vocab_size=tokenizer.vocab_size, **kwargs)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        model.train()
        while step < total:
            order = torch.randperm(len(pairs)).tolist()
            for i in range(0, len(order), batch_size):
                idx = order[i:i + batch_size]
                src = _pad([ins[j] for j in idx], width_in)                   # (B, S)
                tgt = _pad([outs[j] for j in idx], width_out)                 # (B, T)
                mask = (tgt != PAD).float()                                   # EOS included, PAD excluded
                logp, _ = model.sequence_logprobs(src, tgt)                   # (B, T)
                loss = -(logp * mask).sum() / mask.sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                if progress is not None and (step == total or step % max(1, total // 10) == 0):
                    progress("back-translation: %s step %d/%d, loss %.3f (%.0f s)"
                             % (name, step, total, loss.item(), time.time() - t0))
                if step >= total:
                    break
    model.eval()
    return model


def train_reverse_model(pairs: List[Pair], tokenizer: CharTokenizer, epochs: Optional[int] = None,
                        batch_size: int = 32, lr: float = 1e-3, seed: int = 0, model_kwargs: Optional[Dict] = None,
                        steps: int = BT_STEPS, progress=None):
    """The reverse model (target text -> source text) of train_seq2seq."""
    return train_seq2seq([(t, s) for s, t in pairs], tokenizer, steps, epochs, batch_size, lr, seed, model_kwargs,
                         progress, "reverse model (target -> source)")


def back_translate(model, texts: List[str], tokenizer: CharTokenizer, max_new_tokens: int,
                   batch_size: int = 256) -> List[str]:
    """Greedy-translate `texts` with a train_seq2seq model (the reverse one: target -> source language)."""
    out = []
    width = min(max(len(t) for t in texts), model.max_len)
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            chunk = [tokenizer.encode(t[:width]) for t in texts[i:i + batch_size]]
            tokens, _, _ = model.generate(_pad(chunk, width), max_new_tokens, greedy=True, eos_id=EOS)
            out += [tokenizer.decode(row) for row in tokens.tolist()]
    return out


def synthetic_pairs(train: List[Pair], test: List[Pair], mono: List[str], tokenizer: CharTokenizer,
                    max_length: int, src_ok, epochs: Optional[int] = None, seed: int = 0,
                    model_kwargs: Optional[Dict] = None, steps: int = BT_STEPS,
                    progress: Optional[Callable[[str], None]] = None) -> Tuple[List[Pair], Dict[str, int]]:
    """Synthetic (source, target) pairs from monolingual targets, and counts of what was kept/dropped.

    Dropped: mono lines already a real target (nothing to add), lines equal to a held-out target (they
    would leak the test split into training), outputs `src_ok(text)` rejects (empty or not in the source
    language), and outputs that do not translate back: a forward model (source -> target, trained on the
    same real pairs) must turn the synthetic source into the monolingual line again, exactly
    (`not_round_trip`). A line the reverse model cannot translate ('hello world' among numerals) is
    dropped there instead of becoming a wrong pair.
    """
    known = set(t for _, t in train)
    held = set(t for _, t in test)
    todo = list(dict.fromkeys(m[:max_length - 1] for m in mono))
    stats = {"mono": len(todo), "known": 0, "held_out": 0, "rejected": 0, "not_round_trip": 0, "kept": 0}
    fresh = []
    for t in todo:
        if t in held:
            stats["held_out"] += 1
        elif t in known:
            stats["known"] += 1
        else:
            fresh.append(t)
    if not fresh:
        return [], stats
    say = progress or (lambda msg: None)
    say("back-translation: %d new target lines; training a reverse and a forward model on %d real pairs"
        % (len(fresh), len(train)))
    model = train_reverse_model(train, tokenizer, epochs=epochs, seed=seed, model_kwargs=model_kwargs, steps=steps,
                                progress=progress)
    budget = min(max_length, max(len(s) for s, _ in train) + 1, model.max_len)
    sources = back_translate(model, fresh, tokenizer, max_new_tokens=budget)
    candidates = []
    for s, t in zip(sources, fresh):
        s = s.strip()
        if s and src_ok(s):
            candidates.append((s, t))
        else:
            stats["rejected"] += 1
    out = []
    if candidates:
        forward = train_seq2seq(train, tokenizer, steps, epochs, seed=seed + 1, model_kwargs=model_kwargs,
                                progress=progress, name="forward model (source -> target)")
        back = back_translate(forward, [s for s, _ in candidates], tokenizer,
                              max_new_tokens=min(max_length, max(len(t) for _, t in train) + 1, forward.max_len))
        for (s, t), again in zip(candidates, back):
            if again.strip() == t:
                out.append((s, t))
            else:
                stats["not_round_trip"] += 1
    stats["kept"] = len(out)
    say("back-translation: %d synthetic pairs kept of %d lines (%d already known, %d held out, %d not in the "
        "source language, %d did not translate back)" % (len(out), stats["mono"], stats["known"], stats["held_out"],
                                                          stats["rejected"], stats["not_round_trip"]))
    return out, stats
