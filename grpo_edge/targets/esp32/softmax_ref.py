"""int8 softmax with TFLite's fixed-point rules (reference_ops::Softmax, gemmlowp exp / reciprocal).

Prepare (softmax_common.cc): beta = 1, kScaledDiffIntegerBits = 5,
  input_multiplier, input_left_shift = QuantizeMultiplierGreaterThanOne(min(s_in * 2^26, 2^31 - 1))
  diff_min = -floor((2^5 - 1) * 2^26 / 2^input_left_shift)
Eval per row: d = x - max(x); taps with d >= diff_min contribute exp(d) in Q5.26 -> Q0.31 (gemmlowp
exp_on_negative_values); the sum (Q12.19) is inverted by GetReciprocal (Newton-Raphson in Q2.29);
out = RoundingDivideByPOT(SRDHM(recip, exp), bits_over_unit + 31 - 8) - 128.

That output has TFLite's fixed parameters (scale 1/256, zero point -128). onnxruntime's quantizer
gives softmax outputs scale 1/255 instead; for any other output parameters we keep 16 fractional
bits instead of 8 and requantize once: out = MBQM(p16, 2^-16 / s_out) + zp_out (our extension; TFLM
would need SOFTMAX + QUANTIZE, two roundings).
"""
import math

import numpy as np

from grpo_edge.errors import ExportError

from . import fixedpoint as R

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _wrap(x):
    return R.wrap_int32(x)


def _sat_shift_left(x, e):
    """gemmlowp SaturatingRoundingMultiplyByPOT<e>, e > 0."""
    thr = (1 << (31 - e)) - 1
    x = np.asarray(x, np.int64)
    return np.where(x > thr, INT32_MAX, np.where(x < -thr, INT32_MIN, x << e))


def _mul(a, b):
    return R.srdhm(a, b)


def exp_on_negative_values(a):
    """gemmlowp exp for Q5.26 inputs <= 0 -> Q0.31."""
    a = np.asarray(a, np.int64)
    frac = 26
    one_quarter = 1 << (frac - 2)
    mask = one_quarter - 1
    a_mod = _wrap((a & mask) - one_quarter)
    x = _wrap((a_mod << 5) + (1 << 28))                      # Rescale<0> then + 1/8
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = R.rounding_divide_by_pot(x4, 2)
    poly = R.rounding_divide_by_pot(_wrap(_mul(_wrap(x4_over_4 + x3), 715827883) + x2), 1)
    const = 1895147668                                        # exp(-1/8)
    result = _wrap(const + _mul(const, _wrap(x + poly)))
    remainder = _wrap(a_mod - a)
    for exponent, mult in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                           (2, 39332535), (3, 720401), (4, 242)):
        bit = (remainder & (1 << (frac + exponent))) != 0
        result = np.where(bit, _mul(result, mult), result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x(a):
    """gemmlowp one_over_one_plus_x_for_x_in_0_1: Q0.31 in [0, 1) -> Q0.31 of 1 / (1 + a)."""
    a = np.asarray(a, np.int64)
    s = a + INT32_MAX
    half_den = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))    # RoundingHalfSum (truncating / 2)
    x = _wrap(1515870810 + _mul(half_den, -1010580540))               # 48/17 - 32/17 * d, Q2.29
    for _ in range(3):
        hdx = _mul(half_den, x)
        one_minus = _wrap((1 << 29) - hdx)
        x = _wrap(x + _sat_shift_left(_mul(x, one_minus), 2))
    return _sat_shift_left(x, 1)


def get_reciprocal(x, integer_digits=12):
    """TFLite GetReciprocal: -> (Q0.31 reciprocal, num_bits_over_unit)."""
    x = np.asarray(x, np.int64)
    clz = np.array([32 - int(v).bit_length() for v in (x & 0xFFFFFFFF).reshape(-1)], np.int64).reshape(x.shape)
    bits_over_unit = integer_digits - clz
    shifted = _wrap(((x & 0xFFFFFFFF) << clz) - (1 << 31))
    return one_over_one_plus_x(shifted), bits_over_unit


def softmax_params(x, out, node_label=""):
    m_real = min(float(x.scale) * (1 << 26), float(INT32_MAX))
    mult, shift = R.quantize_multiplier(m_real)
    if shift < 0:
        raise ExportError("%s: softmax input scale %g too small for TFLite's int8 softmax" % (node_label, x.scale))
    radius = math.floor(((1 << 5) - 1) * float(1 << 26) / float(1 << shift))
    p = {"input_multiplier": mult, "input_left_shift": shift, "diff_min": -radius,
         "output_offset": out.zero_point, "tflite_output": bool(np.float32(out.scale) == np.float32(1 / 256.0)
                                                                and out.zero_point == -128)}
    if not p["tflite_output"]:
        p["output_multiplier"], p["output_shift"] = R.quantize_multiplier(2.0 ** -16 / float(out.scale))
    return p


def softmax_int8(x, p):
    """x (B, ..., N) int8 -> softmax over the last axis, int8."""
    x = np.asarray(x, np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    keep = diff >= p["diff_min"]
    scaled = R.srdhm(_wrap(diff << p["input_left_shift"]), p["input_multiplier"])
    e = exp_on_negative_values(np.where(keep, scaled, 0))
    e = np.where(keep, e, 0)
    total = _wrap(R.rounding_divide_by_pot(e, 12).sum(axis=-1, keepdims=True))
    recip, bits = get_reciprocal(total)
    prod = R.srdhm(recip, e)
    if p["tflite_output"]:
        out = R.rounding_divide_by_pot(prod, bits + 31 - 8) - 128
        return R.clamp8(np.where(keep, out, -128))
    p16 = R.rounding_divide_by_pot(prod, bits + 31 - 16)
    out = R.mbqm(p16, p["output_multiplier"], p["output_shift"]) + p["output_offset"]
    return R.clamp8(np.where(keep, out, -128))


C_HELPERS = """\
static int32_t {p}_sm_exp(int32_t a)  /* gemmlowp exp_on_negative_values, Q5.26 -> Q0.31 */
{{
    const int32_t a_mod = (a & ((1 << 24) - 1)) - (1 << 24);
    const int32_t x = (int32_t)((uint32_t)a_mod << 5) + (1 << 28);
    const int32_t x2 = {p}_srdhm(x, x), x3 = {p}_srdhm(x2, x), x4 = {p}_srdhm(x2, x2);
    const int32_t poly = {p}_rdbpot({p}_srdhm({p}_rdbpot(x4, 2) + x3, 715827883) + x2, 1);
    const int32_t rem = a_mod - a;
    int32_t r = 1895147668 + {p}_srdhm(1895147668, x + poly);
    if (rem & (1 << 24)) r = {p}_srdhm(r, 1672461947);
    if (rem & (1 << 25)) r = {p}_srdhm(r, 1302514674);
    if (rem & (1 << 26)) r = {p}_srdhm(r, 790015084);
    if (rem & (1 << 27)) r = {p}_srdhm(r, 290630308);
    if (rem & (1 << 28)) r = {p}_srdhm(r, 39332535);
    if (rem & (1 << 29)) r = {p}_srdhm(r, 720401);
    if (rem & (1 << 30)) r = {p}_srdhm(r, 242);
    return a == 0 ? INT32_MAX : r;
}}

static int32_t {p}_sm_shl(int32_t x, int e)  /* saturating x * 2^e */
{{
    const int32_t thr = (int32_t)(((int64_t)1 << (31 - e)) - 1);
    if (x > thr) return INT32_MAX;
    if (x < -thr) return INT32_MIN;
    return (int32_t)((uint32_t)x << e);
}}

static int32_t {p}_sm_recip(int32_t sum, int *bits_over_unit)  /* TFLite GetReciprocal, 12 integer bits */
{{
    int clz = 0, i;
    int64_t s;
    int32_t half, x;
    uint32_t u = (uint32_t)sum;
    while (clz < 32 && !(u & 0x80000000u)) {{ u <<= 1; ++clz; }}
    *bits_over_unit = 12 - clz;
    s = (int64_t)(int32_t)(((uint32_t)sum << clz) - 0x80000000u) + INT32_MAX;
    half = (int32_t)((s + (s >= 0 ? 1 : -1)) / 2);
    x = 1515870810 + {p}_srdhm(half, -1010580540);
    for (i = 0; i < 3; ++i)
        x = x + {p}_sm_shl({p}_srdhm(x, (1 << 29) - {p}_srdhm(half, x)), 2);
    return {p}_sm_shl(x, 1);
}}
"""


def emit_c(em, i, op, name):
    a, p = op.attrs, em.p
    shape = em.g.tensors[op.output].shape
    n = shape[-1]
    rows = int(np.prod(shape)) // n
    if not getattr(em, "_softmax_helpers", False):
        em.funcs.insert(0, C_HELPERS.format(p=p))
        em._softmax_helpers = True
    if a["tflite_output"]:
        fin = "v = %s_rdbpot(%s_srdhm(recip, e[c]), bits + 23) - 128;" % (p, p)
    else:
        fin = ("v = %s_mbqm(%s_rdbpot(%s_srdhm(recip, e[c]), bits + 15), %d, %d) + %d;"
               % (p, p, p, a["output_multiplier"], a["output_shift"], a["output_offset"]))
    body = ("static void %(name)s(const int8_t *restrict in, int8_t *restrict out)\n{\n"
            "    int r, c, bits;\n"
            "    int32_t e[%(n)d];\n"
            "    for (r = 0; r < %(rows)d; ++r) {\n"
            "        const int8_t *x = in + r * %(n)d;\n"
            "        int8_t *o = out + r * %(n)d;\n"
            "        int32_t mx = -128, sum = 0, recip, v;\n"
            "        for (c = 0; c < %(n)d; ++c) if (x[c] > mx) mx = x[c];\n"
            "        for (c = 0; c < %(n)d; ++c) {\n"
            "            const int32_t d = (int32_t)x[c] - mx;\n"
            "            e[c] = d >= %(dmin)d ? %(p)s_sm_exp(%(p)s_srdhm((int32_t)((uint32_t)d << %(ls)d), %(m)d)) : 0;\n"
            "            sum += %(p)s_rdbpot(e[c], 12);\n"
            "        }\n"
            "        recip = %(p)s_sm_recip(sum, &bits);\n"
            "        for (c = 0; c < %(n)d; ++c) {\n"
            "            if (e[c] == 0 && (int32_t)x[c] - mx < %(dmin)d) { o[c] = -128; continue; }\n"
            "            %(fin)s\n"
            "            if (v < -128) v = -128;\n"
            "            if (v > 127) v = 127;\n"
            "            o[c] = (int8_t)v;\n"
            "        }\n    }\n}\n"
            % dict(name=name, n=n, rows=rows, p=p, dmin=a["diff_min"], ls=a["input_left_shift"],
                   m=a["input_multiplier"], fin=fin))
    return body, [em.ptr(op.inputs[0]), em.ptr(op.output)]
