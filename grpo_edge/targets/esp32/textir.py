"""Text checkpoint -> integer IR for the ESP32 text path (16x8: int16 activations, int8 weights).

    ir = checkpoint2textir("runs/arithmetic/best.pt")       # float weights + shapes + tokenizer tables
    q = text_model.textir2int(ir, calib_prompts)             # scales from greedy decoding, integer tensors

The IR of a micro-gpt (decoder-only, pre-LN, tied head) is one decoding step with a KV cache:

    x    = GATHER(tok16, id) + GATHER(pos16, pos)                  int16 at the residual scale s_x
    per layer l:
      h  = LAYERNORM(x)                      -> s_ln1[l]           (our integer layer norm, text_ref.py)
      q, k, v = FC16(h)                      -> s_q, s_k, s_v      (int8 per-channel weights, int32 bias)
      k, v written to the cache at pos (int16)
      per head: s = q . k[0..pos] (int64)   -> int16 at s_sc       (TFLite's int64-accumulator requantization)
               p = SOFTMAX16(s)              Q0.15                 (TFLite int16 softmax, exp / 1/(1+x) tables)
               y = sum p * v (int32)         -> int16 at s_y
      x  = x + FC16(y) (proj, output at s_x; an ADD with equal scales is an exact saturating sum)
      h  = LAYERNORM(x) -> s_ln2; f = FC16(h) -> s_f; g = GELU16 table -> s_g
      x  = x + FC16(g) (output at s_x)
    logits = FC16(LAYERNORM_f(x)) (tied token embedding, int8 per row) -> int16 at s_lo; ARGMAX

Scales are symmetric (zero point 0, as TFLite's 16x8 mode): max |value| seen while the fp32 NumPy model
of the same graph greedy-decodes calibration prompts, times a margin, over 32767. The tiny-transformer
(encoder-decoder) adds an encoder (same blocks, ReLU, source pad mask) and cross-attention; see
text_seq2seq_ref.py.
"""
from dataclasses import dataclass, field
import math

import numpy as np

from grpo_edge.errors import TargetError

PAD, BOS, EOS = 0, 1, 2
N_SPECIALS = 3
MARGIN = 1.25             # scale = MARGIN * max|v| / 32767: room for held-out prompts beyond the calibration set
Q16 = 32767.0
TEXT_ARCHS = ("micro-gpt", "tiny-transformer")


@dataclass
class TextIR:
    """A text checkpoint in float: config + named weight arrays (numpy float32)."""
    arch: str
    cfg: dict                      # d, n_layer, n_head, hd, ff, vocab, max_len, input_len, max_new_tokens, ctx,
                                   # chars, padding, act, eps, task
    w: dict = field(default_factory=dict)


def checkpoint2textir(checkpoint) -> TextIR:
    """A micro-gpt / tiny-transformer checkpoint (path or (model, state)) -> TextIR, or a one-line error."""
    if isinstance(checkpoint, tuple):
        model, state = checkpoint
    else:
        from grpo_edge.core.checkpoint import load_policy
        model, state = load_policy(checkpoint)
    arch = state.get("arch")
    if arch not in TEXT_ARCHS:
        raise TargetError("checkpoint arch %r is not a text model (the ESP32 text path takes %s)"
                          % (arch, " / ".join(TEXT_ARCHS)))
    meta, mc = state.get("task_meta") or {}, state.get("model_config") or {}
    tok = meta.get("tokenizer") or {}
    if tok.get("type") != "char":
        raise TargetError("checkpoint has no char tokenizer in task_meta: the ESP32 text path needs the character table")
    if mc.get("out_dim") is not None:
        raise TargetError("checkpoint model has out_dim=%r (a value head): only language-model heads deploy"
                          % mc.get("out_dim"))
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    chars = "".join(sorted(set(tok["chars"])))
    input_len, max_new = int(meta["input_shape"][0]), int(meta["max_new_tokens"])
    cfg = {"chars": chars, "vocab": len(chars) + N_SPECIALS, "input_len": input_len, "max_new_tokens": max_new,
           "max_len": int(mc["max_len"]), "padding": meta.get("padding", "left"), "task": state.get("task"),
           "eps": 1e-5}
    if arch == "micro-gpt" and mc.get("positions", "learned") != "learned":
        raise TargetError("the ESP32 text path runs learned positions only; this micro-gpt has positions=%s "
                          "(deploy it to rpi4 / rpi5 / a Jetson, or train with model.positions=learned)"
                          % mc.get("positions"))
    if arch == "micro-gpt":
        d, L, H = int(mc["d_model"]), int(mc["n_layer"]), int(mc["n_head"])
        cfg.update(d=d, n_layer=L, n_head=H, hd=d // H, ff=4 * d, act="gelu", ctx=input_len + max_new - 1)
        if cfg["ctx"] > cfg["max_len"]:
            raise TargetError("prompt length %d + %d new tokens exceeds the model's max_len %d"
                              % (input_len, max_new, cfg["max_len"]))
        w = {"tok": sd["tok_emb.weight"], "pos": sd["pos_emb.weight"], "lnf_g": sd["ln_f.weight"],
             "lnf_b": sd["ln_f.bias"], "head": sd["head.weight"]}
        for i in range(L):
            p = "blocks.%d." % i
            for a, b in (("ln1", "ln1"), ("ln2", "ln2")):
                w["%d.%s_g" % (i, a)], w["%d.%s_b" % (i, a)] = sd[p + b + ".weight"], sd[p + b + ".bias"]
            for a in ("q", "k", "v", "proj"):
                w["%d.%s_w" % (i, a)], w["%d.%s_b" % (i, a)] = sd[p + "attn.%s.weight" % a], sd[p + "attn.%s.bias" % a]
            w["%d.fc_w" % i], w["%d.fc_b" % i] = sd[p + "mlp.fc.weight"], sd[p + "mlp.fc.bias"]
            w["%d.out_w" % i], w["%d.out_b" % i] = sd[p + "mlp.out.weight"], sd[p + "mlp.out.bias"]
    else:
        d, L, H = int(mc["d_model"]), int(mc["num_layers"]), int(mc["nhead"])
        cfg.update(d=d, n_layer=L, n_head=H, hd=d // H, ff=int(mc["dim_feedforward"]), act="relu",
                   src_len=input_len, tgt_len=max_new)
        if input_len > cfg["max_len"] or max_new > cfg["max_len"]:
            raise TargetError("source %d / target %d tokens exceed the model's max_len %d"
                              % (input_len, max_new, cfg["max_len"]))
        w = {"tok": sd["tok_emb.weight"], "src_pos": sd["src_pos.weight"], "tgt_pos": sd["tgt_pos.weight"],
             "enc_ln_g": sd["enc_ln.weight"], "enc_ln_b": sd["enc_ln.bias"], "lnf_g": sd["dec_ln.weight"],
             "lnf_b": sd["dec_ln.bias"], "head": sd["head.weight"]}
        for i in range(L):
            p = "encoder.%d." % i
            for a in ("ln1", "ln2"):
                w["e%d.%s_g" % (i, a)], w["e%d.%s_b" % (i, a)] = sd[p + a + ".weight"], sd[p + a + ".bias"]
            for a in ("q", "k", "v", "proj"):
                w["e%d.%s_w" % (i, a)], w["e%d.%s_b" % (i, a)] = sd[p + "attn.%s.weight" % a], sd[p + "attn.%s.bias" % a]
            w["e%d.fc_w" % i], w["e%d.fc_b" % i] = sd[p + "ff.fc.weight"], sd[p + "ff.fc.bias"]
            w["e%d.out_w" % i], w["e%d.out_b" % i] = sd[p + "ff.out.weight"], sd[p + "ff.out.bias"]
            p = "decoder.%d." % i
            for a in ("ln1", "ln2", "ln3"):
                w["%d.%s_g" % (i, a)], w["%d.%s_b" % (i, a)] = sd[p + a + ".weight"], sd[p + a + ".bias"]
            for att, pre in (("self_attn", ""), ("cross_attn", "x")):
                for a in ("q", "k", "v", "proj"):
                    w["%d.%s%s_w" % (i, pre, a)] = sd[p + "%s.%s.weight" % (att, a)]
                    w["%d.%s%s_b" % (i, pre, a)] = sd[p + "%s.%s.bias" % (att, a)]
            w["%d.fc_w" % i], w["%d.fc_b" % i] = sd[p + "ff.fc.weight"], sd[p + "ff.fc.bias"]
            w["%d.out_w" % i], w["%d.out_b" % i] = sd[p + "ff.out.weight"], sd[p + "ff.out.bias"]
    if cfg["vocab"] != w["tok"].shape[0]:
        raise TargetError("token embedding has %d rows but the tokenizer has %d ids" % (w["tok"].shape[0], cfg["vocab"]))
    return TextIR(arch=arch, cfg=cfg, w=w)


# ----------------------------------------------------------------------------- quantization

def quantize_multiplier(real):
    from . import reference as R
    return R.quantize_multiplier(float(real))


def weights_int8(w):
    """(OUT, IN) float -> (int8 weights, per-row float scale): symmetric, [-127, 127], round half away."""
    from . import reference as R
    amax = np.abs(w).max(axis=1).astype(np.float64)
    s = np.where(amax > 0, amax / 127.0, 1.0)
    s = np.array([R.f32(v) for v in s])
    q = np.clip(np.sign(w) * np.floor(np.abs(w / s[:, None]) + 0.5), -127, 127).astype(np.int8)
    return q, s


def act_scale(amax):
    return float(np.float32(max(float(amax), 1e-6) * MARGIN / Q16))


def fc_params(w, b, s_in, s_out, relu=False):
    """A 16x8 fully connected layer: int8 per-channel weights, int32 bias, per-channel (multiplier, shift)."""
    qw, sw = weights_int8(w)
    bias = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    qb = np.array([int(np.sign(v) * math.floor(abs(v) / (s_in * s) + 0.5)) for v, s in zip(bias, sw)], np.int64)
    mult, shift = zip(*[quantize_multiplier(s_in * s / s_out) for s in sw])
    bound = int(np.abs(qb).max(initial=0)) + 32768 * int(np.abs(qw.astype(np.int64)).sum(axis=1).max(initial=0))
    if bound >= (1 << 31):
        raise TargetError("fully connected %dx%d: the int16 x int8 accumulator could reach %d, beyond int32 "
                          "(too many inputs for the 16x8 generator)" % (w.shape[0], w.shape[1], bound))
    return {"w": qw, "b": qb.astype(np.int32), "m": np.array(mult, np.int32), "s": np.array(shift, np.int32),
            "lo": 0 if relu else -32768, "hi": 32767, "s_w": sw}


def ln_params(g, b, s_in, s_out, eps):
    """Integer layer norm parameters: per-channel (multiplier, shift) of gamma / (s_out * 4096), int32 beta."""
    mult, shift = zip(*[quantize_multiplier(float(v) / (s_out * 4096.0)) for v in g])
    qb = np.array([int(np.sign(v) * math.floor(abs(v) / s_out + 0.5)) for v in b.astype(np.float64)], np.int64)
    return {"m": np.array(mult, np.int32), "s": np.array(shift, np.int32), "b": qb.astype(np.int32),
            "eps": int(round(eps / (s_in * s_in)))}


def table16(func, s_in, s_out):
    """TFLite's int16 lookup table (gen_lut, 513 entries, float32) of func over the int16 input range."""
    f = np.float32
    in_min, in_max = f(s_in) * f(-32768), f(s_in) * f(32767)
    out_min, out_max = f(s_out) * f(-32768), f(s_out) * f(32767)
    return gen_lut(func, in_min, in_max, out_min, out_max)


def gen_lut(func, in_min, in_max, out_min, out_max):
    """TFLite gen_lut<float, int16_t, int16_t>: 512 steps + 1 slope entry, bias-corrected midpoints."""
    from . import reference as R
    f = np.float32
    step = f((f(in_max) - f(in_min)) / f(512))
    half = f(step / f(2))
    inv = f(f(65536) / (f(out_max) - f(out_min)))

    def rnd(v):
        return float(R.round_f32(np.float32(v)))

    def fn(x):
        return f(func(f(x)))
    lut = np.zeros(513, np.int16)
    for i in range(512):
        x0 = f(f(in_min) + f(f(i) * step))
        val, mid, nxt = fn(x0), fn(f(x0 + half)), fn(f(f(in_min) + f(f(i + 1) * step)))
        sample = rnd(f(val * inv))
        interp = rnd(f(f(f(nxt * inv) + f(rnd(f(val * inv)))) / f(2)))
        midv = rnd(f(mid * inv))
        bias = rnd(f(f(interp - midv) / f(2)))
        lut[i] = int(min(max(sample - bias, -32768.0), 32767.0))
    lut[512] = int(min(max(rnd(f(fn(f(in_max)) * inv)), -32768.0), 32767.0))
    return lut


def gelu_f32(x):
    x = np.float32(x)
    return np.float32(0.5) * x * np.float32(1.0 + math.erf(float(x) / math.sqrt(2.0)))


_TABLES = {}


def softmax_tables():
    """TFLite int16 softmax Prepare: exp over [-10, 0] and 1/(1+x) over [0, 1], outputs in [-1, 1]."""
    if not _TABLES:
        _TABLES["exp"] = gen_lut(lambda v: np.float32(math.exp(float(v))), -10.0, 0.0, -1.0, 1.0)
        _TABLES["recip"] = gen_lut(lambda v: np.float32(1.0 / (1.0 + float(v))), 0.0, 1.0, -1.0, 1.0)
    return _TABLES


def softmax_multiplier(s_in):
    """input_scale * beta / (10 / 65535) -> (multiplier, shift) (TFLite SoftmaxPrepare, int16)."""
    return quantize_multiplier(float(s_in) / (10.0 / 65535.0))


def weight_bytes(q) -> int:
    """Bytes of every constant array the generated C stores (weights, biases, multipliers, tables)."""
    n = 0
    for v in q["const"].values():
        n += int(np.asarray(v).nbytes)
    return n


# ----------------------------------------------------------------------------- fp32 NumPy model (calibration)

def ln_f(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def _gelu_np(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


class Recorder:
    """max |value| per site, over everything the fp32 model computes."""

    def __init__(self):
        self.amax = {}

    def __call__(self, site, v):
        a = float(np.abs(v).max()) if np.size(v) else 0.0
        if a > self.amax.get(site, 0.0):
            self.amax[site] = a
        return v


def record(rec, site, v):
    return rec(site, v) if rec is not None else v


def float_attention(q, kc, vc, n, H, hd, rec, site, bias=None):
    """q (B, D), kc/vc (B, H, T, hd) -> (B, D): softmax(q k^T / sqrt(hd)) v over the first n positions."""
    B = q.shape[0]
    qh = q.reshape(B, H, 1, hd)
    s = (qh @ kc[:, :, :n].transpose(0, 1, 3, 2))[:, :, 0] / math.sqrt(hd)      # (B, H, n)
    record(rec, site + "sc", s)
    if bias is not None:
        s = s + bias[:, None, :n]
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    return (p[:, :, None, :] @ vc[:, :, :n])[:, :, 0].reshape(B, H * hd)


def float_block(ir, pre, x, cache, pos, rec, kv=True):
    """One pre-LN micro-gpt block on (B, D) at position pos, writing k, v into cache (L, B, H, T, hd)."""
    c, w = ir.cfg, ir.w
    H, hd, eps = c["n_head"], c["hd"], c["eps"]
    li = int(pre)
    h = record(rec, "%s.ln1" % pre, ln_f(x, w[pre + ".ln1_g"], w[pre + ".ln1_b"], eps))
    q = record(rec, "%s.q" % pre, h @ w[pre + ".q_w"].T + w[pre + ".q_b"])
    k = record(rec, "%s.k" % pre, h @ w[pre + ".k_w"].T + w[pre + ".k_b"])
    v = record(rec, "%s.v" % pre, h @ w[pre + ".v_w"].T + w[pre + ".v_b"])
    B = x.shape[0]
    cache["k"][li, :, :, pos] = k.reshape(B, H, hd)
    cache["v"][li, :, :, pos] = v.reshape(B, H, hd)
    y = record(rec, "%s.y" % pre, float_attention(q, cache["k"][li], cache["v"][li], pos + 1, H, hd, rec, pre + "."))
    x = record(rec, "x", x + y @ w[pre + ".proj_w"].T + w[pre + ".proj_b"])
    h = record(rec, "%s.ln2" % pre, ln_f(x, w[pre + ".ln2_g"], w[pre + ".ln2_b"], eps))
    f = record(rec, "%s.f" % pre, h @ w[pre + ".fc_w"].T + w[pre + ".fc_b"])
    g = record(rec, "%s.g" % pre, _gelu_np(f))
    return record(rec, "x", x + g @ w[pre + ".out_w"].T + w[pre + ".out_b"])


def float_step(ir, cache, tok, pos, rec=None, logits=True):
    """fp32 decode step of a micro-gpt: tok (B,) ids at position pos -> logits (B, V) (None if not logits)."""
    w = ir.w
    x = record(rec, "x", w["tok"][tok] + w["pos"][pos][None])
    for i in range(ir.cfg["n_layer"]):
        x = float_block(ir, str(i), x, cache, pos, rec)
    if not logits:
        return None
    h = record(rec, "lnf", ln_f(x, w["lnf_g"], w["lnf_b"], ir.cfg["eps"]))
    return record(rec, "lo", h @ w["head"].T)


def new_float_cache(ir, B):
    c = ir.cfg
    shape = (c["n_layer"], B, c["n_head"], c["ctx"], c["hd"])
    return {"k": np.zeros(shape, np.float64), "v": np.zeros(shape, np.float64)}


def encode_prompts(cfg, prompts):
    """Prompts -> (B, input_len) ids, left-padded with PAD; a one-line error naming the bad prompt."""
    stoi = {ch: i + N_SPECIALS for i, ch in enumerate(cfg["chars"])}
    n = cfg["input_len"]
    ids = np.full((len(prompts), n), PAD, np.int64)
    for r, p in enumerate(prompts):
        bad = sorted(set(ch for ch in p if ch not in stoi))
        if bad:
            raise TargetError("prompt %r has characters outside the vocabulary: %r" % (p, "".join(bad)))
        if len(p) > n:
            raise TargetError("prompt %r has %d characters; the model takes at most %d" % (p, len(p), n))
        t = [stoi[ch] for ch in p]
        if cfg.get("padding", "left") == "left":
            ids[r, n - len(t):] = t
        else:
            ids[r, :len(t)] = t
    return ids


def decode_ids(cfg, ids):
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i >= N_SPECIALS:
            out.append(cfg["chars"][i - N_SPECIALS])
    return "".join(out)


def float_generate(ir, ids, rec=None):
    """Greedy tokens (B, max_new_tokens) of the fp32 NumPy micro-gpt (PAD after EOS)."""
    B, T = ids.shape
    cache = new_float_cache(ir, B)
    lo = None
    for t in range(T):
        lo = float_step(ir, cache, ids[:, t], t, rec, logits=t == T - 1)
    out, done = [], np.zeros(B, bool)
    n_new = ir.cfg["max_new_tokens"]
    for s in range(n_new):
        tok = np.where(done, PAD, lo.argmax(-1))
        out.append(tok)
        done |= tok == EOS
        if done.all() or s == n_new - 1:
            break
        lo = float_step(ir, cache, tok, T + s, rec)
    return np.stack(out, 1)


# ----------------------------------------------------------------------------- IR -> integers

def calibrate(ir, prompts, batch=256, gen=None) -> dict:
    """max |value| per site while the fp32 NumPy model greedy-decodes `prompts` (gen: the model kind's
    float generator; default the decoder-only one)."""
    rec = Recorder()
    gen = gen or float_generate
    for i in range(0, len(prompts), batch):
        gen(ir, encode_prompts(ir.cfg, prompts[i:i + batch]), rec)
    return rec.amax


def textir2int(ir, calib_prompts) -> dict:
    """The integer model of a micro-gpt: {"arch", "cfg", "scales", "const" (arrays for the C), "p" (per-op
    parameters)}. Both model kinds: text_model.textir2int."""
    if ir.arch != "micro-gpt":
        raise TargetError("textir.textir2int builds micro-gpt models; use text_model.textir2int")
    c, w = ir.cfg, ir.w
    amax = calibrate(ir, calib_prompts)
    S = {k: act_scale(v) for k, v in amax.items()}
    sx = S["x"]
    p = {"sx": sx}
    const = {}
    tok16 = np.clip(np.round(w["tok"] / sx), -32768, 32767).astype(np.int16)
    pos16 = np.clip(np.round(w["pos"][:c["ctx"]] / sx), -32768, 32767).astype(np.int16)
    const["tok16"], const["pos16"] = tok16, pos16
    sm = softmax_tables()
    const["exp_lut"], const["recip_lut"] = sm["exp"], sm["recip"]
    layers = []
    for i in range(c["n_layer"]):
        pre = str(i)
        L = {}
        L["ln1"] = ln_params(w[pre + ".ln1_g"], w[pre + ".ln1_b"], sx, S[pre + ".ln1"], c["eps"])
        for a in ("q", "k", "v"):
            L[a] = fc_params(w[pre + ".%s_w" % a], w[pre + ".%s_b" % a], S[pre + ".ln1"], S[pre + ".%s" % a])
        L.update(attention_params(S[pre + ".q"], S[pre + ".k"], S[pre + ".v"], S[pre + ".sc"], S[pre + ".y"], c["hd"]))
        L["proj"] = fc_params(w[pre + ".proj_w"], w[pre + ".proj_b"], S[pre + ".y"], sx)
        L["ln2"] = ln_params(w[pre + ".ln2_g"], w[pre + ".ln2_b"], sx, S[pre + ".ln2"], c["eps"])
        L["fc"] = fc_params(w[pre + ".fc_w"], w[pre + ".fc_b"], S[pre + ".ln2"], S[pre + ".f"])
        L["gelu"] = table16(gelu_f32, S[pre + ".f"], S[pre + ".g"])
        L["out"] = fc_params(w[pre + ".out_w"], w[pre + ".out_b"], S[pre + ".g"], sx)
        layers.append(L)
        _collect(const, "l%d_" % i, L)
    p["layers"] = layers
    p["lnf"] = ln_params(w["lnf_g"], w["lnf_b"], sx, S["lnf"], c["eps"])
    p["head"] = fc_params(w["head"], None, S["lnf"], S["lo"])
    _collect(const, "", {"lnf": p["lnf"], "head": p["head"]})
    return {"arch": ir.arch, "cfg": dict(c), "scales": S, "amax": amax, "const": const, "p": p}


def attention_params(s_q, s_k, s_v, s_sc, s_y, hd, prefix=""):
    """Score requantization (int64 acc -> int16 at s_sc), softmax input multiplier, p.v requantization."""
    m_sc, sh_sc = quantize_multiplier(s_q * s_k / math.sqrt(hd) / s_sc)
    m_sm, sh_sm = softmax_multiplier(s_sc)
    m_y, sh_y = quantize_multiplier(s_v / 32768.0 / s_y)
    if not -31 <= sh_sc < 8:
        raise TargetError("attention score requantization shift %d outside TFLite's int64 range [-31, 7]" % sh_sc)
    return {prefix + "att": {"sc_m": m_sc, "sc_s": sh_sc, "sm_m": m_sm, "sm_s": sh_sm, "y_m": m_y, "y_s": sh_y}}


def _collect(const, prefix, params):
    """Arrays of the per-op parameter dicts -> flat const names (what the C stores)."""
    for name, v in params.items():
        if isinstance(v, np.ndarray):
            const[prefix + name] = v
        elif isinstance(v, dict):
            for k in ("w", "b", "m", "s"):
                if k in v and isinstance(v[k], np.ndarray):
                    const["%s%s_%s" % (prefix, name, k)] = v[k]
