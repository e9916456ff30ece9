"""Building blocks shared by the transformer models (Python 3.6 / torch 1.10 safe).

Attention is written out by hand (matmul + softmax) instead of nn.MultiheadAttention: it exports to
plain ONNX MatMul/Softmax on every opset, works on torch 1.10 (Jetson Nano), takes an explicit KV cache,
and lets attn_dropout apply in one obvious place. In eager training and sampling on torch >= 2 the same
attention runs as one F.scaled_dot_product_attention call (fewer ops, same result to ~1e-6); export and
torch 1.10 take the written-out path.
"""
import inspect
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import checkpoint as _ckpt

from grpo_edge.core import devices

# Additive mask value. Finite (not -inf) so that a row whose keys are all masked (an all-pad source)
# gives a uniform softmax instead of NaN, and small enough to stay finite in fp16 (TensorRT on Jetson).
MASK_VALUE = -1e4

# torch >= 1.11 takes use_reentrant (and newer versions warn or fail without it); 1.10 rejects it.
_CKPT_KWARGS = {"use_reentrant": False} if "use_reentrant" in inspect.signature(_ckpt.checkpoint).parameters else {}


def run_checkpointed(fn, *args):
    """fn(*args) with activations recomputed in backward; RNG state is replayed, so dropout masks match."""
    return _ckpt.checkpoint(fn, *args, **_CKPT_KWARGS)


_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
_DOUBLE_BACKWARD = [0]       # depth of double_backward() contexts


class double_backward(object):
    """Within this context attention takes the written-out MatMul / Softmax path, which autograd can
    differentiate twice: the fused kernels (flash attention on the CPU, efficient / flash on CUDA) have no
    derivative of their backward. The gradient penalty (grpo.grad_penalty_lambda) needs it."""

    def __init__(self, on=True):
        self.on = bool(on)

    def __enter__(self):
        _DOUBLE_BACKWARD[0] += self.on
        return self

    def __exit__(self, *exc):
        _DOUBLE_BACKWARD[0] -= self.on
        return False


def _fused_attention_ok():
    """F.scaled_dot_product_attention where it exists (torch >= 2), the model is not being traced for
    export (exported graphs keep the plain MatMul / Softmax ops that every runtime here takes) and no
    second derivative is needed (double_backward)."""
    if not _HAS_SDPA or _DOUBLE_BACKWARD[0] or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
        return False
    compiler = getattr(torch, "compiler", None)
    return not (compiler is not None and hasattr(compiler, "is_exporting") and compiler.is_exporting())


def split_heads(x, n_head):
    """(B, T, D) -> (B, H, T, D/H)."""
    b, t, d = x.shape
    return x.view(b, t, n_head, d // n_head).transpose(1, 2)


def merge_heads(x):
    """(B, H, T, hd) -> (B, T, H*hd)."""
    b, h, t, hd = x.shape
    return x.transpose(1, 2).contiguous().view(b, t, h * hd)


def rope_tables(max_len, head_dim, base=10000.0):
    """Rotary position tables (cos, sin), each (max_len, head_dim): position t turns each pair of a head's
    channels (i, i + head_dim/2) by t * base^(-2i/head_dim), so that a query-key product depends on the keys'
    distance, not on where the pair sits (RoFormer's rotary embedding, in the rotate-half layout)."""
    if head_dim % 2:
        raise ValueError("rotary positions need an even head size, got %d" % head_dim)
    if getattr(torch.empty(0), "is_meta", False):                # sizes.py counts a model on the meta device
        return torch.empty(max_len, head_dim), torch.empty(max_len, head_dim)
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)   # (hd/2,)
    angle = torch.arange(max_len, dtype=torch.float32)[:, None] * inv[None]       # (L, hd/2)
    angle = torch.cat([angle, angle], dim=1)                                      # (L, hd)
    return angle.cos(), angle.sin()


def apply_rope(x, cos, sin):
    """x (..., T, hd) turned by its positions' angles: cos, sin broadcastable to x ((T, hd) or (B, 1, T, hd))."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Attention(nn.Module):
    """Multi-head attention with optional cross-source, additive mask and KV cache.

    forward(x, source=None, bias=None, past_k=None, past_v=None):
      x       (B, Tq, D) queries (and keys/values when source is None: self-attention)
      source  (B, Tk, D) keys/values for cross-attention
      bias    additive mask broadcastable to (B, H, Tq, Tk_total), MASK_VALUE where not allowed
      past_k, past_v (B, H, T_past, hd) cached keys/values, prepended to the new ones
      rope    (cos, sin) of the new tokens' positions (rope_tables rows): queries and new keys are turned
              (self-attention; cached keys were turned when they were new)
    returns (y (B, Tq, D), k (B, H, Tk_total, hd), v (B, H, Tk_total, hd)) so callers can cache k, v.
    """

    def __init__(self, d_model, n_head, attn_dropout=0.0, hidden_dropout=0.0):
        super(Attention, self).__init__()
        if d_model % n_head != 0:
            raise ValueError("d_model=%d is not divisible by n_head=%d" % (d_model, n_head))
        self.n_head = n_head
        self.scale = 1.0 / math.sqrt(d_model // n_head)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(attn_dropout)
        self.resid_drop = nn.Dropout(hidden_dropout)

    def forward(self, x, source=None, bias=None, past_k=None, past_v=None, rope=None):
        src = x if source is None else source
        q = split_heads(self.q(x), self.n_head)              # (B, H, Tq, hd)
        k = split_heads(self.k(src), self.n_head)            # (B, H, Tk, hd)
        v = split_heads(self.v(src), self.n_head)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if past_k is not None:
            k = torch.cat([past_k, k], dim=2)                # (B, H, T_past + Tk, hd)
            v = torch.cat([past_v, v], dim=2)
        if _fused_attention_ok() and not (self.training and self.attn_drop.p > 0):
            # torch >= 2, eager (not exporting): one fused op with the same scale and additive mask
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            att = torch.matmul(q, k.transpose(-2, -1)) * self.scale   # (B, H, Tq, Tk_total)
            if bias is not None:
                att = att + bias
            att = F.softmax(att, dim=-1)
            if self.attn_drop.p > 0:                         # p = 0: skip the module call (per-op overhead)
                att = self.attn_drop(att)
            y = torch.matmul(att, v)
        y = self.proj(merge_heads(y))                        # (B, Tq, D)
        return (self.resid_drop(y) if self.resid_drop.p > 0 else y), k, v


class FeedForward(nn.Module):
    """Linear -> activation -> Linear -> dropout, (B, T, D) -> (B, T, D)."""

    def __init__(self, d_model, d_hidden, activation="gelu", hidden_dropout=0.0):
        super(FeedForward, self).__init__()
        if activation not in ("gelu", "relu"):
            raise ValueError("activation must be 'gelu' or 'relu', got %r" % (activation,))
        self.fc = nn.Linear(d_model, d_hidden)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.out = nn.Linear(d_hidden, d_model)
        self.drop = nn.Dropout(hidden_dropout)

    def forward(self, x):
        y = self.out(self.act(self.fc(x)))
        return self.drop(y) if self.drop.p > 0 else y


def causal_bias(max_len):
    """(1, 1, max_len, max_len) additive mask: 0 on and below the diagonal, MASK_VALUE above. Built on the
    meta device (grpo_edge/sizes.py counts a model there), the shape alone: tril, ~ and masked_fill run
    Python reference kernels there, whose first call imports torch._dynamo (see sizes.model_bytes)."""
    if getattr(torch.empty(0), "is_meta", False):
        return torch.empty(1, 1, max_len, max_len)
    allowed = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
    bias = torch.zeros(max_len, max_len).masked_fill(~allowed, MASK_VALUE)
    return bias.view(1, 1, max_len, max_len)


def padding_bias(tokens, pad_id):
    """(B, S) ids -> (B, 1, 1, S) additive mask hiding pad keys."""
    return (tokens == pad_id).to(torch.float32).unsqueeze(1).unsqueeze(2) * MASK_VALUE


def logprobs_and_entropy(logits, tokens, temperature=1.0):
    """logits (B, T, V), tokens (B, T) -> (logp (B, T), entropy (B, T)) of softmax(logits / temperature)."""
    logp_all = F.log_softmax(logits / temperature, dim=-1)                # (B, T, V)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)          # (B, T)
    entropy = -(logp_all.exp() * logp_all).sum(-1)                        # (B, T)
    return logp, entropy


def sample_next(logits, temperature, greedy, generator):
    """logits (B, V) -> (token (B,) long, logp (B,) of that token under softmax(logits / temperature))."""
    logp_all = F.log_softmax(logits / temperature, dim=-1)                # (B, V)
    if greedy:
        tok = logp_all.argmax(-1)
    else:
        tok = devices.multinomial(logp_all.exp(), generator)            # on the logits' device
    return tok, logp_all.gather(-1, tok.unsqueeze(-1)).squeeze(-1)


def shared_rows(x):
    """(distinct rows (P, ...), row_index (B,) long) of x (B, ...) when at most half of its B rows are
    distinct (a GRPO batch: G rows per prompt or source), else None: from there, running each distinct
    row once and copying its result pays for the copy. None while tracing for export (no data-dependent
    shapes in exported graphs)."""
    b = x.shape[0]
    if b < 2 or x.numel() == 0 or not _fused_attention_ok():
        return None
    rows, index = torch.unique(x, dim=0, return_inverse=True)
    return (rows, index) if 2 * rows.shape[0] <= b else None


class CompletionBuffer(object):
    """Collects sampled tokens and applies the EOS / mask contract shared by the generation models.

    A row's EOS token keeps mask 1; every later position becomes pad_id with logp 0 and mask 0.
    """

    def __init__(self, batch_size, eos_id, pad_id, device):
        self.eos_id, self.pad_id = eos_id, pad_id
        self.finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
        self.tokens, self.logps, self.masks = [], [], []

    def add(self, tok, logp):
        """tok, logp (B,): record one step; returns tok with finished rows replaced by pad_id."""
        done = self.finished
        tok = tok.masked_fill(done, self.pad_id)
        self.tokens.append(tok)
        self.logps.append(logp.masked_fill(done, 0.0))
        self.masks.append((~done).to(torch.float32))
        self.finished = done | (tok == self.eos_id)
        return tok

    def all_done(self):
        return bool(self.finished.all())

    def result(self):
        """(tokens (B, Tn) long, logp (B, Tn) float, mask (B, Tn) float)."""
        return torch.stack(self.tokens, 1), torch.stack(self.logps, 1), torch.stack(self.masks, 1)


def init_transformer_weights(module, n_residual_layers):
    """GPT-2 style init: N(0, 0.02) for Linear/Embedding, residual output projections scaled down
    by sqrt(2 * n_residual_layers) so the residual stream variance does not grow with depth."""
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear):
            std = 0.02
            if name.endswith(".proj") or name.endswith(".out"):
                std = 0.02 / math.sqrt(2 * n_residual_layers)
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)
