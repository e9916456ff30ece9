"""int8 log-softmax with TFLite's fixed-point rules (reference_integer_ops::LogSoftmax, TFLM log_softmax.cc).

Prepare: beta = 1, 5 integer bits for the scaled differences (as softmax):
  input_multiplier, input_left_shift = QuantizeMultiplierGreaterThanOne(min(s_in * 2^26, 2^31 - 1))
  reverse_multiplier, reverse_shift  = QuantizeMultiplier(2^(31 - input_left_shift) / input_multiplier)
  diff_min = -floor((2^5 - 1) * 2^26 / 2^input_left_shift)
Eval per row: d = x - max(x); the taps with d >= diff_min add exp(MBQM(d)) (Q5.26 -> Q0.31, gemmlowp
exp_on_negative_values) rescaled to Q12.19; log of that sum (Q5.26, gemmlowp-style log for x >= 1: a
power-of-two split and a rational approximation); taps with d > adjusted_diff_min (the most negative d
whose result still fits Q5.26) give RoundingDivideByPOT(MBQM(d) - log_sum, 22) + 127, the others -128.

The output has TFLite's fixed parameters, scale 16/256 and zero point 127: log-probabilities -15.9..0 in
steps of 1/16 (onnxruntime leaves LogSoftmax in float; onnx2int8 quantizes its output with exactly these).
Other output parameters are refused: the differences below Q5.26's range (about -32) are -128, which only
the fixed parameters can say truly.
"""
import numpy as np

from grpo_edge.errors import ExportError

from . import fixedpoint as R
from .softmax_ref import (INT32_MAX, INT32_MIN, clz32, exp_on_negative_values, one_over_one_plus_x,
                          rounding_half_sum, sat_shift_left)

OUTPUT_SCALE, OUTPUT_ZERO_POINT = 16.0 / 256, 127
OUTPUT_SCALE16 = 1.0 / 1024           # 16x8 (ours): Q5.26 differences -32 .. 0 at 2^-10, zero point 0


def _sat(x):
    return np.clip(np.asarray(x, np.int64), INT32_MIN, INT32_MAX)


def log_x_ge_1(x, input_bits=12, output_bits=5):
    """log(x) for a Q(input_bits) fixed-point x >= 1 -> Q(output_bits) (TFLite's
    log_x_for_x_greater_than_or_equal_to_1: x = 2^k * r, log = k log 2 + a rational approximation of log r)."""
    mul, wrap = R.srdhm, R.wrap_int32
    accum_bits = output_bits + 1
    log_2, sqrt_sqrt_half, sqrt_half = 1488522236, 1805811301, 1518500250
    alpha_n, alpha_d, alpha_i, alpha_f = 117049297, 127690142, 1057819769, 638450708
    quarter = R.rounding_divide_by_pot(536870912, accum_bits)        # 1/4 rescaled to Q(accum_bits)
    z_a = np.asarray(x, np.int64)
    hr_a = clz32(z_a)                                                 # headroom + 1
    r_a = sat_shift_left(mul(sat_shift_left(z_a, hr_a - 1), sqrt_half), 1)
    pow_a = _sat(sat_shift_left(input_bits - hr_a, 31 - accum_bits) + quarter)
    z_b = mul(z_a, sqrt_half)
    hr_b = clz32(z_b) - 1
    r_b = sat_shift_left(z_a, hr_b)
    pow_b = _sat(sat_shift_left(input_bits - hr_b, 31 - accum_bits) - quarter)
    r, z_pow = np.minimum(r_a, r_b), np.maximum(pow_a, pow_b)
    p = rounding_half_sum(r, sqrt_sqrt_half)
    q = wrap(2 * wrap(r - sqrt_sqrt_half))
    sq = mul(q, q)
    num = wrap(mul(q, r) + mul(mul(q, sq), alpha_n))
    den = wrap(mul(p, wrap(wrap(alpha_i + q) + mul(alpha_d, sq))) + mul(alpha_f, q))
    total = wrap(mul(z_pow, log_2) + mul(R.rounding_divide_by_pot(num, accum_bits), one_over_one_plus_x(den)))
    return sat_shift_left(total, accum_bits - output_bits)


def log_softmax_params(x, out, node_label="", int16=False):
    m_real = min(float(x.scale) * (1 << 26), float(INT32_MAX))
    mult, shift = R.quantize_multiplier(m_real)
    if shift < 0:
        raise ExportError("%s: log-softmax input scale %g too small for TFLite's int8 log-softmax" % (node_label, x.scale))
    rev_mult, rev_shift = R.quantize_multiplier(float(1 << (31 - shift)) / float(mult))
    radius = int(np.floor(((1 << 5) - 1) * float(1 << 26) / float(1 << shift)))
    if int16:
        # d reaches 65,535 codes: d << shift would leave int32, so the 16x8 form scales d by a 64-bit product
        # (scale16) and its radius is the real one: the last d whose Q5.26 value is at least -32
        radius = int(np.floor(32.0 * float(1 << 26) * float(1 << (31 - shift)) / float(mult)))
        if shift > 30:
            raise ExportError("%s: log-softmax input scale %g too large for the 16x8 log-softmax" % (node_label, x.scale))
        if not (np.float32(out.scale) == np.float32(OUTPUT_SCALE16) and out.zero_point == 0):
            raise ExportError("%s: a 16x8 log-softmax output must have scale 2^-10 and zero point 0, got %g / %d: "
                              "quantize with grpo-edge quantize (onnx2int8 sets them)" % (node_label, out.scale,
                                                                                         out.zero_point))
    elif not (np.float32(out.scale) == np.float32(OUTPUT_SCALE) and out.zero_point == OUTPUT_ZERO_POINT):
        raise ExportError("%s: the output must have TFLite's fixed int8 log-softmax parameters (scale 16/256, zero "
                          "point 127), got %g / %d: quantize with grpo-edge quantize (onnx2int8 sets them)"
                          % (node_label, out.scale, out.zero_point))
    return {"input_multiplier": mult, "input_left_shift": shift, "reverse_multiplier": rev_mult,
            "reverse_shift": rev_shift, "diff_min": -radius}


def scale16(d, p):
    """The 16x8 form's Q5.26 differences: round(d mult / 2^(31 - shift)) in int64 (MultiplyByQuantizedMultiplier
    would shift d left first, beyond int32 for int16 differences), saturated to int32."""
    rs = 31 - int(p["input_left_shift"])
    v = (np.asarray(d, np.int64) * int(p["input_multiplier"]) + (1 << (rs - 1))) >> rs
    return _sat(v)


def log_softmax_int16(x, p):
    """x (B, ..., N) int16 (zero point 0) -> log-softmax over the last axis, int16 at 2^-10 (ours): TFLite's
    int8 sum of exponentials and log, the differences scaled in 64 bits (scale16), and the result d - log(sum)
    in int64 rounded to 10 fractional bits and clamped (-32768 = -32: no cut-off test needed at this width)."""
    x = np.asarray(x, np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    keep = diff >= p["diff_min"]
    scaled = scale16(np.maximum(diff, p["diff_min"]), p)
    e = np.where(keep, R.rounding_divide_by_pot(exp_on_negative_values(scaled), 12), 0)
    log_sum = log_x_ge_1(R.wrap_int32(e.sum(axis=-1, keepdims=True)))
    out = R.rounding_divide_by_pot(scaled - log_sum, 26 - 10)
    return R.clamp16(np.where(keep, out, -32768))


def _mbqm_diff(d, p):
    return R.mbqm(d, p["input_multiplier"], p["input_left_shift"])


def log_softmax_int8(x, p):
    """x (B, ..., N) int8 -> log-softmax over the last axis, int8."""
    x = np.asarray(x, np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    scaled = _mbqm_diff(np.maximum(diff, p["diff_min"]), p)
    e = np.where(diff >= p["diff_min"], R.rounding_divide_by_pot(exp_on_negative_values(scaled), 12), 0)
    log_sum = log_x_ge_1(R.wrap_int32(e.sum(axis=-1, keepdims=True)))
    adjusted = np.maximum(p["diff_min"] - 1, R.mbqm(R.wrap_int32(log_sum + INT32_MIN), p["reverse_multiplier"],
                                                    p["reverse_shift"]))
    keep = diff > adjusted
    value = np.where(keep, scaled - log_sum, 0)                        # Q5.26, fits int32 where kept
    out = R.rounding_divide_by_pot(value, 31 - 5 - 4) + OUTPUT_ZERO_POINT
    return R.clamp8(np.where(keep, out, -128))
