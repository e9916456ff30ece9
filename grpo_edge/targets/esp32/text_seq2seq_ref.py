"""Encoder-decoder (tiny-transformer) on the ESP32 text path: fp32 NumPy model, quantization, integer reference.

The encoder runs once per prompt on the prompt's n characters only, at their positions (right padding:
0..n-1; left padding: src_len-n..src_len-1).
That equals the checkpoint's masked encoder exactly: pad keys get -1e4 there, whose exp is 0 in
float32, and pad queries feed only pad rows, which cross-attention masks too. (An empty prompt is all
pads; every key is masked alike there, so the softmax is the unmasked one over all positions: the
integer path then runs the encoder on all src_len pads.) Per prompt and decoder layer, the cross
keys/values of the memory are computed once (cross caches); the decoder then runs one token per step
with a causal self-attention KV cache, from BOS.

Integer sites (each an int16 scale): encoder residual "ex", e<i>.{ln1,q,k,v,sc,y,ln2,f}, memory "mem";
decoder residual "x", <i>.{ln1,q,k,v,sc,y,ln2,xq,xk,xv,xsc,xy,ln3,f}, "lnf", logits "lo". ReLU is the
clamp of the first feed-forward FC (activation_min 0).
"""
import numpy as np

from . import text_ref as T
from .textir import (BOS, EOS, PAD, ln_f, record, act_scale, attention_params, fc_params, float_attention,
                     ln_params, softmax_tables)


def valid_span(row):
    """(start, n) of a source's characters: after its leading pads (left padding) up to the next pad (right
    padding); an all-pad source is (0, src_len): every key masked alike is the unmasked softmax."""
    row = np.asarray(row)
    s = 0
    while s < len(row) and row[s] == PAD:
        s += 1
    if s == len(row):
        return 0, len(row)
    n = 0
    while s + n < len(row) and row[s + n] != PAD:
        n += 1
    return s, n


# ----------------------------------------------------------------------------- fp32

def _float_layer_ff(w, pre, x, rec, ln="ln2"):
    h = record(rec, "%s.%s" % (pre, ln), ln_f(x, w[pre + ".%s_g" % ln], w[pre + ".%s_b" % ln], 1e-5))
    f = record(rec, "%s.f" % pre, np.maximum(h @ w[pre + ".fc_w"].T + w[pre + ".fc_b"], 0.0))
    return f @ w[pre + ".out_w"].T + w[pre + ".out_b"]


def float_encode(ir, src_row, rec=None):
    """One source (src_len,) ids -> memory (n, D) over its n valid positions (all src_len if empty)."""
    c, w = ir.cfg, ir.w
    s, n = valid_span(src_row)
    H, hd = c["n_head"], c["hd"]
    x = record(rec, "ex", w["tok"][src_row[s:s + n]] + w["src_pos"][s:s + n])        # (n, D)
    for i in range(c["n_layer"]):
        pre = "e%d" % i
        h = record(rec, pre + ".ln1", ln_f(x, w[pre + ".ln1_g"], w[pre + ".ln1_b"], 1e-5))
        q = record(rec, pre + ".q", h @ w[pre + ".q_w"].T + w[pre + ".q_b"])
        k = record(rec, pre + ".k", h @ w[pre + ".k_w"].T + w[pre + ".k_b"])
        v = record(rec, pre + ".v", h @ w[pre + ".v_w"].T + w[pre + ".v_b"])
        kc = k.reshape(n, H, hd).transpose(1, 0, 2)[None]                             # (1, H, n, hd)
        vc = v.reshape(n, H, hd).transpose(1, 0, 2)[None]
        ys = [float_attention(q[j:j + 1], kc, vc, n, H, hd, rec, pre + ".") for j in range(n)]
        y = record(rec, pre + ".y", np.concatenate(ys, 0))
        x = record(rec, "ex", x + y @ w[pre + ".proj_w"].T + w[pre + ".proj_b"])
        x = record(rec, "ex", x + _float_layer_ff(w, pre, x, rec))
    return record(rec, "mem", ln_f(x, w["enc_ln_g"], w["enc_ln_b"], 1e-5))


def float_generate_s2s(ir, ids, rec=None):
    """Greedy tokens (B, max_new_tokens) of the fp32 NumPy tiny-transformer, one prompt at a time."""
    c, w = ir.cfg, ir.w
    H, hd, n_new = c["n_head"], c["hd"], c["max_new_tokens"]
    rows = []
    for row in ids:
        mem = float_encode(ir, row, rec)
        n = mem.shape[0]
        xk, xv = [], []
        for i in range(c["n_layer"]):
            k = record(rec, "%d.xk" % i, mem @ w["%d.xk_w" % i].T + w["%d.xk_b" % i])
            v = record(rec, "%d.xv" % i, mem @ w["%d.xv_w" % i].T + w["%d.xv_b" % i])
            xk.append(k.reshape(n, H, hd).transpose(1, 0, 2)[None])
            xv.append(v.reshape(n, H, hd).transpose(1, 0, 2)[None])
        kc = np.zeros((c["n_layer"], 1, H, n_new, hd))
        vc = np.zeros_like(kc)
        tok, out = BOS, []
        for t in range(n_new):
            x = record(rec, "x", (w["tok"][tok] + w["tgt_pos"][t])[None])
            for i in range(c["n_layer"]):
                pre = str(i)
                h = record(rec, pre + ".ln1", ln_f(x, w[pre + ".ln1_g"], w[pre + ".ln1_b"], 1e-5))
                q = record(rec, pre + ".q", h @ w[pre + ".q_w"].T + w[pre + ".q_b"])
                kc[i, 0, :, t] = record(rec, pre + ".k", h @ w[pre + ".k_w"].T + w[pre + ".k_b"]).reshape(H, hd)
                vc[i, 0, :, t] = record(rec, pre + ".v", h @ w[pre + ".v_w"].T + w[pre + ".v_b"]).reshape(H, hd)
                y = record(rec, pre + ".y", float_attention(q, kc[i], vc[i], t + 1, H, hd, rec, pre + "."))
                x = record(rec, "x", x + y @ w[pre + ".proj_w"].T + w[pre + ".proj_b"])
                h = record(rec, pre + ".ln2", ln_f(x, w[pre + ".ln2_g"], w[pre + ".ln2_b"], 1e-5))
                q = record(rec, pre + ".xq", h @ w[pre + ".xq_w"].T + w[pre + ".xq_b"])
                y = record(rec, pre + ".xy", float_attention(q, xk[i], xv[i], n, H, hd, rec, pre + ".x"))
                x = record(rec, "x", x + y @ w[pre + ".xproj_w"].T + w[pre + ".xproj_b"])
                x = record(rec, "x", x + _float_layer_ff(w, pre, x, rec, "ln3"))
            h = record(rec, "lnf", ln_f(x, w["lnf_g"], w["lnf_b"], 1e-5))
            lo = record(rec, "lo", h @ w["head"].T)
            tok = int(lo.argmax(-1)[0])
            out.append(tok)
            if tok == EOS:
                break
        rows.append(out + [PAD] * (n_new - len(out)))
    return np.array(rows, np.int64)


# ----------------------------------------------------------------------------- quantization

def textir2int_s2s(ir, calib_prompts) -> dict:
    from .textir import calibrate, _collect
    c, w = ir.cfg, ir.w
    amax = calibrate(ir, calib_prompts, gen=float_generate_s2s)
    S = {k: act_scale(v) for k, v in amax.items()}
    se, sx, eps = S["ex"], S["x"], c["eps"]
    const = {"tok16e": _q16(w["tok"], se), "src_pos16": _q16(w["src_pos"][:c["src_len"]], se),
             "tok16": _q16(w["tok"], sx), "tgt_pos16": _q16(w["tgt_pos"][:c["max_new_tokens"]], sx)}
    sm = softmax_tables()
    const["exp_lut"], const["recip_lut"] = sm["exp"], sm["recip"]
    p = {"enc": [], "dec": []}
    for i in range(c["n_layer"]):
        e = "e%d" % i
        L = _self_attention_params(w, S, e, se, eps, c["hd"])
        L["fc"] = fc_params(w[e + ".fc_w"], w[e + ".fc_b"], S[e + ".ln2"], S[e + ".f"], relu=True)
        L["out"] = fc_params(w[e + ".out_w"], w[e + ".out_b"], S[e + ".f"], se)
        p["enc"].append(L)
        _collect(const, "e%d_" % i, L)
    p["enc_ln"] = ln_params(w["enc_ln_g"], w["enc_ln_b"], se, S["mem"], eps)
    for i in range(c["n_layer"]):
        d = str(i)
        L = _self_attention_params(w, S, d, sx, eps, c["hd"])
        L["xq"] = fc_params(w[d + ".xq_w"], w[d + ".xq_b"], S[d + ".ln2"], S[d + ".xq"])
        L["xk"] = fc_params(w[d + ".xk_w"], w[d + ".xk_b"], S["mem"], S[d + ".xk"])
        L["xv"] = fc_params(w[d + ".xv_w"], w[d + ".xv_b"], S["mem"], S[d + ".xv"])
        L.update(attention_params(S[d + ".xq"], S[d + ".xk"], S[d + ".xv"], S[d + ".xsc"], S[d + ".xy"], c["hd"],
                                  prefix="x"))
        L["xproj"] = fc_params(w[d + ".xproj_w"], w[d + ".xproj_b"], S[d + ".xy"], sx)
        L["ln3"] = ln_params(w[d + ".ln3_g"], w[d + ".ln3_b"], sx, S[d + ".ln3"], eps)
        L["fc"] = fc_params(w[d + ".fc_w"], w[d + ".fc_b"], S[d + ".ln3"], S[d + ".f"], relu=True)
        L["out"] = fc_params(w[d + ".out_w"], w[d + ".out_b"], S[d + ".f"], sx)
        p["dec"].append(L)
        _collect(const, "d%d_" % i, L)
    p["lnf"] = ln_params(w["lnf_g"], w["lnf_b"], sx, S["lnf"], eps)
    p["head"] = fc_params(w["head"], None, S["lnf"], S["lo"])
    _collect(const, "", {"enc_ln": p["enc_ln"], "lnf": p["lnf"], "head": p["head"]})
    return {"arch": ir.arch, "cfg": dict(c), "scales": S, "amax": amax, "const": const, "p": p}


def _self_attention_params(w, S, pre, s_res, eps, hd) -> dict:
    """Integer parameters of layer `pre`'s self-attention half (encoder 'e<i>', decoder '<i>'): ln1, q, k, v,
    the attention scales, proj back to the residual scale s_res, and ln2."""
    L = {"ln1": ln_params(w[pre + ".ln1_g"], w[pre + ".ln1_b"], s_res, S[pre + ".ln1"], eps)}
    for a in ("q", "k", "v"):
        L[a] = fc_params(w[pre + ".%s_w" % a], w[pre + ".%s_b" % a], S[pre + ".ln1"], S[pre + "." + a])
    L.update(attention_params(S[pre + ".q"], S[pre + ".k"], S[pre + ".v"], S[pre + ".sc"], S[pre + ".y"], hd))
    L["proj"] = fc_params(w[pre + ".proj_w"], w[pre + ".proj_b"], S[pre + ".y"], s_res)
    L["ln2"] = ln_params(w[pre + ".ln2_g"], w[pre + ".ln2_b"], s_res, S[pre + ".ln2"], eps)
    return L


def _q16(a, s):
    return np.clip(np.round(a / s), -32768, 32767).astype(np.int16)


# ----------------------------------------------------------------------------- integer reference

def _self_attend(q, kc, vc, n, att, H, hd, K):
    """q (1, D); kc/vc (n_max, D) rows -> (1, D)."""
    kh = kc[:n].reshape(n, H, hd).transpose(1, 0, 2)[None]
    vh = vc[:n].reshape(n, H, hd).transpose(1, 0, 2)[None]
    return T.attention16(q, kh, vh, n, att, H, hd, K)


def encode_int(q, row):
    """(src_len,) ids -> memory (n, D) int16."""
    c, p, K = q["cfg"], q["p"], q["const"]
    H, hd = c["n_head"], c["hd"]
    s, n = valid_span(row)
    x = T.add16(K["tok16e"][row[s:s + n]], K["src_pos16"][s:s + n])
    for L in p["enc"]:
        h = T.layernorm16(x, L["ln1"])
        qv, k, v = T.fc16(h, L["q"]), T.fc16(h, L["k"]), T.fc16(h, L["v"])
        y = np.concatenate([_self_attend(qv[j:j + 1], k, v, n, L["att"], H, hd, K) for j in range(n)], 0)
        x = T.add16(x, T.fc16(y, L["proj"]))
        x = T.add16(x, T.fc16(T.fc16(T.layernorm16(x, L["ln2"]), L["fc"]), L["out"]))
    return T.layernorm16(x, p["enc_ln"])


def generate_s2s(q, ids):
    """Greedy decode, one prompt at a time -> (tokens (B, max_new) PAD after EOS, logits per step (B, V))."""
    c, p, K = q["cfg"], q["p"], q["const"]
    H, hd, n_new, D, V = c["n_head"], c["hd"], c["max_new_tokens"], c["d"], c["vocab"]
    toks = np.full((len(ids), n_new), PAD, np.int64)
    los = [np.zeros((len(ids), V), np.int16) for _ in range(n_new)]
    for r, row in enumerate(ids):
        mem = encode_int(q, row)
        n = mem.shape[0]
        xk = [T.fc16(mem, L["xk"]) for L in p["dec"]]
        xv = [T.fc16(mem, L["xv"]) for L in p["dec"]]
        kc = np.zeros((c["n_layer"], n_new, D), np.int16)
        vc = np.zeros_like(kc)
        tok = BOS
        for t in range(n_new):
            x = T.add16(K["tok16"][[tok]], K["tgt_pos16"][[t]])
            for i, L in enumerate(p["dec"]):
                h = T.layernorm16(x, L["ln1"])
                qv = T.fc16(h, L["q"])
                kc[i, t], vc[i, t] = T.fc16(h, L["k"])[0], T.fc16(h, L["v"])[0]
                x = T.add16(x, T.fc16(_self_attend(qv, kc[i], vc[i], t + 1, L["att"], H, hd, K), L["proj"]))
                qx = T.fc16(T.layernorm16(x, L["ln2"]), L["xq"])
                x = T.add16(x, T.fc16(_self_attend(qx, xk[i], xv[i], n, L["xatt"], H, hd, K), L["xproj"]))
                x = T.add16(x, T.fc16(T.fc16(T.layernorm16(x, L["ln3"]), L["fc"]), L["out"]))
            lo = T.fc16(T.layernorm16(x, p["lnf"]), p["head"])
            los[t][r] = lo[0]
            tok = int(T.argmax16(lo)[0])
            toks[r, t] = tok
            if tok == EOS:
                break
    return toks, los

