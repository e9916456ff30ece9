"""NumPy int8 (and 16x8) reference of every kernel, following TFLite / TFLite Micro integer rules bit for bit.

Arithmetic mode (pinned): DOUBLE rounding, i.e. TFLM's default MultiplyByQuantizedMultiplier
(SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT). TFLITE_SINGLE_ROUNDING is not used.
docs/esp32.md lists the rules and their sources (TFLite's reference kernels).

Every kernel takes a batch: activations are int8 arrays whose first axis is the batch (B, ...),
in the ONNX layout (NCHW for images). Accumulators are computed in int64 and checked to fit int32,
so an overflow that would be undefined behaviour in C is reported instead of silently wrapped.
"""
import numpy as np

from .fixedpoint import (INT32_MAX, INT32_MIN, check_int32, clamp8, clamp16, f32,  # noqa: F401
                         i64, mbqm, quantize_multiplier, round_f32, round_half_away,
                         rounding_divide_by_pot, srdhm, wrap_int32)


def quantize(x, scale, zero_point, dtype="int8"):
    """QUANTIZE: clamp(round_half_away(x / scale) + zp) in float32 like TFLite; int8 or int16."""
    v = np.asarray(x, dtype=np.float32) / np.float32(scale)
    v = np.clip(v, -1e6, 1e6)
    q = round_f32(v).astype(np.int64) + zero_point
    return clamp16(q) if str(dtype) == "int16" else clamp8(q)


def input_codes(t, x):
    """What the model's input tensor t holds for inputs x: their QUANTIZE codes, or for token ids (the input
    of an embedding, t.limit rows) the ids themselves as int32."""
    if t.limit:
        return np.asarray(x).astype(np.int32)
    return quantize(x, t.scale, t.zero_point, t.dtype)


def dequantize(q, scale, zero_point):
    return (np.asarray(q, dtype=np.float32) - np.float32(zero_point)) * np.float32(scale)


def activation_range(kind, scale, zero_point, lo=None, hi=None, qmin=-128, qmax=127):
    """CalculateActivationRangeQuantized: the clamp of a fused none / relu / relu6 / clip on the output's grid
    (int8 by default; qmin / qmax -32768 / 32767 for an int16 output)."""
    def q(f):
        return zero_point + round_half_away(float(np.float32(f) / np.float32(scale)))
    if kind == "none":
        return qmin, qmax
    if kind == "relu":
        return max(qmin, q(0.0)), qmax
    if kind == "relu6":
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if kind == "clip":
        amin = qmin if lo is None else max(qmin, q(lo))
        amax = qmax if hi is None else min(qmax, q(hi))
        return amin, amax
    raise ValueError("unknown activation %r" % kind)


# ----------------------------------------------------------------------------- kernels

def requantize(acc, p, channel_axis):
    """acc (int64) -> int8 with per-channel multiplier/shift along channel_axis."""
    acc = check_int32(acc, "accumulator")
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    m = i64(p["multiplier"]).reshape(shape)
    s = i64(p["shift"]).reshape(shape)
    out = mbqm(acc, m, s) + p["output_offset"]
    return clamp8(out, p["activation_min"], p["activation_max"])


def nhwc_aware(fn):
    """An NCHW kernel reference that also takes ops marked layout "nhwc" (a .tflite's images for ESP-NN, held
    as TFLite holds them): their input is transposed to NCHW, the result back."""
    def wrapped(x, p, *args, **kw):
        if p.get("layout") != "nhwc":
            return fn(x, p, *args, **kw)
        y = fn(np.transpose(x, (0, 3, 1, 2)), p, *args, **kw)
        return np.transpose(y, (0, 2, 3, 1))
    wrapped.__doc__, wrapped.__name__ = fn.__doc__, fn.__name__
    return wrapped


def pool_windows(x, p, pad_value):
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


def mean_params(s_in, s_out, count):
    """MEAN int8 (reference_ops::QuantizedMeanOrSum): QuantizeMultiplier(s_in / s_out) with 1/count
    folded in: shift_n = min(floor(log2(count)), 32, 31 + shift); multiplier = (m << shift_n) // count."""
    m, s = quantize_multiplier(float(s_in) / float(s_out))
    n = min(int(count).bit_length() - 1, 32, 31 + s)
    return int((m << n) // count), s - n


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
    from .ops import OPS
    vals = {graph.input: x}
    B = x.shape[0]
    for op in graph.ops:
        args = [vals[n] if n in vals else _const(op, n) for n in op.inputs]
        y = OPS[op.kind].reference(*args, op.attrs)
        vals[op.output] = y.reshape((B,) + tuple(graph.tensors[op.output].shape[1:]))
    return vals if keep else vals[graph.output]


def _const(op, name):
    return op.attrs["constants"][name]


