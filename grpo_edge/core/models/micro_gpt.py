"""MicroGPT: a small decoder-only, pre-LN GPT with a KV cache (Python 3.6 / torch 1.10 safe).

Shapes: idx (B, T) long -> logits (B, T, V). Defaults (d_model 232, 6 layers, 8 heads, max_len 128)
give about 3.9M parameters with a ~20-token character vocabulary.

Prompts are left-padded with pad_id by the tasks and the pad tokens are attended like any other
token (no attention mask besides causality): generation and teacher forcing then see exactly the same
inputs, which keeps `generate` logp == `sequence_logprobs` logp without extra bookkeeping.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ._layers import (Attention, CompletionBuffer, FeedForward, _fused_attention_ok, apply_rope, causal_bias,
                      init_transformer_weights, logprobs_and_entropy, merge_heads, rope_tables, run_checkpointed,
                      sample_next, shared_rows, split_heads)
from .spec import ExportSpec


class GPTBlock(nn.Module):
    """Pre-LN block: x + attn(ln(x)), then x + mlp(ln(x)). (B, T, D) -> (B, T, D) plus new k, v."""

    def __init__(self, d_model, n_head, hidden_dropout, attn_dropout):
        super(GPTBlock, self).__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head, attn_dropout, hidden_dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model, 4 * d_model, "gelu", hidden_dropout)

    def forward(self, x, bias=None, past_k=None, past_v=None, rope=None):
        a, k, v = self.attn(self.ln1(x), bias=bias, past_k=past_k, past_v=past_v, rope=rope)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x, k, v


class MicroGPT(nn.Module):
    """Decoder-only GPT policy for text tasks.

    forward(idx (B, T) long) -> logits (B, T, out_dim or vocab_size)
    The output head is tied to the token embedding when out_dim is None (a language-model policy);
    with out_dim set (e.g. 1 for a value head) it is a separate Linear(d_model, out_dim).
    positions: "learned" (a learned embedding per absolute position, added to the token's) or "rope" (rotary:
    queries and keys turned by their position, so attention sees distances; what copying text needs, pyfix).
    """
    POSITIONS = ("learned", "rope")

    arch = "micro-gpt"

    def __init__(self, vocab_size, d_model=232, n_layer=6, n_head=8, max_len=128, hidden_dropout=0.0,
                 attn_dropout=0.0, out_dim=None, positions="learned"):
        super(MicroGPT, self).__init__()
        if positions not in self.POSITIONS:
            raise ValueError("positions must be one of %s, got %r" % (", ".join(self.POSITIONS), positions))
        self.positions = positions
        self.vocab_size, self.d_model, self.n_layer, self.n_head = vocab_size, d_model, n_layer, n_head
        self.max_len, self.out_dim = max_len, out_dim
        self.hidden_dropout, self.attn_dropout = hidden_dropout, attn_dropout
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        if positions == "learned":
            self.pos_emb = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(hidden_dropout)
        self.blocks = nn.ModuleList([GPTBlock(d_model, n_head, hidden_dropout, attn_dropout)
                                     for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size if out_dim is None else out_dim, bias=False)
        init_transformer_weights(self, n_layer)
        if out_dim is None:
            self.head.weight = self.tok_emb.weight      # tied input/output embedding
        # Not persistent: derived from max_len, so it stays out of the state dict.
        self.register_buffer("causal", causal_bias(max_len), persistent=False)   # (1, 1, L, L)
        if positions == "rope":
            cos, sin = rope_tables(max_len, d_model // n_head)
            self.register_buffer("rope_cos", cos, persistent=False)                # (L, hd)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.checkpoint_interval = 0

    def config(self):
        """Constructor kwargs as plain Python values: build_model(self.arch, **self.config()) rebuilds it."""
        return {"vocab_size": int(self.vocab_size), "d_model": int(self.d_model), "n_layer": int(self.n_layer),
                "n_head": int(self.n_head), "max_len": int(self.max_len),
                "hidden_dropout": float(self.hidden_dropout), "attn_dropout": float(self.attn_dropout),
                "out_dim": None if self.out_dim is None else int(self.out_dim), "positions": self.positions}

    supports_gradient_checkpointing = True

    def set_gradient_checkpointing(self, interval=2):
        """Recompute every `interval`-th block's activations in backward (0 = off). Gradients are unchanged."""
        if interval < 0:
            raise ValueError("checkpoint interval must be >= 0, got %d" % interval)
        self.checkpoint_interval = int(interval)

    def _check_len(self, t):
        if t > self.max_len:
            raise ValueError("sequence of %d tokens is longer than max_len=%d" % (t, self.max_len))

    def _embed(self, idx, start):
        """Token (+ learned position) embeddings of idx (B, T) at positions start .. start + T - 1."""
        x = self.tok_emb(idx)
        return x if self.positions == "rope" else x + self.pos_emb.weight[start:start + idx.shape[1]]

    def _rope(self, start, t):
        """The rotary tables' rows start .. start + t - 1, or None (learned positions)."""
        return None if self.positions != "rope" else (self.rope_cos[start:start + t], self.rope_sin[start:start + t])

    def forward(self, idx):
        """idx (B, T) long -> logits (B, T, out_dim or vocab_size); causal, no padding mask."""
        t = idx.shape[1]
        self._check_len(t)
        x = self.drop(self._embed(idx, 0))                               # (B, T, D)
        bias = self.causal[:, :, :t, :t]                                 # (1, 1, T, T)
        rope = self._rope(0, t)
        use_ckpt = self.checkpoint_interval > 0 and self.training and torch.is_grad_enabled()
        for i, block in enumerate(self.blocks):
            if use_ckpt and i % self.checkpoint_interval == 0:
                x = run_checkpointed(lambda h, b, blk=block: blk(h, bias=b, rope=rope)[0], x, bias)
            else:
                x = block(x, bias=bias, rope=rope)[0]
        return self.head(self.ln_f(x))                                   # (B, T, V)

    def empty_cache(self, batch_size, device=None):
        """Zero-length KV cache: two (n_layer, B, H, 0, head_dim) tensors."""
        shape = (self.n_layer, batch_size, self.n_head, 0, self.d_model // self.n_head)
        z = torch.zeros(shape, device=device if device is not None else self.tok_emb.weight.device)
        return z, z.clone()

    def forward_step(self, idx, past_keys, past_values, position=None):
        """Run new tokens on top of a KV cache.

        idx                      (B, Tn) long, the new tokens (Tn = 1 when decoding, the prompt when prefilling)
        past_keys, past_values   (n_layer, B, H, T_past, head_dim)
        position                 (B, Tn) long absolute positions; default T_past + arange(Tn)
        returns (logits (B, Tn, V), present_keys, present_values (n_layer, B, H, T_past + Tn, head_dim))
        """
        t_past, t_new = past_keys.shape[3], idx.shape[1]
        if position is None:
            position = torch.arange(t_past, t_past + t_new, device=idx.device).unsqueeze(0).expand_as(idx)
        if self.positions == "rope":
            x = self.drop(self.tok_emb(idx))                             # (B, Tn, D)
            rope = (self.rope_cos[position].unsqueeze(1), self.rope_sin[position].unsqueeze(1))   # (B, 1, Tn, hd)
        else:
            x, rope = self.drop(self.tok_emb(idx) + self.pos_emb(position)), None
        # One new token may attend to the whole cache, so no mask is needed (and the exported
        # decode step has none); several new tokens need the causal rows of their positions.
        bias = None if t_new == 1 else self.causal[:, :, t_past:t_past + t_new, :t_past + t_new]
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, bias=bias, past_k=past_keys[i], past_v=past_values[i], rope=rope)
            keys.append(k)                                               # (B, H, T_past + Tn, hd)
            values.append(v)
        logits = self.head(self.ln_f(x))                                 # (B, Tn, V)
        return logits, torch.stack(keys, 0), torch.stack(values, 0)

    def generate(self, prompt, max_new_tokens, temperature=1.0, greedy=False, generator=None, eos_id=2,
                 pad_id=0):
        """Sample completions with the KV cache (no grad; dropout follows the module's train/eval mode).

        prompt (B, Tp) long, left-padded with pad_id.
        Returns tokens (B, Tn) long, logp (B, Tn) float (log-softmax(logits / temperature) of the chosen
        token, also when greedy), mask (B, Tn) float; Tn <= max_new_tokens, shorter when every row hit
        EOS. A row's EOS has mask 1; after it come pad_id tokens with logp 0 and mask 0.
        """
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if not temperature > 0:
            raise ValueError("temperature must be > 0, got %r (use greedy=True for argmax decoding)" % (temperature,))
        # The last sampled token is never fed back, so the model sees Tp + max_new_tokens - 1 positions.
        self._check_len(prompt.shape[1] + max_new_tokens - 1)
        b, tp = prompt.shape
        with torch.no_grad():
            dropout = self.training and (self.hidden_dropout > 0 or self.attn_dropout > 0)
            shared = None if dropout else shared_rows(prompt)
            if shared is None:
                pk, pv = self.empty_cache(b, prompt.device)
                logits, pk, pv = self.forward_step(prompt, pk, pv)        # prefill, (B, Tp, V)
            else:                                                         # prefill each distinct prompt once
                prompts, row_prompt = shared
                pk, pv = self.empty_cache(prompts.shape[0], prompt.device)
                logits, pk, pv = self.forward_step(prompts, pk, pv)
                logits, pk, pv = logits[row_prompt], pk[:, row_prompt], pv[:, row_prompt]
            # One preallocated cache, written in place: concatenating per token would copy the whole
            # cache every step (O(T^2) memory traffic; measured 2-3x slower at 64 tokens, see docs/results.md).
            keys = pk.new_zeros(pk.shape[:3] + (tp + max_new_tokens, pk.shape[4]))   # (L, B, H, T_max, hd)
            values = torch.zeros_like(keys)
            keys[:, :, :, :tp] = pk
            values[:, :, :, :tp] = pv
            out = CompletionBuffer(b, eos_id, pad_id, prompt.device)
            qkv_w = self._decode_weights()
            for step in range(max_new_tokens):
                tok, logp = sample_next(logits[:, -1], temperature, greedy, generator)
                tok = out.add(tok, logp)
                if out.all_done() or step == max_new_tokens - 1:
                    break
                logits = self._decode_one(tok.unsqueeze(1), keys, values, tp + step, qkv_w)   # (B, 1, V)
            return out.result()

    def _decode_weights(self):
        """Per block, the q / k / v projections stacked into one (3D, D) weight and (3D,) bias: a decode
        step then makes one projection call instead of three (taken once per generate call)."""
        return [(torch.cat([blk.attn.q.weight, blk.attn.k.weight, blk.attn.v.weight]),
                 torch.cat([blk.attn.q.bias, blk.attn.k.bias, blk.attn.v.bias])) for blk in self.blocks]

    def _decode_one(self, idx, keys, values, t, qkv_weights):
        """One new token at position t on top of the in-place cache: idx (B, 1) -> logits (B, 1, V).

        keys, values (n_layer, B, H, T_max, hd) hold positions < t and get position t written;
        qkv_weights from _decode_weights(). The same arithmetic as GPTBlock / Attention.forward (which a
        cache passed by value needs for export).
        """
        # Functional calls on the modules' own weights: the same ops as the modules, without the
        # per-call module overhead that dominates one token of a small model (dropout is off: eval mode).
        lin, ln = F.linear, F.layer_norm
        b, d, h = idx.shape[0], self.d_model, self.n_head
        fused = _fused_attention_ok() and not (self.training and self.attn_dropout > 0)
        x = F.embedding(idx, self.tok_emb.weight)                          # (B, 1, D)
        x = x if self.positions == "rope" else x + self.pos_emb.weight[t]
        x = self.drop(x) if self.training else x
        for i, block in enumerate(self.blocks):
            attn, mlp = block.attn, block.mlp
            hid = ln(x, block.ln1.normalized_shape, block.ln1.weight, block.ln1.bias, block.ln1.eps)
            qkv = lin(hid, *qkv_weights[i]).view(b, 3, h, 1, d // h)           # (B, 3, H, 1, hd)
            if self.positions == "rope":
                qk = apply_rope(qkv[:, :2], self.rope_cos[t], self.rope_sin[t])
                qkv = torch.cat([qk, qkv[:, 2:]], dim=1)
            keys[i, :, :, t:t + 1] = qkv[:, 1]
            values[i, :, :, t:t + 1] = qkv[:, 2]
            k, v = keys[i, :, :, :t + 1], values[i, :, :, :t + 1]               # (B, H, t + 1, hd)
            if fused:
                y = F.scaled_dot_product_attention(qkv[:, 0], k, v)             # (B, H, 1, hd)
            else:
                att = torch.softmax(torch.matmul(qkv[:, 0], k.transpose(-2, -1)) * attn.scale, dim=-1)
                y = torch.matmul(attn.attn_drop(att) if self.training else att, v)
            y = lin(y.reshape(b, 1, d), attn.proj.weight, attn.proj.bias)      # (B, 1, D)
            x = x + (attn.resid_drop(y) if self.training else y)
            hid = ln(x, block.ln2.normalized_shape, block.ln2.weight, block.ln2.bias, block.ln2.eps)
            x = x + mlp(hid)
        x = ln(x, self.ln_f.normalized_shape, self.ln_f.weight, self.ln_f.bias, self.ln_f.eps)
        return lin(x, self.head.weight, self.head.bias)

    def _packed_ok(self):
        """The shared-prompt pass takes eager fused attention, no active dropout (rows sharing a prompt
        would share its dropout masks) and no gradient checkpointing; anything else takes forward() on
        the concatenation."""
        if not _fused_attention_ok():
            return False
        return not (self.training and (self.checkpoint_interval > 0 or self.attn_dropout > 0
                                       or self.hidden_dropout > 0))

    def sequence_logprobs(self, prompt, tokens, temperature=1.0):
        """Teacher-forced (logp (B, Tn), entropy (B, Tn)) of `tokens` (B, Tn) after `prompt` (B, Tp), with grad.

        Same numbers as `generate` returns for the tokens it sampled (positions after EOS are
        meaningless and must be masked by the caller).
        """
        tp = prompt.shape[1]
        shared = shared_rows(prompt)
        if shared is not None and self._packed_ok():
            logits = self._forward_shared_prompt(shared[0], shared[1], tokens[:, :-1])   # (B, Tn, V)
        else:
            idx = torch.cat([prompt, tokens[:, :-1]], dim=1)             # (B, Tp + Tn - 1)
            logits = self.forward(idx)[:, tp - 1:]                       # (B, Tn, V), position i predicts i+1
        return logprobs_and_entropy(logits, tokens, temperature)

    def _forward_shared_prompt(self, prompts, row_prompt, cont):
        """Teacher forcing when rows share prompts (a GRPO group's G completions of one prompt), the idea
        of shared-prefix GRPO: each distinct prompt runs once and only the completions run per row.

        The per-token work (layer norms, projections, MLP) runs on one packed (P*Tp + B*Tc, D) matrix of
        every distinct prompt token and every completion token: as many calls as forward(), on fewer
        tokens. Attention runs twice per layer: the prompts causally among themselves, then each
        completion over its prompt's keys / values (copied to its row) and its own earlier tokens: the
        same causal attention as forward() on the concatenation, so the same logits to float rounding.

        prompts (P, Tp) distinct prompts, row_prompt (B,) long: row b's prompt, cont (B, Tc) the
        completion tokens fed back (Tc may be 0). Returns logits (B, 1 + Tc, V): the prediction of the
        first completion token (from the prompt's last position), then one per fed-back token.
        """
        (n_p, tp), (b, tc) = prompts.shape, cont.shape
        self._check_len(tp + tc)
        np_tok, d, h = n_p * tp, self.d_model, self.n_head
        x = torch.cat([self._embed(prompts, 0).reshape(np_tok, d), self._embed(cont, tp).reshape(b * tc, d)])
        x = self.drop(x)                                                          # (P*Tp + B*Tc, D)
        bias_p, bias_c = self.causal[:, :, :tp, :tp], self.causal[:, :, tp:tp + tc, :tp + tc]
        for block in self.blocks:
            attn = block.attn
            hid = block.ln1(x)
            q, k, v = attn.q(hid), attn.k(hid), attn.v(hid)
            qp, kp, vp = [split_heads(t[:np_tok].view(n_p, tp, d), h) for t in (q, k, v)]    # (P, H, Tp, hd)
            if self.positions == "rope":
                qp, kp = apply_rope(qp, *self._rope(0, tp)), apply_rope(kp, *self._rope(0, tp))
            yp = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=bias_p)   # (P, H, Tp, hd)
            ys = [merge_heads(yp).reshape(np_tok, d)]
            if tc > 0:
                qc, kc, vc = [split_heads(t[np_tok:].view(b, tc, d), h) for t in (q, k, v)]
                if self.positions == "rope":
                    qc, kc = apply_rope(qc, *self._rope(tp, tc)), apply_rope(kc, *self._rope(tp, tc))
                kp, vp = kp[row_prompt], vp[row_prompt]
                yc = F.scaled_dot_product_attention(qc, torch.cat([kp, kc], 2), torch.cat([vp, vc], 2),
                                                    attn_mask=bias_c)             # (B, H, Tc, hd)
                ys.append(merge_heads(yc).reshape(b * tc, d))
            y = attn.proj(torch.cat(ys))
            x = x + (attn.resid_drop(y) if attn.resid_drop.p > 0 else y)
            x = x + block.mlp(block.ln2(x))
        last = x[:np_tok].view(n_p, tp, d)[:, -1:][row_prompt]                  # (B, 1, D)
        x = torch.cat([last, x[np_tok:].view(b, tc, d)], dim=1)                  # (B, 1 + Tc, D)
        return self.head(self.ln_f(x))

    def export_spec(self, batch_size=1, past_len=4):
        """The single-token decode step with the KV cache as explicit inputs and outputs.

        inputs:  idx (B, 1) long, past_keys / past_values (n_layer, B, H, T_past, head_dim) float,
                 position (B, 1) long (= T_past for every row)
        outputs: logits (B, 1, V), present_keys / present_values (n_layer, B, H, T_past + 1, head_dim)
        Batch and past length are dynamic. A runtime prefills by feeding the prompt one token at a
        time, starting from a zero-length cache.
        """
        hd = self.d_model // self.n_head
        device = self.tok_emb.weight.device
        cache_shape = (self.n_layer, batch_size, self.n_head, past_len, hd)
        inputs = (torch.randint(0, self.vocab_size, (batch_size, 1), device=device),
                  torch.randn(cache_shape, device=device), torch.randn(cache_shape, device=device),
                  torch.full((batch_size, 1), past_len, dtype=torch.long, device=device))
        past_axes = {1: "batch", 3: "past_len"}
        return ExportSpec(
            module=_DecodeStep(self), example_inputs=inputs,
            input_names=["idx", "past_keys", "past_values", "position"],
            output_names=["logits", "present_keys", "present_values"],
            dynamic_axes={"idx": {0: "batch"}, "position": {0: "batch"}, "logits": {0: "batch"},
                          "past_keys": past_axes, "past_values": past_axes,
                          "present_keys": {1: "batch", 3: "present_len"},
                          "present_values": {1: "batch", 3: "present_len"}})


class _DecodeStep(nn.Module):
    """Tensor-in/tensor-out wrapper around MicroGPT.forward_step for torch.onnx.export."""

    def __init__(self, model):
        super(_DecodeStep, self).__init__()
        self.model = model
        # Mirror the model's mode without propagating: torch.onnx.export switches the wrapper (and so the
        # model) to eval and afterwards restores the wrapper's mode, which must be the model's own.
        self.training = model.training

    def forward(self, idx, past_keys, past_values, position):
        return self.model.forward_step(idx, past_keys, past_values, position)
