"""NumPy int8 (and 16x8) reference of every kernel, following TFLite / TFLite Micro integer rules bit for bit.

Arithmetic mode (pinned): DOUBLE rounding, i.e. TFLM's default MultiplyByQuantizedMultiplier
(SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT). TFLITE_SINGLE_ROUNDING is not used.
See /work/shared/notes/int8-arithmetic.md and docs/esp32.md for the rules and their sources.

Every kernel takes a batch: activations are int8 arrays whose first axis is the batch (B, ...),
in the ONNX layout (NCHW for images). Accumulators are computed in int64 and checked to fit int32,
so an overflow that would be undefined behaviour in C is reported instead of silently wrapped.
"""
import numpy as np

from .fixedpoint import (INT32_MAX, INT32_MIN, check_int32 as _check_int32, clamp8, clamp16, f32,  # noqa: F401
                         i64 as _i64, mbqm, quantize_multiplier, round_f32, round_half_away,
                         rounding_divide_by_pot, srdhm, wrap_int32)


def quantize(x, scale, zero_point, dtype="int8"):
    """QUANTIZE: clamp(round_half_away(x / scale) + zp) in float32 like TFLite; int8 or int16."""
    v = np.asarray(x, dtype=np.float32) / np.float32(scale)
    v = np.clip(v, -1e6, 1e6)
    q = round_f32(v).astype(np.int64) + zero_point
    return clamp16(q) if str(dtype) == "int16" else clamp8(q)


def dequantize(q, scale, zero_point):
    return (np.asarray(q, dtype=np.float32) - np.float32(zero_point)) * np.float32(scale)


def activation_range(kind, scale, zero_point, lo=None, hi=None):
    """CalculateActivationRangeQuantized: the int8 clamp of a fused none / relu / relu6 / clip."""
    def q(f):
        return zero_point + round_half_away(float(np.float32(f) / np.float32(scale)))
    if kind == "none":
        return -128, 127
    if kind == "relu":
        return max(-128, q(0.0)), 127
    if kind == "relu6":
        return max(-128, q(0.0)), min(127, q(6.0))
    if kind == "clip":
        amin = -128 if lo is None else max(-128, q(lo))
        amax = 127 if hi is None else min(127, q(hi))
        return amin, amax
    raise ValueError("unknown activation %r" % kind)


# ----------------------------------------------------------------------------- kernels

def _requantize(acc, p, channel_axis):
    """acc (int64) -> int8 with per-channel multiplier/shift along channel_axis."""
    acc = _check_int32(acc, "accumulator")
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    m = _i64(p["multiplier"]).reshape(shape)
    s = _i64(p["shift"]).reshape(shape)
    out = mbqm(acc, m, s) + p["output_offset"]
    return clamp8(out, p["activation_min"], p["activation_max"])


def fully_connected(x, p):
    """x (B, IN) int8; weights (OUT, IN) int8; bias (OUT,) int32 -> (B, OUT) int8.

    acc = sum(w * (x + input_offset)) + bias (reference/integer_ops/fully_connected.h).
    """
    xo = _i64(x) + p["input_offset"]                         # (B, IN)
    acc = xo @ _i64(p["weights"]).T + _i64(p["bias"])        # (B, OUT)
    return _requantize(acc, p, 1)


def conv2d(x, p):
    """x (B, C, H, W) int8, weights (OC, C/group, KH, KW) -> (B, OC, OH, OW).

    Grouped convolution covers depthwise (group == C). Taps in the padding are skipped, which is
    the same as x == -input_offset there, so the input is padded with that value.
    """
    B, C, H, W = x.shape
    w = _i64(p["weights"])
    OC, Cg, KH, KW = w.shape
    sh, sw = p["strides"]
    dh, dw = p["dilations"]
    pt, pl, pb, pr = p["pads"]
    G = p["group"]
    xo = np.zeros((B, C, H + pt + pb, W + pl + pr), dtype=np.int64)
    xo[:, :, pt:pt + H, pl:pl + W] = _i64(x) + p["input_offset"]
    OH = (H + pt + pb - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pl + pr - dw * (KW - 1) - 1) // sw + 1
    # patches (B, C, OH, OW, KH, KW)
    patches = np.empty((B, C, OH, OW, KH, KW), dtype=np.int64)
    for ky in range(KH):
        for kx in range(KW):
            y0, x0 = ky * dh, kx * dw
            patches[:, :, :, :, ky, kx] = xo[:, :, y0:y0 + sh * (OH - 1) + 1:sh, x0:x0 + sw * (OW - 1) + 1:sw]
    OCg = OC // G
    acc = np.empty((B, OC, OH, OW), dtype=np.int64)
    for g in range(G):
        pg = patches[:, g * Cg:(g + 1) * Cg]                  # (B, Cg, OH, OW, KH, KW)
        wg = w[g * OCg:(g + 1) * OCg]                         # (OCg, Cg, KH, KW)
        acc[:, g * OCg:(g + 1) * OCg] = np.einsum("bcyxij,ocij->boyx", pg, wg)
    acc += _i64(p["bias"]).reshape(1, OC, 1, 1)
    return _requantize(acc, p, 1)


def add(a, b, p):
    """ADD int8 (add_common.cc): inputs shifted left by 20, rescaled to 2*max(s1, s2), summed, rescaled.

    b may be broadcast (numpy rules), e.g. a constant per-feature vector.
    """
    a1 = wrap_int32((_i64(a) + p["input1_offset"]) << p["left_shift"])
    b1 = wrap_int32((_i64(b) + p["input2_offset"]) << p["left_shift"])
    s1 = mbqm(a1, p["input1_multiplier"], p["input1_shift"])
    s2 = mbqm(b1, p["input2_multiplier"], p["input2_shift"])
    raw = _check_int32(s1 + s2, "add sum")
    out = mbqm(raw, p["output_multiplier"], p["output_shift"]) + p["output_offset"]
    return clamp8(out, p["activation_min"], p["activation_max"])


def lut(x, p):
    """Any int8 -> int8 elementwise function as a 256-entry table indexed by x + 128."""
    table = np.asarray(p["table"], dtype=np.int8)
    return table[_i64(x) + 128]


def _pool_windows(x, p, pad_value):
    B, C, H, W = x.shape
    KH, KW = p["kernel"]
    sh, sw = p["strides"]
    pt, pl, pb, pr = p["pads"]
    OH = (H + pt + pb - KH) // sh + 1
    OW = (W + pl + pr - KW) // sw + 1
    xp = np.full((B, C, H + pt + pb, W + pl + pr), pad_value, dtype=np.int64)
    xp[:, :, pt:pt + H, pl:pl + W] = x
    valid = np.zeros((H + pt + pb, W + pl + pr), dtype=np.int64)
    valid[pt:pt + H, pl:pl + W] = 1
    win = np.empty((B, C, OH, OW, KH, KW), dtype=np.int64)
    cnt = np.zeros((OH, OW), dtype=np.int64)
    for ky in range(KH):
        for kx in range(KW):
            win[..., ky, kx] = xp[:, :, ky:ky + sh * (OH - 1) + 1:sh, kx:kx + sw * (OW - 1) + 1:sw]
            cnt += valid[ky:ky + sh * (OH - 1) + 1:sh, kx:kx + sw * (OW - 1) + 1:sw]
    return win, cnt


def max_pool(x, p):
    """MAX_POOL_2D int8: max over the valid taps, then the activation clamp (same in/out params)."""
    win, _ = _pool_windows(_i64(x), p, -(1 << 20))
    return clamp8(win.max(axis=(4, 5)), p["activation_min"], p["activation_max"])


def mean_params(s_in, s_out, count):
    """MEAN int8 (reference_ops::QuantizedMeanOrSum): QuantizeMultiplier(s_in / s_out) with 1/count
    folded in: shift_n = min(floor(log2(count)), 32, 31 + shift); multiplier = (m << shift_n) // count."""
    m, s = quantize_multiplier(float(s_in) / float(s_out))
    n = min(int(count).bit_length() - 1, 32, 31 + s)
    return int((m << n) // count), s - n


def avg_pool(x, p):
    """Average pooling, two rules (chosen at parse time from the quantization parameters):

    - "round_div" (AVERAGE_POOL_2D int8, same in/out params): sum of raw q over valid taps,
      divided by the tap count rounding half away from zero (C integer division).
    - "mean" (MEAN int8, any in/out params, no padding): (sum of q - zp_in * count) times the
      multiplier/shift from mean_params, + zp_out.
    """
    win, cnt = _pool_windows(_i64(x), p, 0)
    acc = win.sum(axis=(4, 5))                                # (B, C, OH, OW)
    if p["mode"] == "round_div":
        half = cnt // 2
        num = np.where(acc > 0, acc + half, acc - half)
        q = np.where(num >= 0, num // cnt, -((-num) // cnt))  # truncate toward zero
        return clamp8(q, p["activation_min"], p["activation_max"])
    shifted = _check_int32(acc - p["input_zero_point"] * p["count"], "mean sum")
    out = mbqm(shifted, p["mean_multiplier"], p["mean_shift"]) + p["output_offset"]
    return clamp8(out, p["activation_min"], p["activation_max"])


def fully_connected16(x, p):
    from .int16_ref import fully_connected16
    return fully_connected16(x, p)


def tanh16(x, p):
    from .int16_ref import tanh_int16
    return tanh_int16(x, p)


def argmax(x, p):
    """ARG_MAX over the last axis; ties go to the first index. Output stored as int8 (<128 classes)."""
    return np.argmax(_i64(x), axis=-1).astype(np.int8).reshape(x.shape[0], 1)


# ----------------------------------------------------------------------------- softmax (TFLite int8)

def softmax(x, p):
    from .softmax_ref import softmax_int8
    return softmax_int8(x, p)


# ----------------------------------------------------------------------------- graph

def run(graph, x, keep=False):
    """Run an IR graph on a batch of int8 inputs x (B, *input_shape[1:]). Returns the output
    (B, *output_shape[1:]), or every tensor by name when keep=True."""
    x = np.asarray(x)
    want = graph.tensors[graph.input].np_dtype
    if x.dtype != want:
        raise TypeError("reference input must be %s, got %s" % (want, x.dtype))
    in_shape = tuple(graph.tensors[graph.input].shape[1:])
    if tuple(x.shape[1:]) != in_shape:
        raise ValueError("input shape %s does not match the model's %s" % (x.shape[1:], in_shape))
    vals = {graph.input: x}
    B = x.shape[0]
    for op in graph.ops:
        args = [vals[n] if n in vals else _const(op, n) for n in op.inputs]
        y = KERNELS[op.kind](*args, op.attrs)
        vals[op.output] = y.reshape((B,) + tuple(graph.tensors[op.output].shape[1:]))
    return vals if keep else vals[graph.output]


def _const(op, name):
    return op.attrs["constants"][name]


def _reshape(x, p):
    return x


KERNELS = {
    "fc": fully_connected,
    "fc16": fully_connected16,
    "tanh16": tanh16,
    "conv": conv2d,
    "add": lambda a, b, p: add(a, b, p),
    "lut": lut,
    "maxpool": max_pool,
    "avgpool": avg_pool,
    "reshape": _reshape,
    "argmax": argmax,
    "softmax": softmax,
}
