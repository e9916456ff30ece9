"""TinyTransformer: a small pre-LN encoder-decoder for char-level seq2seq (Python 3.6 / torch 1.10 safe).

Shapes: src (B, S) long, tgt_in (B, T) long -> logits (B, T, V). Source and target share one
vocabulary and one embedding (char level; PAD=0, BOS=1, EOS=2). Source pad tokens (src == pad_id)
are masked out of encoder self-attention and decoder cross-attention; the decoder input starts with BOS.

Export is two functions (see `export_spec`): the encoder (run once per source) and a decoder step that
recomputes the decoder over the whole target prefix and returns the last position's logits. Recomputing
keeps the exported step small and stateless; at max_len 128 the cost is small.
"""
import torch
import torch.nn as nn

from ._layers import (Attention, CompletionBuffer, FeedForward, causal_bias, init_transformer_weights,
                      logprobs_and_entropy, padding_bias, run_checkpointed, sample_next)
from .spec import ExportSpec


class EncoderLayer(nn.Module):
    """x + self_attn(ln(x)) with source padding mask, then x + ff(ln(x)). (B, S, D) -> (B, S, D)."""

    def __init__(self, d_model, nhead, dim_feedforward, hidden_dropout, attn_dropout):
        super(EncoderLayer, self).__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, nhead, attn_dropout, hidden_dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, dim_feedforward, "relu", hidden_dropout)

    def forward(self, x, src_bias):
        x = x + self.attn(self.ln1(x), bias=src_bias)[0]
        return x + self.ff(self.ln2(x))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder memory, feed-forward; all pre-LN."""

    def __init__(self, d_model, nhead, dim_feedforward, hidden_dropout, attn_dropout):
        super(DecoderLayer, self).__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.self_attn = Attention(d_model, nhead, attn_dropout, hidden_dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.cross_attn = Attention(d_model, nhead, attn_dropout, hidden_dropout)
        self.ln3 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, dim_feedforward, "relu", hidden_dropout)

    def forward(self, y, memory, tgt_bias, src_bias):
        # y (B, T, D), memory (B, S, D), tgt_bias (1, 1, T, T), src_bias (B, 1, 1, S)
        y = y + self.self_attn(self.ln1(y), bias=tgt_bias)[0]
        y = y + self.cross_attn(self.ln2(y), source=memory, bias=src_bias)[0]
        return y + self.ff(self.ln3(y))


class TinyTransformer(nn.Module):
    """Encoder-decoder transformer policy (num_layers encoder and num_layers decoder layers).

    forward(src (B, S), tgt_in (B, T)) -> logits (B, T, out_dim or vocab_size)
    The output head is tied to the shared embedding when out_dim is None.
    """

    arch = "tiny-transformer"
    pad_id = 0
    bos_id = 1

    def __init__(self, vocab_size, d_model=128, nhead=4, num_layers=4, dim_feedforward=256, max_len=128,
                 hidden_dropout=0.0, attn_dropout=0.0, out_dim=None):
        super(TinyTransformer, self).__init__()
        self.vocab_size, self.d_model, self.nhead, self.num_layers = vocab_size, d_model, nhead, num_layers
        self.dim_feedforward, self.max_len, self.out_dim = dim_feedforward, max_len, out_dim
        self.hidden_dropout, self.attn_dropout = hidden_dropout, attn_dropout
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.src_pos = nn.Embedding(max_len, d_model)
        self.tgt_pos = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(hidden_dropout)
        args = (d_model, nhead, dim_feedforward, hidden_dropout, attn_dropout)
        self.encoder = nn.ModuleList([EncoderLayer(*args) for _ in range(num_layers)])
        self.enc_ln = nn.LayerNorm(d_model)
        self.decoder = nn.ModuleList([DecoderLayer(*args) for _ in range(num_layers)])
        self.dec_ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size if out_dim is None else out_dim, bias=False)
        init_transformer_weights(self, 2 * num_layers)
        if out_dim is None:
            self.head.weight = self.tok_emb.weight
        self.register_buffer("causal", causal_bias(max_len), persistent=False)   # (1, 1, L, L)
        self.checkpoint_interval = 0

    def config(self):
        """Constructor kwargs as plain Python values: build_model(self.arch, **self.config()) rebuilds it."""
        return {"vocab_size": int(self.vocab_size), "d_model": int(self.d_model), "nhead": int(self.nhead),
                "num_layers": int(self.num_layers), "dim_feedforward": int(self.dim_feedforward),
                "max_len": int(self.max_len), "hidden_dropout": float(self.hidden_dropout),
                "attn_dropout": float(self.attn_dropout),
                "out_dim": None if self.out_dim is None else int(self.out_dim)}

    supports_gradient_checkpointing = True

    def set_gradient_checkpointing(self, interval=2):
        """Recompute every `interval`-th encoder and decoder layer in backward (0 = off); grads unchanged."""
        if interval < 0:
            raise ValueError("checkpoint interval must be >= 0, got %d" % interval)
        self.checkpoint_interval = int(interval)

    def _ckpt(self, i):
        return (self.checkpoint_interval > 0 and self.training and torch.is_grad_enabled()
                and i % self.checkpoint_interval == 0)

    def _check_len(self, t, what):
        if t > self.max_len:
            raise ValueError("%s of %d tokens is longer than max_len=%d" % (what, t, self.max_len))

    def encode(self, src):
        """src (B, S) long -> (memory (B, S, D), src_bias (B, 1, 1, S) additive pad mask)."""
        s = src.shape[1]
        self._check_len(s, "source")
        src_bias = padding_bias(src, self.pad_id)
        x = self.drop(self.tok_emb(src) + self.src_pos.weight[:s])       # (B, S, D)
        for i, layer in enumerate(self.encoder):
            if self._ckpt(i):
                x = run_checkpointed(layer, x, src_bias)
            else:
                x = layer(x, src_bias)
        return self.enc_ln(x), src_bias

    def decode(self, memory, src_bias, tgt_in):
        """memory (B, S, D), src_bias (B, 1, 1, S), tgt_in (B, T) long -> logits (B, T, V)."""
        t = tgt_in.shape[1]
        self._check_len(t, "target")
        y = self.drop(self.tok_emb(tgt_in) + self.tgt_pos.weight[:t])    # (B, T, D)
        tgt_bias = self.causal[:, :, :t, :t]                              # (1, 1, T, T)
        for i, layer in enumerate(self.decoder):
            if self._ckpt(i):
                y = run_checkpointed(layer, y, memory, tgt_bias, src_bias)
            else:
                y = layer(y, memory, tgt_bias, src_bias)
        return self.head(self.dec_ln(y))                                  # (B, T, V)

    def forward(self, src, tgt_in):
        """src (B, S), tgt_in (B, T) long (tgt_in starts with BOS) -> logits (B, T, V)."""
        memory, src_bias = self.encode(src)
        return self.decode(memory, src_bias, tgt_in)

    def generate(self, src, max_new_tokens, temperature=1.0, greedy=False, generator=None, eos_id=2, pad_id=0,
                 bos_id=1):
        """Sample target sequences; the encoder runs once, the decoder recomputes over the prefix each step.

        src (B, S) long, right- or left-padded with pad_id (pads are masked).
        Returns tokens (B, Tn) long (BOS not included), logp (B, Tn) float of log-softmax(logits /
        temperature) at the chosen token, mask (B, Tn) float; same EOS/mask contract as MicroGPT.generate.
        No grad; dropout follows the module's train/eval mode.
        """
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if not temperature > 0:
            raise ValueError("temperature must be > 0, got %r (use greedy=True for argmax decoding)" % (temperature,))
        self._check_len(max_new_tokens, "target")      # decoder sees BOS + max_new_tokens - 1 tokens
        with torch.no_grad():
            memory, src_bias = self.encode(src)
            prefix = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)   # (B, 1)
            out = CompletionBuffer(src.shape[0], eos_id, pad_id, src.device)
            for step in range(max_new_tokens):
                logits = self.decode(memory, src_bias, prefix)[:, -1]                          # (B, V)
                tok, logp = sample_next(logits, temperature, greedy, generator)
                tok = out.add(tok, logp)
                if out.all_done() or step == max_new_tokens - 1:
                    break
                prefix = torch.cat([prefix, tok.unsqueeze(1)], dim=1)                          # (B, t + 2)
            return out.result()

    def sequence_logprobs(self, src, tokens, temperature=1.0, bos_id=1):
        """Teacher-forced (logp (B, Tn), entropy (B, Tn)) of `tokens` (B, Tn) given src (B, S), with grad."""
        bos = torch.full((tokens.shape[0], 1), bos_id, dtype=torch.long, device=tokens.device)
        tgt_in = torch.cat([bos, tokens[:, :-1]], dim=1)                 # (B, Tn)
        return logprobs_and_entropy(self.forward(src, tgt_in), tokens, temperature)

    def export_spec(self, batch_size=1, src_len=6, tgt_len=3):
        """Two specs, {"encoder": ..., "decoder_step": ...}; batch, source and prefix lengths are dynamic.

        encoder:      src (B, S) long -> memory (B, S, D)
        decoder_step: memory (B, S, D), src (B, S) long (for its pad mask), tgt_prefix (B, T) long
                      starting with BOS -> logits (B, V) of the last prefix position
        """
        device = self.tok_emb.weight.device
        src = torch.randint(3, self.vocab_size, (batch_size, src_len), device=device)
        src[:, -1] = self.pad_id          # exercise the pad mask in the traced graph
        prefix = torch.randint(3, self.vocab_size, (batch_size, tgt_len), device=device)
        prefix[:, 0] = self.bos_id
        memory = torch.randn(batch_size, src_len, self.d_model, device=device)
        enc = ExportSpec(module=_Encoder(self), example_inputs=(src,), input_names=["src"],
                         output_names=["memory"],
                         dynamic_axes={"src": {0: "batch", 1: "src_len"}, "memory": {0: "batch", 1: "src_len"}})
        dec = ExportSpec(module=_DecoderStep(self), example_inputs=(memory, src, prefix),
                         input_names=["memory", "src", "tgt_prefix"], output_names=["logits"],
                         dynamic_axes={"memory": {0: "batch", 1: "src_len"}, "src": {0: "batch", 1: "src_len"},
                                       "tgt_prefix": {0: "batch", 1: "tgt_len"}, "logits": {0: "batch"}})
        return {"encoder": enc, "decoder_step": dec}


class _Encoder(nn.Module):
    """src (B, S) -> memory (B, S, D), for torch.onnx.export."""

    def __init__(self, model):
        super(_Encoder, self).__init__()
        self.model = model
        self.training = model.training      # see micro_gpt._DecodeStep: export restores this mode

    def forward(self, src):
        return self.model.encode(src)[0]


class _DecoderStep(nn.Module):
    """(memory (B, S, D), src (B, S), tgt_prefix (B, T)) -> logits (B, V) of the last position."""

    def __init__(self, model):
        super(_DecoderStep, self).__init__()
        self.model = model
        self.training = model.training      # see micro_gpt._DecodeStep: export restores this mode

    def forward(self, memory, src, tgt_prefix):
        logits = self.model.decode(memory, padding_bias(src, self.model.pad_id), tgt_prefix)   # (B, T, V)
        return logits[:, -1]
