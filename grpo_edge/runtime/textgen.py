"""Greedy text generation with exported grpo-edge text models: numpy + onnxruntime only (no torch).

grpo_edge/runtime/textgen.py, copied unchanged into a deploy folder as textgen.py, next to runner.py (which
imports it for text models), char_tokenizer.py and ort_session.py:

    cfg = load_text_config(".")                       # tokenizer.json: chars, padding, lengths, model kind
    gen = TextGenerator(cfg, ort_functions("model.onnx", cfg))
    gen.complete(["12+7="])                           # -> ["19"]

Two model kinds, matching grpo_edge/core/models:
  micro-gpt          ONE decode step with the KV cache as inputs/outputs
                     (idx (B,1), past_keys/values (L,B,H,T,hd), position (B,1)) -> (logits (B,1,V), present_*).
                     The step has no causal mask, so the left-padded prompt is fed one token at a time
                     from a zero-length cache, then the greedy tokens are fed back until EOS.
  tiny-transformer   encoder (src (B,S) -> memory (B,S,D)) once, then a decoder step over the whole prefix
                     (memory, src, tgt_prefix (B,T) starting with BOS) -> logits (B,V) of the last position.
The EOS/pad contract is the torch one: a finished row keeps getting PAD fed back and its output stops
at its first EOS. grpo-edge also imports this module (calibration from decoding, bench) with step
functions that are torch modules: `functions` maps part name -> fn(feed dict) -> list of outputs.
"""
import json
import os
import time

import numpy as np

try:
    from .char_tokenizer import BOS, EOS, PAD, CharTokenizer
    from .ort_session import ort_session
except ImportError:                # a loose file in a deploy folder, next to its siblings
    from char_tokenizer import BOS, EOS, PAD, CharTokenizer
    from ort_session import ort_session

KINDS = {"micro-gpt": ("model",), "tiny-transformer": ("encoder", "decoder_step")}


def load_text_config(folder):
    """The text-model settings deploy wrote (tokenizer.json), or None for a non-text deploy folder."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def model_files(model_path, arch):
    """{part: file}: "model.onnx" -> {"model": "model.onnx"}; tiny-transformer ->
    {"encoder": "model.encoder.onnx", "decoder_step": "model.decoder_step.onnx"} (torch2onnx's names)."""
    parts = KINDS[arch]
    if parts == ("model",):
        return {"model": model_path}
    stem = model_path[:-5] if model_path.endswith(".onnx") else model_path
    return dict((p, "%s.%s.onnx" % (stem, p)) for p in parts)


def ort_functions(model_path, cfg, reference=False, threads=1):
    """{part: fn(feed) -> outputs} running the ONNX file(s) of `model_path` in onnxruntime.

    reference=True turns graph optimizations off (an int8 QDQ graph then computes exactly the
    quantization it describes); False uses ORT's fused kernels, the fast path on the device.
    """
    fns = {}
    for part, path in model_files(model_path, cfg["arch"]).items():
        sess = ort_session(path, reference=reference, threads=threads)
        names = set(i.name for i in sess.get_inputs())    # an input folded to a constant is not fed

        def run(feed, sess=sess, names=names):
            return sess.run(None, dict((k, v) for k, v in feed.items() if k in names))
        fns[part] = run
    return fns


class TextGenerator(object):
    """Greedy completions of text prompts; `record(part, feed)` (optional) sees every step's inputs."""

    def __init__(self, cfg, functions, record=None):
        if cfg.get("arch") not in KINDS:
            raise ValueError("unknown text model kind %r (known: %s)" % (cfg.get("arch"), ", ".join(KINDS)))
        self.cfg, self.fns, self.record = cfg, functions, record
        self.tokenizer = CharTokenizer(cfg["chars"])
        self.input_len, self.padding = int(cfg["input_len"]), cfg.get("padding", "left")
        self.max_new_tokens = int(cfg["max_new_tokens"])
        self.step_times = []           # seconds per model call, filled when timing is on
        self.timing = False

    def encode(self, prompts):
        """Prompts -> (B, input_len) int64, padded with PAD on the configured side."""
        ids = np.full((len(prompts), self.input_len), PAD, dtype=np.int64)
        for i, p in enumerate(prompts):
            t = self.tokenizer.encode(p)
            if len(t) > self.input_len:
                raise ValueError("prompt %r has %d characters; this model takes at most %d"
                                 % (p, len(t), self.input_len))
            if self.padding == "left":
                ids[i, self.input_len - len(t):] = t
            else:
                ids[i, :len(t)] = t
        return ids

    def _call(self, part, feed):
        if self.record is not None:
            self.record(part, feed)
        if not self.timing:
            return self.fns[part](feed)
        t0 = time.perf_counter()
        out = self.fns[part](feed)
        self.step_times.append(time.perf_counter() - t0)
        return out

    def generate(self, ids, max_new_tokens=None):
        """ids (B, input_len) int64 -> tokens (B, Tn) int64: greedy, PAD after a row's EOS."""
        n_new = int(max_new_tokens or self.max_new_tokens)
        if self.cfg["arch"] == "micro-gpt":
            return self._generate_kv(ids, n_new)
        return self._generate_seq2seq(ids, n_new)

    def _generate_kv(self, ids, n_new):
        b, tp = ids.shape
        if tp + n_new - 1 > int(self.cfg["max_len"]):
            raise ValueError("prompt (%d) + %d new tokens exceeds the model's max_len %d"
                             % (tp, n_new, self.cfg["max_len"]))
        n_layer, n_head, head_dim = self.cfg["cache"]
        keys = np.zeros((n_layer, b, n_head, 0, head_dim), dtype=np.float32)    # (L, B, H, T_past, hd)
        values = keys.copy()
        logits = None
        for t in range(tp):                          # prefill one token at a time (no mask in the step)
            logits, keys, values = self._call("model", {
                "idx": ids[:, t:t + 1], "past_keys": keys, "past_values": values,
                "position": np.full((b, 1), t, dtype=np.int64)})
        out, finished = [], np.zeros(b, dtype=bool)
        for step in range(n_new):
            tok = np.where(finished, PAD, logits[:, -1].argmax(-1)).astype(np.int64)     # (B,)
            out.append(tok)
            finished |= tok == EOS
            if finished.all() or step == n_new - 1:
                break
            logits, keys, values = self._call("model", {
                "idx": tok[:, None], "past_keys": keys, "past_values": values,
                "position": np.full((b, 1), tp + step, dtype=np.int64)})
        return np.stack(out, 1)

    def _generate_seq2seq(self, src, n_new):
        b = src.shape[0]
        memory = self._call("encoder", {"src": src})[0]                       # (B, S, D)
        prefix = np.full((b, 1), BOS, dtype=np.int64)                         # (B, 1)
        out, finished = [], np.zeros(b, dtype=bool)
        for step in range(n_new):
            logits = self._call("decoder_step", {"memory": memory, "src": src, "tgt_prefix": prefix})[0]   # (B, V)
            tok = np.where(finished, PAD, logits.argmax(-1)).astype(np.int64)
            out.append(tok)
            finished |= tok == EOS
            if finished.all() or step == n_new - 1:
                break
            prefix = np.concatenate([prefix, tok[:, None]], 1)                # (B, t + 2)
        return np.stack(out, 1)

    def complete(self, prompts, batch_size=64):
        """Greedy completion text of each prompt (up to its first EOS)."""
        out = []
        for i in range(0, len(prompts), batch_size):
            tokens = self.generate(self.encode(prompts[i:i + batch_size]))
            out += [self.tokenizer.decode(row) for row in tokens]
        return out

    def bench(self, prompt, runs=100, warmup=10):
        """Batch-1 latency: median seconds per completion and per model call (one token step)."""
        ids = self.encode([prompt])
        for _ in range(warmup):
            self.generate(ids)
        self.step_times, self.timing = [], True
        per_completion, tokens = np.empty(runs), 0
        try:
            for i in range(runs):
                t0 = time.perf_counter()
                row = self.generate(ids)[0]
                per_completion[i] = time.perf_counter() - t0
                tokens = int(np.sum(np.cumsum(row == EOS) - (row == EOS) == 0))   # tokens up to and with EOS
        finally:
            self.timing = False
        return {"per_completion_median_s": float(np.median(per_completion)),
                "per_completion_p90_s": float(np.percentile(per_completion, 90)),
                "per_token_median_s": float(np.median(self.step_times)),
                "model_calls_per_completion": len(self.step_times) // runs, "new_tokens": tokens,
                "prompt": prompt, "runs": runs, "warmup": warmup}
