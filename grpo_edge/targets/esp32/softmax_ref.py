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


def sat_shift_left(x, e):
    """gemmlowp SaturatingRoundingMultiplyByPOT(Param) for e >= 0 (scalar or array): x * 2^e saturated to int32."""
    x, e = np.asarray(x, np.int64), np.asarray(e, np.int64)
    thr = (np.int64(1) << (31 - e)) - 1
    return np.where(x > thr, INT32_MAX, np.where(x < -thr, INT32_MIN, x << e))


def rounding_half_sum(a, b):
    """gemmlowp RoundingHalfSum on int32: (a + b +- 1) / 2, truncating."""
    s = np.asarray(a, np.int64) + np.asarray(b, np.int64)
    return np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))


def clz32(x):
    """Leading zeros of each value's 32-bit word (32 for 0)."""
    u = np.asarray(x, np.int64) & 0xFFFFFFFF
    return np.array([32 - int(v).bit_length() for v in u.reshape(-1)], np.int64).reshape(u.shape)


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
    half_den = rounding_half_sum(a, INT32_MAX)
    x = _wrap(1515870810 + _mul(half_den, -1010580540))               # 48/17 - 32/17 * d, Q2.29
    for _ in range(3):
        hdx = _mul(half_den, x)
        one_minus = _wrap((1 << 29) - hdx)
        x = _wrap(x + sat_shift_left(_mul(x, one_minus), 2))
    return sat_shift_left(x, 1)


def get_reciprocal(x, integer_digits=12):
    """TFLite GetReciprocal: -> (Q0.31 reciprocal, num_bits_over_unit)."""
    x = np.asarray(x, np.int64)
    clz = clz32(x)
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
    """x (B, ..., N) int8 -> softmax over the last axis, int8. With p["mask"] (an attention mask, one row per
    softmax row of one sample: 1 where the score takes part), the masked scores take no part and give -128."""
    x = np.asarray(x, np.int64)
    attend = np.ones(x.shape, bool) if p.get("mask") is None else np.broadcast_to(
        np.asarray(p["mask"], bool).reshape(x.shape[1:]), x.shape)
    diff = x - np.where(attend, x, -129).max(axis=-1, keepdims=True)
    keep = attend & (diff >= p["diff_min"])
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
