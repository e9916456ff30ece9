"""Kernel parameters computed once at parse time ("Prepare" in TFLM terms) for ADD and table ops."""
import numpy as np

from . import reference as R


def add_params(a, b, out, consts=None):
    """ADD int8 parameters (add_common.cc)."""
    left_shift = 20
    twice_max = 2.0 * max(float(a.scale), float(b.scale))
    m1, s1 = R.quantize_multiplier(float(a.scale) / twice_max)
    m2, s2 = R.quantize_multiplier(float(b.scale) / twice_max)
    mo, so = R.quantize_multiplier(twice_max / ((1 << left_shift) * float(out.scale)))
    lo, hi = R.activation_range("none", out.scale, out.zero_point)
    return {"left_shift": left_shift, "input1_offset": -a.zero_point, "input2_offset": -b.zero_point,
            "input1_multiplier": m1, "input1_shift": s1, "input2_multiplier": m2, "input2_shift": s2,
            "output_multiplier": mo, "output_shift": so, "output_offset": out.zero_point,
            "activation_min": lo, "activation_max": hi, "constants": consts or {}}


def requant_table(x, out, lo, hi):
    """TFLM ReluQuantized / requantize rule as a table: zp_out + MBQM(q - zp_in, s_in / s_out), clamped."""
    m, s = R.quantize_multiplier(float(x.scale) / float(out.scale))
    q = np.arange(-128, 128, dtype=np.int64)
    v = R.mbqm(q - x.zero_point, m, s) + out.zero_point
    return R.clamp8(v, lo, hi)


def float_table(x, out, function):
    """tanh / sigmoid as a table: quantize(f(dequantize(q))) in float64, rounding half away from zero."""
    q = np.arange(-128, 128, dtype=np.float64)
    real = float(x.scale) * (q - x.zero_point)
    y = np.tanh(real) if function == "tanh" else 1.0 / (1.0 + np.exp(-real))
    v = y / float(out.scale)
    r = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return R.clamp8(r.astype(np.int64) + out.zero_point)
