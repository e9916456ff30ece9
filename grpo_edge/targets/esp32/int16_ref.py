"""The 16x8 mode (int16 activations, int8 weights): Prepare-time parameters and the NumPy reference of
the ops that have an int16 form here (fully connected, tanh, sigmoid, relu / clip / requantize; reshape and
argmax are type-agnostic). The op modules convert their own kinds through OpSpec.to_int16 (ops/add.py,
ops/mul.py, ops/pad.py, and ops/lut.py for leaky relu and the other functions as interpolated tables).

Why: a CartPole policy spends its time balancing, where its two logits are nearly tied; with int8
activations the 4 state features share one input scale (cart position dominates it, the pole angle
gets ~10 levels) and ~10% of the decisions flip. int16 activations keep the arithmetic integer, cost
2 bytes per activation (a few hundred bytes for an MLP policy) and follow TFLite Micro's 16x8 kernels
bit for bit:

- FULLY_CONNECTED int16 x int8 with an int32 bias: acc = sum(w * x) + bias in int32 (zero points 0),
  then the same double-rounding MultiplyByQuantizedMultiplier as int8, clamp to int16
  (TFLM fully_connected.cc: an int32 bias selects the int32 accumulator; to_16x8 proves the
  accumulator cannot overflow).
- TANH int16 (TFLM tanh.cc Prepare, reference/integer_ops/tanh.h): input and output zero point 0,
  output scale 2^-15; the input is rescaled so 1 LSB = 1/(3*4096) and tanh(y) = 2 sigmoid(2y) - 1 is
  read from a 256-entry sigmoid table with linear interpolation.
- RELU / CLIP / requantize int16 (requant16): out = clamp(MultiplyByQuantizedMultiplier(x, s_in / s_out)),
  TFLite's Requantize rule, the bounds quantized on the output grid with rounding half away from zero.
- ARG_MAX over int16 (ours; TFLM's ARG_MAX takes float32/int8 only): first index of the maximum.

The table below holds TFLite's sigmoid_table_uint16 values (tensorflow/lite/kernels/internal/common.h,
Apache-2.0, "sigmoid(i/24) in 0.16 format"): they are tuned for interpolation and no closed formula
gives all 256 exactly, so matching TFLM bit for bit needs the same constants.
"""
import math

import numpy as np

from grpo_edge.errors import ExportError

from . import fixedpoint as R

SIGMOID_TABLE_UINT16 = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535], dtype=np.uint32)

TANH_OUTPUT_SCALE = 2.0 ** -15
INT32_MAX = (1 << 31) - 1


def checked_log2(x: float):
    """TFLite CheckedLog2 in float32: (rounded log2, whether x is a power of two within 1e-3)."""
    l2 = np.float32(np.float32(math.log(np.float32(x))) * (np.float32(1.0) / np.float32(math.log(np.float32(2.0)))))
    r = np.float32(R.round_half_away(float(l2)))
    return int(r), bool(abs(np.float32(l2 - r)) < np.float32(1e-3))


def tanh_params(in_scale: float) -> dict:
    """TFLM tanh int16 Prepare: (input_multiplier, input_left_shift) for the sigmoid-table lookup."""
    log2r, pot = checked_log2(in_scale)
    shift = 12 + log2r                                   # (15 - kInputIntegerBits 3) + log2
    if pot and shift in (0, 1):
        return {"input_multiplier": 0, "input_left_shift": shift}
    mult, shift = float(np.float32(in_scale)) * 4096.0 * 3.0, 0
    while mult <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        mult *= 2.0
    return {"input_multiplier": int(mult), "input_left_shift": shift}


def sigmoid_params(in_scale: float) -> dict:
    """TFLM logistic int16 Prepare: like tanh's, but the power-of-two shortcut only when the shift is 0."""
    log2r, pot = checked_log2(in_scale)
    shift = 12 + log2r
    if pot and shift == 0:
        return {"input_multiplier": 0, "input_left_shift": 0}
    mult, shift = float(np.float32(in_scale)) * 4096.0 * 3.0, 0
    while mult <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        mult *= 2.0
    return {"input_multiplier": int(mult), "input_left_shift": shift}


def sigmoid_int16(x, p):
    """x int16 (zero point 0) -> sigmoid int16 at scale 2^-15 (TFLM reference/integer_ops/logistic.h): the
    same table, read at 1/(3*4096) * 2 per entry step (>> 9), interpolated, rounded back to 15 bits."""
    m, ls = int(p["input_multiplier"]), int(p["input_left_shift"])
    if m == 0:
        m, ls = 3, 0
    rnd = (1 << (ls - 1)) if ls > 0 else 0
    v = (np.asarray(x, dtype=np.int64) * m + rnd) >> ls
    a = np.abs(v)
    uh = a >> 9
    idx = np.minimum(uh, 254)
    ua = SIGMOID_TABLE_UINT16[idx].astype(np.int64)
    ub = SIGMOID_TABLE_UINT16[idx + 1].astype(np.int64)
    res = np.where(uh >= 255, np.int64(0x7FFF << 10), (ua << 9) + (a & 0x1FF) * (ub - ua))
    res = np.where(v >= 0, res + (1 << 9), (1 << (16 + 9)) - res + (1 << 9) - 1)
    return (res >> 10).astype(np.int16)


def tanh_int16(x, p):
    """x int16 (zero point 0) -> tanh int16 at scale 2^-15 (TFLM reference/integer_ops/tanh.h)."""
    m, ls = int(p["input_multiplier"]), int(p["input_left_shift"])
    if m == 0:                                           # power-of-two input scale
        m, ls = 3 << ls, 0
    rnd = (1 << (ls - 1)) if ls > 0 else 0
    v = (np.asarray(x, dtype=np.int64) * m + rnd) >> ls
    a = np.abs(v)
    uh = a >> 8
    idx = np.minimum(uh, 254)
    ua = SIGMOID_TABLE_UINT16[idx].astype(np.int64)
    ub = SIGMOID_TABLE_UINT16[idx + 1].astype(np.int64)
    res = np.where(uh >= 255, np.int64(0xFFFF << 8), (ua << 8) + (a & 0xFF) * (ub - ua))
    res = np.where(v >= 0, res - (1 << 23) + (1 << 7), -res + (1 << 23) + (1 << 7) - 1)
    return (res >> 8).astype(np.int16)


def fully_connected16(x, p):
    """x (B, IN) int16, weights (OUT, IN) int8, bias (OUT,) int32 -> (B, OUT) int16: acc in int32,
    double-rounding requantization per output channel (or, with attrs requant64, a .tflite's int64 bias:
    TFLite's int64 MultiplyByQuantizedMultiplier), clamp."""
    acc = R.check_int32(R.i64(x) @ R.i64(p["weights"]).T + R.i64(p["bias"]), "accumulator")
    out = requantize16(acc, p, (1, -1))
    return R.clamp16(out, p["activation_min"], p["activation_max"])


def requantize16(acc, p, shape):
    """The 16x8 accumulator's per-channel requantization (multiplier / shift reshaped to `shape`): TFLite's int32
    rule, or with p["requant64"] its int64 one (the multiplier rounded to 16 bits, one rounding shift)."""
    m, s = (R.i64(p[k]).reshape(shape) for k in ("multiplier", "shift"))
    if not p.get("requant64"):
        return R.mbqm(acc, m, s)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - s
    return (R.i64(acc) * reduced + (np.int64(1) << (total - 1))) >> total


def to_16x8(g) -> None:
    """Turn a parsed graph with int16 activations into 16x8 ops in place, or fail naming the op."""
    from .ops import OPS
    int8_ok = {op.output for op in g.ops if op.kind == "argmax"}
    int8_ok |= {n for op in g.ops for n in op.attrs.get("constants", {})}
    for name, t in g.tensors.items():
        if t.dtype == "int8" and name not in int8_ok and any(name in op.inputs or name == op.output for op in g.ops):
            raise ExportError("tensor %r is int8 in a model with int16 activations: mixed int8/int16 activations "
                              "are not supported (quantize every activation to int16, or none)" % name)
    for op in g.ops:
        if op.kind == "fc":
            _fc16(g, op)
        elif op.kind == "lut" and op.attrs.get("function") == "tanh":
            x, y = g.tensors[op.inputs[0]], g.tensors[op.output]
            if y.zero_point != 0 or not np.isclose(float(y.scale), TANH_OUTPUT_SCALE, rtol=1e-6, atol=0):
                raise ExportError("Tanh node %r: an int16 tanh output needs scale 2^-15 and zero point 0 (TFLite "
                                  "16x8), got %g / %d: quantize with activations=int16 (onnx2int8 sets it)"
                                  % (op.name, y.scale, y.zero_point))
            op.kind = "tanh16"
            op.attrs = tanh_params(x.scale)
        elif op.kind == "lut" and op.attrs.get("function") == "sigmoid":
            x, y = g.tensors[op.inputs[0]], g.tensors[op.output]
            if y.zero_point != 0 or not np.isclose(float(y.scale), TANH_OUTPUT_SCALE, rtol=1e-6, atol=0):
                raise ExportError("Sigmoid node %r: an int16 sigmoid output needs scale 2^-15 and zero point 0 "
                                  "(TFLite 16x8), got %g / %d: quantize with activations=int16 (onnx2int8 sets "
                                  "it)" % (op.name, y.scale, y.zero_point))
            op.kind = "sigmoid16"
            op.attrs = sigmoid_params(x.scale)
        elif op.kind == "lut" and (op.attrs.get("function") in ("relu", "clip", "requantize")
                                   or (op.attrs.get("function") == "scale" and op.attrs["k"] > 0)):
            _requant16(g, op)
        elif OPS[op.kind].to_int16 is not None:      # the op module converts its own kind (ops/add.py, the
            OPS[op.kind].to_int16(g, op)              # other tables of ops/lut.py, ...)
        elif not OPS[op.kind].int16:
            what = op.attrs.get("function", op.kind) if op.kind == "lut" else op.kind
            raise ExportError("op %s at node %r has no int16 (16x8) kernel here; with int16 activations the generator "
                              "supports fully connected, add, sub, mul, pad, the elementwise functions (tanh, sigmoid, "
                              "relu, clip, leaky relu and the others as tables), reshape/flatten and argmax (use "
                              "int8 activations for this model)" % (what, op.name))


def _requant16(g, op):
    """A relu, clip, requantize or positive constant scale (Mul / Div) between int16 tensors (zero points 0):
    the rescale k s_in / s_out as a quantized multiplier and the bounds on the output's int16 grid
    (CalculateActivationRangeQuantized)."""
    x, y = g.tensors[op.inputs[0]], g.tensors[op.output]
    k = float(op.attrs["k"]) if op.attrs["function"] == "scale" else 1.0
    m, shift = R.quantize_multiplier(k * float(x.scale) / float(y.scale))
    lo, hi = op.attrs.get("bounds", (None, None))

    def q(f):
        return R.round_half_away(float(np.float32(f) / np.float32(y.scale)))
    op.kind = "requant16"
    op.attrs = {"function": op.attrs["function"], "multiplier": m, "shift": shift,
                "act_min": y.qmin if lo is None else max(y.qmin, q(lo)),
                "act_max": y.qmax if hi is None else min(y.qmax, q(hi))}


def _fc16(g, op):
    a = op.attrs
    w = a["weights"].astype(np.int64)
    bound = int(np.abs(a["bias"].astype(np.int64)).max(initial=0)) + 32768 * int(np.abs(w).sum(axis=1).max(initial=0))
    if bound > INT32_MAX:
        raise ExportError("fully connected node %r: the int16 x int8 accumulator could reach %d, beyond int32 "
                          "(%d inputs): not supported with int16 activations" % (op.name, bound, w.shape[1]))
    out = g.tensors[op.output]
    op.kind = "fc16"
    a["input_offset"] = 0
    a["output_offset"] = 0
    a["activation_min"], a["activation_max"] = out.qmin, out.qmax
