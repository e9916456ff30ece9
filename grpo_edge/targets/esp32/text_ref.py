"""NumPy integer reference of the ESP32 text path: every kernel, the decode step, prefill, greedy loop.

The generated C (csrc/gx_text_kernels.h + textgen_c.py) computes exactly this, bit for bit. Batched
over prompts (first axis) because arithmetic prompts are all left-padded to one length and decode in
lockstep; the C runs one prompt at a time.

Rules (TFLite's where TFLite has one):
- FULLY_CONNECTED 16x8: int16 x int8 -> int32 acc + int32 bias, per-channel double-rounding
  MultiplyByQuantizedMultiplier, clamp (TFLM fully_connected, int16 activations).
- Attention scores q.k (int16 x int16) accumulate in int64 and are requantized with TFLite's
  int64-input MultiplyByQuantizedMultiplier (multiplier reduced to 16 bits, one rounding shift), the
  rule of its 16x8 kernels with int64 accumulators.
- SOFTMAX int16 (TFLite SoftmaxInt16): diff to the row max, rescaled by s_in / (10 / 65535), read from
  a 513-entry exp table over [-10, 0]; the sum's reciprocal from a 1/(1+x) table; output Q0.15.
- GELU int16: TFLite's GELU has int8/uint8 tables only; we use its int16 table form (gen_lut, 513
  entries, linear interpolation between entries), the way TFLite builds int16 exp / 1/(1+x).
- ADD of two int16 tensors at the same scale: an exact saturating sum (TFLite's int16 ADD with equal
  scales: all its multipliers are powers of two, the sum is exact).
- LAYER NORM: TFLite has no integer layer norm; ours (docs/esp32.md):
    m = round(sum(x) / D) (ties away from zero); d = x - m; var = floor(sum(d^2) / D) + eps_q (>= 1)
    s = isqrt(var * 2^16) (std in Q8); inv = round(2^38 / s); n = (d * inv + 2^17) >> 18 (Q12)
    out = clamp16(MBQM(n, gamma / (s_out * 4096)) + round(beta / s_out))
- ARG_MAX: first index of the maximum int16 logit.
"""
import numpy as np

from .fixedpoint import FNV_OFFSET, check_int32, clamp16, fnv1a, i64, isqrt64, mbqm
from .textir import EOS, PAD



# ----------------------------------------------------------------------------- kernels

def fc16(x, p):
    """x (B, IN) int16 -> (B, OUT) int16 with the params of textir.fc_params."""
    acc = check_int32(i64(x) @ i64(p["w"]).T + i64(p["b"]), "fully connected accumulator")
    out = mbqm(acc, i64(p["m"]).reshape(1, -1), i64(p["s"]).reshape(1, -1))
    return clamp16(out, p["lo"], p["hi"])


def mbqm64(x, m, shift):
    """TFLite MultiplyByQuantizedMultiplier(int64 x, int32 multiplier, int shift)."""
    m, shift = int(m), int(shift)
    reduced = ((m + (1 << 15)) >> 16) if m < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    return (i64(x) * reduced + (1 << (total - 1))) >> total


def lut16(v, lut):
    """TFLite's int16 table lookup with linear interpolation (C int16 wrap-around emulated)."""
    v = i64(v)
    idx = 256 + (v >> 7)
    off = v & 0x7F
    base = lut[idx].astype(np.int64)
    slope = _wrap16(lut[idx + 1].astype(np.int64) - base)
    delta = _wrap16((slope * off + 64) >> 7)
    return _wrap16(base + delta).astype(np.int16)


def _wrap16(x):
    return ((i64(x) + 32768) & 0xFFFF) - 32768


def clz32(x):
    x = i64(x)
    return np.array([32 - int(v).bit_length() for v in x.reshape(-1)], np.int64).reshape(x.shape)


def softmax16(x, m, s, exp_lut, recip_lut):
    """x (..., n) int16 -> Q0.15 int16 probabilities (TFLite SoftmaxInt16)."""
    x = i64(x)
    diff = x - x.max(-1, keepdims=True)
    scaled = mbqm(diff, m, s)
    e = lut16(np.clip(scaled + 32767, -32768, 32767), exp_lut).astype(np.int64)
    total = e.sum(-1, keepdims=True)
    hp1 = clz32(total)
    shifted = ((total << (hp1 - 1)) + (1 << 13)) >> 14
    recip = lut16(np.clip(shifted - ((1 << 15) + (1 << 16)), -32768, 32767), recip_lut).astype(np.int64)
    rs = 31 - hp1
    out = (e * recip + (np.int64(1) << (rs - 1))) >> rs
    return np.clip(out, 0, 32767).astype(np.int16)


def div_round_away(a, n):
    """round(a / n) with ties away from zero, n > 0 (C: (a + n/2) / n on |a|, sign restored)."""
    a = i64(a)
    q = (np.abs(a) + n // 2) // n
    return np.where(a < 0, -q, q)


def layernorm16(x, p):
    """x (B, D) int16 -> (B, D) int16 (our integer layer norm, see the module docstring)."""
    x = i64(x)
    D = x.shape[-1]
    m = div_round_away(x.sum(-1, keepdims=True), D)
    d = x - m
    var = (d * d).sum(-1, keepdims=True) // D + int(p["eps"])
    var = np.maximum(var, 1)
    s = isqrt64(var << 16)
    inv = ((np.int64(1) << 38) + (s >> 1)) // s
    n = (d * inv + (1 << 17)) >> 18
    out = mbqm(n, i64(p["m"]).reshape(1, -1), i64(p["s"]).reshape(1, -1)) + i64(p["b"]).reshape(1, -1)
    return clamp16(out)


def add16(a, b):
    return clamp16(i64(a) + i64(b))


def attention16(q, kc, vc, n, att, H, hd, tables, mask=None):
    """q (B, D) int16, kc/vc (B, H, T, hd) int16 -> (B, D) int16. mask (B, n) bool: keys to leave out
    (source pads); masked keys get the int16 minimum score before the softmax."""
    B = q.shape[0]
    qh = i64(q).reshape(B, H, 1, hd)
    acc = (qh @ i64(kc[:, :, :n]).transpose(0, 1, 3, 2))[:, :, 0]            # (B, H, n) int64
    sc = np.clip(mbqm64(acc, att["sc_m"], att["sc_s"]), -32768, 32767)
    if mask is not None:
        sc = np.where(mask[:, None, :n], -32768, sc)
    p = softmax16(sc, att["sm_m"], att["sm_s"], tables["exp_lut"], tables["recip_lut"]).astype(np.int64)
    y = (p[:, :, None, :] @ i64(vc[:, :, :n]))[:, :, 0]                      # (B, H, hd), |y| < 2^30
    return clamp16(mbqm(y, att["y_m"], att["y_s"])).reshape(B, H * hd)


def argmax16(x):
    return np.asarray(x).argmax(-1)


# ----------------------------------------------------------------------------- micro-gpt step

def new_cache(q, B):
    c = q["cfg"]
    shape = (c["n_layer"], B, c["n_head"], c["ctx"], c["hd"])
    return {"k": np.zeros(shape, np.int16), "v": np.zeros(shape, np.int16)}


def step(q, cache, tok, pos, logits=True):
    """One integer decode step: tok (B,) at position pos -> logits (B, V) int16 (None when not needed)."""
    c, p, K = q["cfg"], q["p"], q["const"]
    H, hd = c["n_head"], c["hd"]
    x = add16(K["tok16"][tok], K["pos16"][pos][None])
    B = x.shape[0]
    for i, L in enumerate(p["layers"]):
        h = layernorm16(x, L["ln1"])
        qv, k, v = fc16(h, L["q"]), fc16(h, L["k"]), fc16(h, L["v"])
        cache["k"][i, :, :, pos] = k.reshape(B, H, hd)
        cache["v"][i, :, :, pos] = v.reshape(B, H, hd)
        y = attention16(qv, cache["k"][i], cache["v"][i], pos + 1, L["att"], H, hd, K)
        x = add16(x, fc16(y, L["proj"]))
        f = fc16(layernorm16(x, L["ln2"]), L["fc"])
        g = lut16(f, L["gelu"]) if c["act"] == "gelu" else f
        x = add16(x, fc16(g, L["out"]))
    if not logits:
        return None
    return fc16(layernorm16(x, p["lnf"]), p["head"])


def generate(q, ids):
    """Greedy decode ids (B, input_len) -> (tokens (B, max_new) with PAD after EOS, logits list per step
    (B, V) int16). Prefill runs the prompt one token at a time through the same step."""
    B, T = ids.shape
    cache = new_cache(q, B)
    lo = None
    for t in range(T):
        lo = step(q, cache, ids[:, t], t, logits=t == T - 1)
    out, los, done = [], [], np.zeros(B, bool)
    n_new = q["cfg"]["max_new_tokens"]
    for s in range(n_new):
        los.append(lo)
        tok = np.where(done, PAD, argmax16(lo))
        out.append(tok)
        done |= tok == EOS
        if done.all() or s == n_new - 1:
            break
        lo = step(q, cache, tok, T + s)
    return np.stack(out, 1), los


def run_prompts(q, prompts, batch=256, gen=None):
    """For each prompt: {"ids": generated token ids up to and with EOS, "answer": text, "hash": FNV-1a of
    every decision step's int16 logits (little endian), as the C harness prints}. gen: the model kind's
    integer generator (default the decoder-only one; both kinds: text_model.run_prompts)."""
    from .textir import decode_ids, encode_prompts
    gen = gen or generate
    res = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        toks, los = gen(q, encode_prompts(q["cfg"], chunk))
        for r in range(len(chunk)):
            ids, h = [], FNV_OFFSET
            for s in range(toks.shape[1]):
                h = fnv1a(los[s][r].astype("<i2").tobytes(), h)
                ids.append(int(toks[r, s]))
                if toks[r, s] == EOS:
                    break
            res.append({"ids": ids, "answer": decode_ids(q["cfg"], ids), "hash": h})
    return res


def softmax_fp(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

