"""TFLite Micro's int8 elementwise kernels in NumPy, evaluated on all 256 input codes: the 256-entry table (the
`lut` op) that gives TFLM's outputs exactly, whatever arithmetic TFLM uses inside.

    table = tflite_table("TANH", s_in, zp_in, s_out, zp_out)      # int8 (256,): out = table[x + 128]

Each function follows TFLM's Prepare (the parameters from the scales) and Eval (the integer arithmetic):
  RELU        activations_common.cc CalculateReluOpData: MBQM(x - zp_in, QuantizeMultiplier(float(s_in / s_out)))
              + zp_out, clamped to [max(-128, zp_out), 127]
  RELU6       Relu6Quantized: clamp(x, zp_in, zp_in + round(6 / s_in)) (no rescale: TFLM ignores the output scale)
  TANH        tanh.cc + reference_integer_ops::Tanh: input_multiplier = round(frexp(s_in * 2^27) * 2^31), gemmlowp's
              fixed-point tanh on Q4.27, output Q0.7 (TFLite's 1/128, zero point 0)
  LOGISTIC    logistic_common.cc + reference_integer_ops::Logistic: the same input scaling, gemmlowp's logistic,
              output Q0.8 - 128 (TFLite's 1/256, zero point -128)
  HARD_SWISH  hard_swish_common.cc + reference_ops::HardSwish: int16 fixed point, multipliers downscaled to 16 bits
  QUANTIZE    quantize_common.cc + reference_ops::Requantize (int8 -> int8): MBQM(x - zp_in, s_in / s_out) + zp_out
The gemmlowp pieces (exp_on_negative_values, the Newton-Raphson divisions) are softmax_ref's, generalised to the
input's integer bits. tests/test_tflite_ops.py holds each table against TFLM on all 256 codes.
"""
import math

import numpy as np

from grpo_edge.errors import ExportError

from . import fixedpoint as F
from .softmax_ref import rounding_half_sum, sat_shift_left

INT32_MAX = (1 << 31) - 1
CODES = np.arange(-128, 128, dtype=np.int64)


def _wrap(x):
    return F.wrap_int32(x)


def _mul(a, b):
    return F.srdhm(a, b)


def exp_on_negative_values(a, integer_bits):
    """gemmlowp exp_on_negative_values for a FixedPoint<int32, integer_bits> input <= 0 -> Q0.31."""
    a = np.asarray(a, np.int64)
    frac = 31 - integer_bits
    one_quarter = 1 << (frac - 2)
    a_mod = _wrap((a & (one_quarter - 1)) - one_quarter)
    x = _wrap(sat_shift_left(a_mod, integer_bits) + (1 << 28))          # Rescale<0>, then + 1/8
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = F.rounding_divide_by_pot(x4, 2)
    poly = F.rounding_divide_by_pot(_wrap(_mul(_wrap(x4_over_4 + x3), 715827883) + x2), 1)
    const = 1895147668                                                  # exp(-1/8) in Q0.31
    result = _wrap(const + _mul(const, _wrap(x + poly)))
    remainder = _wrap(a_mod - a)
    for exponent, mult in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                           (2, 39332535), (3, 720401), (4, 242)):
        if integer_bits > exponent:
            bit = (remainder & (1 << (frac + exponent))) != 0
            result = np.where(bit, _mul(result, mult), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def _newton_x(a):
    """The three Newton-Raphson steps of gemmlowp's one_over_one_plus_x / one_minus_x_over_one_plus_x: Q2.29."""
    half_den = rounding_half_sum(a, INT32_MAX)
    x = _wrap(1515870810 + _mul(half_den, -1010580540))                 # 48/17 - 32/17 * d
    for _ in range(3):
        one_minus = _wrap((1 << 29) - _mul(half_den, x))
        x = _wrap(x + sat_shift_left(_mul(x, one_minus), 2))
    return x


def one_over_one_plus_x(a):
    return sat_shift_left(_newton_x(a), 1)


def one_minus_x_over_one_plus_x(a):
    return sat_shift_left(_wrap(_newton_x(a) - (1 << 29)), 2)


def fixed_logistic(a, integer_bits=4):
    """gemmlowp logistic(FixedPoint<int32, integer_bits>) -> Q0.31."""
    a = np.asarray(a, np.int64)
    pos = a > 0
    r_pos = one_over_one_plus_x(exp_on_negative_values(_wrap(-np.abs(a)), integer_bits))
    r = np.where(pos, r_pos, _wrap(INT32_MAX - r_pos))
    return np.where(a == 0, 1 << 30, r)


def fixed_tanh(a, integer_bits=4):
    """gemmlowp tanh(FixedPoint<int32, integer_bits>) -> Q0.31: exp of 2|a| (the same raw, one more integer bit)."""
    a = np.asarray(a, np.int64)
    neg = a < 0
    n = np.where(neg, a, -a)
    t = one_minus_x_over_one_plus_x(exp_on_negative_values(n, integer_bits + 1))
    return np.where(a == 0, 0, np.where(neg, _wrap(-t), t))


def _input_scaling(s_in, what):
    """TANH / LOGISTIC int8 Prepare: input_multiplier, input_left_shift, input_range_radius (kInputIntegerBits 4)."""
    real = float(np.float32(s_in)) * float(1 << 27)
    q, shift = math.frexp(real)
    mult = F.round_half_away(q * (1 << 31))
    if mult > INT32_MAX:
        raise ExportError("%s: input scale %g gives a multiplier beyond int32 in TFLM's Prepare" % (what, s_in))
    radius = math.floor(1.0 * 15 * (1 << 27) / float(1 << shift)) if shift >= 0 else \
        math.floor(1.0 * 15 * (1 << 27) * float(1 << -shift))
    return mult, shift, radius


def _sigmoid_like(x, s_in, zp_in, fn, what):
    mult, shift, radius = _input_scaling(s_in, what)
    d = np.asarray(x, np.int64) - zp_in
    q4 = F.mbqm(d, mult, shift)
    return d, radius, fn(q4)


def tanh_table(s_in, zp_in):
    d, radius, out = _sigmoid_like(CODES, s_in, zp_in, fixed_tanh, "TANH")
    y = F.clamp8(F.rounding_divide_by_pot(out, 24))
    return np.where(d <= -radius, -128, np.where(d >= radius, 127, y)).astype(np.int8)


def logistic_table(s_in, zp_in):
    d, radius, out = _sigmoid_like(CODES, s_in, zp_in, fixed_logistic, "LOGISTIC")
    y = F.clamp8(F.rounding_divide_by_pot(out, 23) - 128)
    return np.where(d <= -radius, -128, np.where(d >= radius, 127, y)).astype(np.int8)


def relu_table(s_in, zp_in, s_out, zp_out):
    m, s = F.quantize_multiplier(float(np.float32(np.float32(s_in) / np.float32(s_out))))
    y = F.mbqm(CODES - zp_in, m, s) + zp_out
    return np.clip(y, max(-128, zp_out), 127).astype(np.int8)


def relu6_table(s_in, zp_in):
    six = int(np.clip(F.round_half_away(float(np.float32(np.float32(6.0) / np.float32(s_in)))) + zp_in, -128, 127))
    return np.clip(CODES, zp_in, six).astype(np.int8)


def requantize_table(s_in, zp_in, s_out, zp_out):
    m, s = F.quantize_multiplier(float(np.float32(s_in)) / float(np.float32(s_out)))
    return F.clamp8(F.mbqm(CODES - zp_in, m, s) + zp_out).astype(np.int8)


# -- HARD_SWISH: int16 fixed point

def _srdhm16(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul on int16."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    v = ab + nudge
    q = np.where(v >= 0, v // (1 << 15), -((-v) // (1 << 15)))         # C division truncates
    return np.where((a == b) & (a == -32768), 32767, _i16(q))


def _sdhm16(a, b):
    """TFLite's SaturatingDoublingHighMul (no rounding nudge) on int16."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    q = np.where(ab >= 0, ab // (1 << 15), -((-ab) // (1 << 15)))
    return np.where((a == b) & (a == -32768), 32767, _i16(q))


def _i16(x):
    """static_cast<int16_t>: wrap to 16 bits."""
    x = np.asarray(x, np.int64) & 0xFFFF
    return np.where(x >= 0x8000, x - 0x10000, x)


def _sat_left16(v, amount):
    return np.clip(np.asarray(v, np.int64) * (1 << amount), -32768, 32767)


def _rdbpot(x, e):
    return F.rounding_divide_by_pot(np.asarray(x, np.int64), e) if e > 0 else np.asarray(x, np.int64)


def _downscale16(m32):
    if m32 >= INT32_MAX - (1 << 15):
        return 32767
    return (m32 + (1 << 15)) >> 16


def hard_swish_table(s_in, zp_in, s_out, zp_out):
    hires = np.float32(np.float32(1.0 / 128.0) * np.float32(s_in))
    reluish_scale = np.float32(np.float32(3.0) / np.float32(32768.0))
    om, oe = F.quantize_multiplier(float(np.float32(hires / np.float32(s_out))))
    if oe > 0:
        raise ExportError("HARD_SWISH: output scale %g too small for TFLM's int8 kernel (exponent %d > 0)" % (s_out, oe))
    rm, re = F.quantize_multiplier(float(np.float32(hires / reluish_scale)))
    om16, rm16 = _downscale16(om), _downscale16(rm)
    v = _i16(CODES - zp_in)
    hires_v = _i16(v * 128)
    pre_out = _srdhm16(hires_v, om16)
    r = hires_v
    if re > 0:
        r = _sat_left16(r, re - 1)
    r = _srdhm16(r, rm16)
    if re > 0:
        r = _sat_left16(r, 1)
    if re < 0:
        r = _rdbpot(r, -re)
    r = (r + (1 << 15)) >> 1
    pre = _sdhm16(r, pre_out)
    y = _i16(_rdbpot(pre, -oe) + zp_out)
    return np.clip(y, -128, 127).astype(np.int8)


def tflite_table(op, s_in, zp_in, s_out, zp_out):
    """The int8 table of TFLite operator `op` (RELU, RELU6, TANH, LOGISTIC, HARD_SWISH, QUANTIZE)."""
    if op == "RELU":
        return relu_table(s_in, zp_in, s_out, zp_out)
    if op == "RELU6":
        return relu6_table(s_in, zp_in)
    if op == "TANH":
        return tanh_table(s_in, zp_in)
    if op == "LOGISTIC":
        return logistic_table(s_in, zp_in)
    if op == "HARD_SWISH":
        return hard_swish_table(s_in, zp_in, s_out, zp_out)
    if op == "QUANTIZE":
        return requantize_table(s_in, zp_in, s_out, zp_out)
    raise ValueError("no table for %s" % op)


TABLE_OPS = ("RELU", "RELU6", "TANH", "LOGISTIC", "HARD_SWISH", "QUANTIZE")
