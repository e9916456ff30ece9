"""Integer text model -> C99 data + calls: <prefix>_text.{c,h} on top of csrc/gx_text_kernels.h.

    files = text_model.write_c(q, "out/", "arith")   # q from text_model.textir2int

Generated API (micro-gpt; the seq2seq generator in textgen_s2s.py keeps the same top two):
    int  P_generate(const char *prompt, char *answer, int max_len)
         UTF-8 prompt -> NUL-terminated answer (at most max_len bytes with the NUL); returns the number
         of generated tokens (EOS included) or a negative P_ERR_* code (P_error(code) names it). Never
         writes past answer[max_len - 1], never reads past the prompt's NUL.
    int  P_encode(const char *prompt, int16_t ids[P_INPUT_LEN])     left-padded ids or P_ERR_*
    int  P_prefill(const int16_t ids[P_INPUT_LEN])                  reset the cache, run the prompt, -> first token
    int  P_decode(int token, int pos)                               one step at position pos -> next token
    const int16_t *P_logits(void)                                   the last decision step's int16 logits
    const char *P_token_text(int id), *P_error(int code)
Weights and tables are `static const` (flash, memory-mapped on the ESP32); the KV cache and the
activations are one static int16 arena (the plan is in the header).
"""
from pathlib import Path

import numpy as np

from grpo_edge.report import atomic_write_text

from .cc import CSRC, TEXT_HEADERS, check_prefix, write_headers  # noqa: F401  (check_prefix: textgen_s2s's)
from .codegen import MARK

KERNELS = CSRC / "gx_text_kernels.h"
ERRORS = [("TOO_LONG", -1, "prompt longer than the model's context"),
          ("VOCAB", -2, "prompt has a character outside the vocabulary (or invalid UTF-8)"),
          ("SPACE", -3, "answer buffer too small"), ("ARG", -4, "null prompt or answer, or max_len < 1")]


def c_array(ctype, name, arr, per_line=24) -> str:
    vals = [str(int(v)) for v in np.asarray(arr).reshape(-1)]
    lines = [", ".join(vals[i:i + per_line]) for i in range(0, len(vals), per_line)]
    return "static const %s %s[%d] = {\n    %s\n};\n" % (ctype, name, max(len(vals), 1), ",\n    ".join(lines) or "0")


def c_string(s: str) -> str:
    out = '"'
    for b in s.encode("utf-8"):
        out += "\\%03o" % b if b >= 0x80 or b in (34, 92) or b < 0x20 else chr(b)
    return out + '"'


def fc_data(name, p) -> str:
    out = c_array("int8_t", name + "_w", p["w"]) + c_array("int32_t", name + "_m", p["m"])
    out += c_array("int8_t", name + "_s", p["s"])
    if p.get("b") is not None and np.any(p["b"]):
        out += c_array("int32_t", name + "_b", p["b"])
    return out


def fc_ref(name, p) -> str:
    """Initializer of a gxt_fc_t: {w, b, m, s, n_in, n_out, lo, hi}."""
    b = name + "_b" if p.get("b") is not None and np.any(p["b"]) else "0"
    return "{%s_w, %s, %s_m, %s_s, %d, %d, %d, %d}" % (name, b, name, name, p["w"].shape[1], p["w"].shape[0],
                                                      p["lo"], p["hi"])


def ln_data(name, p) -> str:
    return (c_array("int32_t", name + "_m", p["m"]) + c_array("int8_t", name + "_s", p["s"])
            + c_array("int32_t", name + "_b", p["b"]))


def ln_ref(name, p) -> str:
    return "{%s_m, %s_s, %s_b, %d}" % (name, name, name, p["eps"])


def att_ref(a) -> str:
    return "{%d, %d, %d, %d, %d, %d}" % (a["sc_m"], a["sc_s"], a["sm_m"], a["sm_s"], a["y_m"], a["y_s"])


COMMON_TYPES = MARK + """typedef struct { const int8_t *w; const int32_t *b; const int32_t *m; const int8_t *s;
                 int n_in, n_out; int32_t lo, hi; } gxt_fc_t;
typedef struct { const int32_t *m; const int8_t *s; const int32_t *b; int32_t eps; } gxt_ln_t;
typedef struct { int32_t sc_m; int sc_s; int32_t sm_m; int sm_s; int32_t y_m; int y_s; } gxt_att_t;

static void fc(const gxt_fc_t *f, const int16_t *x, int16_t *y)
{
    gxt_fc16(x, f->n_in, f->w, f->b, f->m, f->s, f->n_out, f->lo, f->hi, y);
}

static void ln(const gxt_ln_t *l, const int16_t *x, int d, int16_t *y)
{
    gxt_layernorm16(x, d, l->m, l->s, l->b, l->eps, y);
}
"""


def tokenizer_c(p, P, cfg) -> str:
    """Vocabulary tables, UTF-8 encode (left or right padding), token text, error names."""
    chars = cfg["chars"]
    cps = sorted(ord(ch) for ch in chars)
    texts = ["", "", ""] + [ch for ch in sorted(chars, key=ord)]
    out = c_array("uint32_t", p + "_codepoints", cps)
    out += "static const char *const %s_texts[%d] = {%s};\n" % (p, len(texts), ", ".join(c_string(t) for t in texts))
    out += "static const char *const %s_errors[%d] = {%s};\n\n" % (
        p, len(ERRORS) + 1, ", ".join(['"ok"'] + [c_string(m) for _, _, m in ERRORS]))
    left = cfg.get("padding", "left") == "left"
    out += """const char *%(p)s_error(int code)
{
    return (code < 0 && code >= -%(n)d) ? %(p)s_errors[-code] : %(p)s_errors[0];
}

const char *%(p)s_token_text(int id)
{
    return (id >= 0 && id < %(P)s_VOCAB) ? %(p)s_texts[id] : "";
}

/* One UTF-8 code point from s (at most the bytes before the NUL); returns its length or 0 if invalid. */
static int utf8_next(const unsigned char *s, uint32_t *cp)
{
    int n, i;
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if ((s[0] & 0xE0) == 0xC0) { n = 2; *cp = s[0] & 0x1Fu; }
    else if ((s[0] & 0xF0) == 0xE0) { n = 3; *cp = s[0] & 0x0Fu; }
    else if ((s[0] & 0xF8) == 0xF0) { n = 4; *cp = s[0] & 0x07u; }
    else return 0;
    for (i = 1; i < n; ++i) {
        if ((s[i] & 0xC0) != 0x80) return 0;      /* also stops at the NUL */
        *cp = (*cp << 6) | (s[i] & 0x3Fu);
    }
    return n;
}

int %(p)s_encode(const char *prompt, int16_t *ids)
{
    const unsigned char *s = (const unsigned char *)prompt;
    int16_t tmp[%(P)s_INPUT_LEN];
    int n = 0, i, lo, hi;
    uint32_t cp;
    if (!prompt || !ids) return %(P)s_ERR_ARG;
    while (*s) {
        int len = utf8_next(s, &cp);
        if (len == 0) return %(P)s_ERR_VOCAB;
        lo = 0; hi = %(P)s_N_CHARS - 1;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (%(p)s_codepoints[mid] < cp) lo = mid + 1; else hi = mid;
        }
        if (%(p)s_codepoints[lo] != cp) return %(P)s_ERR_VOCAB;
        if (n >= %(P)s_INPUT_LEN) return %(P)s_ERR_TOO_LONG;
        tmp[n++] = (int16_t)(lo + 3);
        s += len;
    }
    for (i = 0; i < %(P)s_INPUT_LEN; ++i) ids[i] = 0;
    for (i = 0; i < n; ++i) ids[%(off)s + i] = tmp[i];
    return n;
}

/* Appends the token's UTF-8 text; returns 0, or P_ERR_SPACE (answer stays NUL-terminated). */
static int append_token(char *answer, int *used, int max_len, int id)
{
    const char *t = %(p)s_token_text(id);
    while (*t) {
        if (*used + 1 >= max_len) { answer[*used] = '\\0'; return %(P)s_ERR_SPACE; }
        answer[(*used)++] = *t++;
    }
    answer[*used] = '\\0';
    return 0;
}
""" % {"p": p, "P": P, "n": len(ERRORS), "off": ("%s_INPUT_LEN - n" % P) if left else "0"}
    return out


def header_common(p, P, cfg) -> str:
    out = "#define %s_VOCAB %d\n#define %s_N_CHARS %d\n#define %s_INPUT_LEN %d\n#define %s_MAX_NEW %d\n" % (
        P, cfg["vocab"], P, len(cfg["chars"]), P, cfg["input_len"], P, cfg["max_new_tokens"])
    for name, code, msg in ERRORS:
        out += "#define %s_ERR_%s (%d)   /* %s */\n" % (P, name, code, msg)
    out += ("\nint %s_generate(const char *prompt, char *answer, int max_len);\n"
            "int %s_encode(const char *prompt, int16_t *ids);\n"
            "const int16_t *%s_logits(void);\nconst char *%s_token_text(int id);\nconst char *%s_error(int code);\n"
            "extern uint32_t %s_logit_hash;   /* FNV-1a of every decision step's logits in the last generate */\n"
            % (p, p, p, p, p, p))
    return out


def arena_plan(cfg) -> dict:
    """Offsets (int16 elements) of every activation buffer and the KV cache in one static arena."""
    D, F, V, T, L = cfg["d"], cfg["ff"], cfg["vocab"], cfg["ctx"], cfg["n_layer"]
    bufs = [("x", D), ("h", D), ("q", D), ("y", D), ("f", F), ("sc", T), ("logits", V),
            ("kcache", L * T * D), ("vcache", L * T * D)]
    plan, off = {}, 0
    for name, n in bufs:
        plan[name] = (off, n)
        off += (n + 1) & ~1                 # keep every buffer 4-byte aligned
    return {"buffers": plan, "elements": off, "bytes": 2 * off}


# The step, prefill, decode and generate of a micro-gpt (%-formatted with the sizes and the prefix).
# The greedy loop over the step API, shared by both model kinds (FIRST_POS: the position of the first
# generated token: after the prompt for micro-gpt, after BOS for the encoder-decoder).
GENERATE_C = """
int %(p)s_generate(const char *prompt, char *answer, int max_len)
{
    int16_t ids[%(P)s_INPUT_LEN];
    int used = 0, n, s, tok, err = 0;
    if (!prompt || !answer || max_len < 1) return %(P)s_ERR_ARG;
    answer[0] = '\\0';
    n = %(p)s_encode(prompt, ids);
    if (n < 0) return n;
    tok = %(p)s_prefill(ids);
    for (s = 0; s < %(P)s_MAX_NEW; ++s) {
        if (tok == 2) return err ? err : s + 1;          /* EOS */
        if (!err) err = append_token(answer, &used, max_len, tok);
        if (s == %(P)s_MAX_NEW - 1) break;
        tok = %(p)s_decode(tok, %(FIRST_POS)s + s);
    }
    return err ? err : %(P)s_MAX_NEW;
}
"""

# The parts of a decode step that both generators share (micro-gpt here, the tiny-transformer's decoder in
# textgen_s2s.py), %-formatted by step_parts(). GX_MARK(i) before each call is a boundary of the per-op profile
# (STEP_OPS[i]; GX_MARK(len(STEP_OPS)) ends the step; a no-op unless the build defines it, codegen.MARK).
STEP_OPS = ("embed", "ln1", "q", "k", "v", "att", "proj", "add_att", "ln2", "xq", "xatt", "xproj", "add_xatt",
            "ln3", "fc", "act", "out", "add_ffn", "lnf", "head", "logit_hash", "argmax")

ATTEND_C = """
static void attend(const int16_t *q, const int16_t *kc, const int16_t *vc, int n, const gxt_att_t *a, int16_t *y)
{
    int hh;
    for (hh = 0; hh < %(H)d; ++hh)
        gxt_attend16(q + hh * %(hd)d, kc + hh * %(hd)d, vc + hh * %(hd)d, n, %(hd)d, %(D)d, a->sc_m, a->sc_s, a->sm_m,
                     a->sm_s, a->y_m, a->y_s, exp_lut, recip_lut, 0, A_SC, y + hh * %(hd)d);
}
"""

SELF_ATTENTION_C = """    GX_MARK(0);
    for (i = 0; i < %(D)d; ++i)
        x[i] = gx_sat16((int32_t)tok16[(long)token * %(D)d + i] + (int32_t)%(pos16)s[(long)%(pos)s * %(D)d + i]);
    for (l = 0; l < %(L)d; ++l) {
        const %(layer_t)s *ly = &%(layers)s[l];
        int16_t *kc = A_KCACHE + (long)l * %(T)d * %(D)d, *vc = A_VCACHE + (long)l * %(T)d * %(D)d;
        GX_MARK(1); ln(&ly->ln1, x, %(D)d, h);
        GX_MARK(2); fc(&ly->q, h, A_Q);
        GX_MARK(3); fc(&ly->k, h, kc + (long)%(pos)s * %(D)d);
        GX_MARK(4); fc(&ly->v, h, vc + (long)%(pos)s * %(D)d);
        GX_MARK(5); attend(A_Q, kc, vc, %(pos)s + 1, &ly->att, A_Y);
        GX_MARK(6); fc(&ly->proj, A_Y, h);
        GX_MARK(7); gxt_add16(x, h, %(D)d);
        GX_MARK(8); ln(&ly->ln2, x, %(D)d, h);
"""

HEAD_C = """    GX_MARK(18); ln(&lnf, x, %(D)d, h);
    GX_MARK(19); fc(&head, h, A_LOGITS);
    GX_MARK(20); %(p)s_logit_hash = gx_fnv1a(%(p)s_logit_hash, A_LOGITS, (int)(%(V)d * sizeof(int16_t)));
    GX_MARK(21); token = gxt_argmax16(A_LOGITS, %(V)d);
    GX_MARK(22);
    return token;
"""


def step_parts(sizes, pos, pos16, layer_t, layers) -> dict:
    """The shared decode-step C (attend(), the embedding and a layer's self-attention half, the head) for
    the %(attend)s, %(self_attention)s and %(head)s slots of a runtime template."""
    v = dict(sizes, pos=pos, pos16=pos16, layer_t=layer_t, layers=layers)
    return {"attend": ATTEND_C % v, "self_attention": SELF_ATTENTION_C % v, "head": HEAD_C % v}


GPT_RUNTIME_C = """
const int16_t *%(p)s_logits(void)
{
    return A_LOGITS;
}

%(attend)s
/* One decode step: token at position pos (0 <= pos < CTX). Returns the argmax, or -1 without logits. */
static int step(int token, int pos, int want_logits)
{
    int16_t *x = A_X, *h = A_H;
    int i, l;
%(self_attention)s        GX_MARK(14); fc(&ly->fc, h, A_F);
        GX_MARK(15); if (ly->act) gxt_lut16_vec(A_F, %(F)d, ly->act);
        GX_MARK(16); fc(&ly->out, A_F, h);
        GX_MARK(17); gxt_add16(x, h, %(D)d);
    }
    if (!want_logits) return -1;
%(head)s}

int %(p)s_prefill(const int16_t *ids)
{
    int t, tok = -1;
    for (t = 0; t < 2 * %(L)d * %(T)d * %(D)d; ++t) A_KCACHE[t] = 0;     /* both caches, adjacent */
    %(p)s_logit_hash = 2166136261u;
    for (t = 0; t < %(P)s_INPUT_LEN; ++t) {
        int id = ids[t];
        if (id < 0 || id >= %(V)d) return %(P)s_ERR_VOCAB;
        tok = step(id, t, t == %(P)s_INPUT_LEN - 1);
    }
    return tok;
}

int %(p)s_decode(int token, int pos)
{
    if (token < 0 || token >= %(V)d) return %(P)s_ERR_VOCAB;
    if (pos < 0 || pos >= %(T)d) return %(P)s_ERR_TOO_LONG;
    return step(token, pos, 1);
}

"""


def header_start(p, P, cfg, what) -> str:
    """The generated header's stamp, include guard and the parts both generators share (header_common)."""
    return ("/* generated by grpo-edge (ESP32 text path): %s %s; do not edit */\n"
            "#ifndef %s_TEXT_H\n#define %s_TEXT_H\n#include <stdint.h>\n\n" % (p, what, P, P)) + header_common(p, P, cfg)


def generate_c(q, prefix) -> dict:
    """{"header": text, "source": text, "arena": plan} for a micro-gpt integer model."""
    p, P = check_prefix(prefix), prefix.upper()
    c, prm, K = q["cfg"], q["p"], q["const"]
    D, H, hd, F, V, T, L = c["d"], c["n_head"], c["hd"], c["ff"], c["vocab"], c["ctx"], c["n_layer"]
    plan = arena_plan(c)
    hdr = header_start(p, P, c, "micro-gpt d%d x %d layers, %d heads" % (D, L, H))
    hdr += ("#define %s_D %d\n#define %s_LAYERS %d\n#define %s_HEADS %d\n#define %s_CTX %d\n#define %s_ARENA_BYTES %d\n"
            "#define %s_FIRST_POS %s_INPUT_LEN   /* position of the first token fed back to P_decode */\n"
            % (P, D, P, L, P, H, P, T, P, plan["bytes"], P, P))
    hdr += ("int %s_prefill(const int16_t *ids);\nint %s_decode(int token, int pos);\n#endif\n" % (p, p))

    src = ["/* generated by grpo-edge: weights, scales, tables and calls; kernels in gx_text_kernels.h */\n"
           "#include <stdint.h>\n#include \"gx_text_kernels.h\"\n#include \"%s_text.h\"\n\n" % p, COMMON_TYPES,
           "typedef struct { gxt_ln_t ln1; gxt_fc_t q, k, v; gxt_att_t att; gxt_fc_t proj; gxt_ln_t ln2; gxt_fc_t fc;\n"
           "                 const int16_t *act; gxt_fc_t out; } layer_t;\n\n"]
    src.append(c_array("int16_t", "tok16", K["tok16"]) + c_array("int16_t", "pos16", K["pos16"]))
    src.append(c_array("int16_t", "exp_lut", K["exp_lut"]) + c_array("int16_t", "recip_lut", K["recip_lut"]))
    inits = []
    for i, Lp in enumerate(prm["layers"]):
        n = "l%d_" % i
        src.append(ln_data(n + "ln1", Lp["ln1"]) + ln_data(n + "ln2", Lp["ln2"]))
        for a in ("q", "k", "v", "proj", "fc", "out"):
            src.append(fc_data(n + a, Lp[a]))
        act = "0"
        if c["act"] == "gelu":
            src.append(c_array("int16_t", n + "gelu", Lp["gelu"]))
            act = n + "gelu"
        inits.append("    {%s, %s, %s, %s, %s, %s, %s, %s, %s, %s}" % (
            ln_ref(n + "ln1", Lp["ln1"]), fc_ref(n + "q", Lp["q"]), fc_ref(n + "k", Lp["k"]), fc_ref(n + "v", Lp["v"]),
            att_ref(Lp["att"]), fc_ref(n + "proj", Lp["proj"]), ln_ref(n + "ln2", Lp["ln2"]), fc_ref(n + "fc", Lp["fc"]),
            act, fc_ref(n + "out", Lp["out"])))
    src.append(ln_data("lnf", prm["lnf"]) + fc_data("head", prm["head"]))
    src.append("static const layer_t layers[%d] = {\n%s\n};\n" % (L, ",\n".join(inits)))
    src.append("static const gxt_ln_t lnf = %s;\nstatic const gxt_fc_t head = %s;\n\n" % (
        ln_ref("lnf", prm["lnf"]), fc_ref("head", prm["head"])))
    sizes = {"p": p, "P": P, "D": D, "L": L, "T": T, "H": H, "hd": hd, "F": F, "V": V}
    src += source_tail(c, plan, GPT_RUNTIME_C % dict(sizes, **step_parts(sizes, "pos", "pos16", "layer_t", "layers")),
                       sizes, P + "_INPUT_LEN")
    # kcache and vcache must be adjacent for the one-loop reset above
    assert plan["buffers"]["vcache"][0] == plan["buffers"]["kcache"][0] + L * T * D
    return {"header": hdr, "source": "".join(src), "arena": plan}


def source_tail(cfg, plan, runtime, sizes, first_pos, state="") -> list:
    """The end of either generator's source: the arena and its buffers, `state` (other static variables),
    the logit hash, the tokenizer, the formatted runtime (step, prefill, decode) and P_generate."""
    p, P = sizes["p"], sizes["P"]
    out = ["/* arena: %s */\nstatic int16_t arena[%d];\n" % (
        ", ".join("%s %d@%d" % (k, n, o) for k, (o, n) in plan["buffers"].items()), plan["elements"])]
    out += ["#define A_%s (arena + %d)\n" % (k.upper(), o) for k, (o, n) in plan["buffers"].items()]
    out += [state + "uint32_t %s_logit_hash;\n\n" % p, tokenizer_c(p, P, cfg), runtime,
            GENERATE_C % {"p": p, "P": P, "FIRST_POS": first_pos}]
    return out


def write(gen, out_dir, prefix) -> dict:
    """Write generated C (generate_c's or textgen_s2s.generate_c_s2s's {"header", "source", "arena"}) as
    <prefix>_text.{h,c} with a copy of gx_text_kernels.h into out_dir; returns their paths. From an integer
    model of either kind: text_model.write_c."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    h, c = out / ("%s_text.h" % prefix), out / ("%s_text.c" % prefix)
    atomic_write_text(h, gen["header"])
    atomic_write_text(c, gen["source"])
    return {"header": h, "source": c, "kernels": write_headers(out, TEXT_HEADERS), "arena": gen["arena"]}
