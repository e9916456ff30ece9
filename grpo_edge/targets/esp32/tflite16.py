"""16x8 .tflite models (int16 activations, zero point 0; int8 weights; int32 or int64 biases): the graph the
TFLite front end read with TFLite's int8 op kinds, lowered in place to the compiler's 16x8 kinds, keeping TFLite
Micro's int16 arithmetic exactly.

    lower_16x8(graph, "kws16.tflite")       # ExportError (one line, every operator at fault) when it cannot

What TFLM computes at int16, and how each kind here computes the same numbers:
  FULLY_CONNECTED, CONV_2D,   An int64 bias (what TensorFlow's converter writes in 16x8 mode): TFLM sums in int64
  DEPTHWISE_CONV_2D           and applies the int64 MultiplyByQuantizedMultiplier (the multiplier rounded to 16
                              bits, one rounding shift: gx_mbqm64). Here the sum runs in int32 when |bias| + 32768
                              * sum |w| fits int32 for every output channel (it then equals the int64 sum exactly)
                              and the int64 rule is applied to it ("requant64"); a layer whose bound does not fit
                              is refused, named. (An int32 bias in a 16x8 file is refused by the front end: TFLM's
                              int16 kernels gave other numbers than TFLite's int32-bias rule on such files.)
  ADD                         add_common.cc with left_shift 15 (ops/add.py add_params), the fused clamp at int16
  AVERAGE_POOL_2D, MAX_POOL_2D  the int8 rules over the int16 range (ops/pool.py)
  SOFTMAX                     SoftmaxInt16 (the exp and 1 / (1 + x) tables; output 1/32768, zero point 0)
  TANH, LOGISTIC              TFLM's int16 kernels (int16_ref.py tanh_int16 / sigmoid_int16; output 2^-15)
  RESHAPE, TRANSPOSE, PAD     no arithmetic (reshape is type-agnostic; transpose16, pad16)
Fused activations are CalculateActivationRangeQuantized on the int16 grid (the front end computed them so).
ESP-NN has no 16x8 kernels: these models are compiled for the NCHW kernels on every chip.
"""
import numpy as np

from grpo_edge.errors import ExportError

INT32_MAX = (1 << 31) - 1
TANH_OUTPUT_SCALE = 2.0 ** -15


def _accumulator_bound(op):
    """Per output channel: the largest |partial sum| of bias + sum(w x) over int16 inputs."""
    a = op.attrs
    w = np.abs(a["weights"].astype(np.int64).reshape(a["weights"].shape[0], -1)).sum(axis=1)
    return np.abs(a["bias"].astype(np.int64)) + 32768 * w


def _weighted(g, op, kind):
    a = op.attrs
    bound = _accumulator_bound(op)
    if int(bound.max(initial=0)) > INT32_MAX:
        c = int(bound.argmax())
        raise ExportError("output channel %d could accumulate %d, beyond int32 (|bias| + 32768 x sum |w| over %d "
                          "taps): int64 accumulators are not compiled yet"
                          % (c, int(bound[c]), a["weights"][0].size))
    a["bias"] = a["bias"].astype(np.int32)              # exact: each |bias| is within the bound
    a["requant64"] = bool(a.pop("bias64", False))
    a["input_offset"] = a["output_offset"] = 0
    op.kind = kind


def _fc(g, op):
    _weighted(g, op, "fc16")


def _conv(g, op):
    _weighted(g, op, "conv16")


def _add(g, op):
    from .ops.add import to_add16
    lo, hi = op.attrs["activation_min"], op.attrs["activation_max"]
    to_add16(g, op)
    op.attrs["activation_min"], op.attrs["activation_max"] = lo, hi


def _pool(g, op):
    from .ops.pool import to_pool16
    lo, hi = op.attrs["activation_min"], op.attrs["activation_max"]
    if op.attrs.get("mode") == "mean":
        raise ExportError("int16 MEAN is not compiled yet")
    to_pool16(g, op)
    op.attrs["activation_min"], op.attrs["activation_max"] = lo, hi


def _softmax(g, op):
    from .ops.softmax import _softmax16_params
    from .ir import TensorInfo
    x, out = g.tensors[op.inputs[0]], g.tensors[op.output]
    scaled = TensorInfo(x.name, x.shape, op.attrs["beta_scale"], 0, "int16")
    op.kind, op.attrs = "softmax16", _softmax16_params(scaled, out, op.name)


def _lut(g, op):
    from .int16_ref import sigmoid_params, tanh_params
    fn = op.attrs.get("function")
    if fn not in ("tanh", "logistic"):
        raise ExportError("int16 %s is not compiled yet (int16 TANH and LOGISTIC are)" % fn.upper())
    x, y = g.tensors[op.inputs[0]], g.tensors[op.output]
    if y.zero_point != 0 or not np.isclose(float(y.scale), TANH_OUTPUT_SCALE, rtol=1e-6, atol=0):
        raise ExportError("an int16 %s output needs scale 2^-15 and zero point 0 (TFLM's), got %g / %d"
                          % (fn.upper(), y.scale, y.zero_point))
    op.kind = "tanh16" if fn == "tanh" else "sigmoid16"
    op.attrs = tanh_params(x.scale) if fn == "tanh" else sigmoid_params(x.scale)


def _own_rule(g, op):
    from .ops import OPS
    OPS[op.kind].to_int16(g, op)


LOWER = {"fc": _fc, "conv": _conv, "add": _add, "avgpool": _pool, "maxpool": _pool, "softmax": _softmax,
         "lut": _lut, "transpose": _own_rule, "pad": _own_rule, "reshape": None}


def lower_16x8(g, fname) -> None:
    """Lower every op of a graph with int16 activations to its 16x8 kind in place; mixed int8 / int16
    activations and ops without a 16x8 form are refused, all of them in one line."""
    int8 = sorted(n for n, t in g.tensors.items() if t.dtype == "int8"
                  and any(n in op.inputs or n == op.output for op in g.ops))
    if int8:
        raise ExportError("%s mixes int8 and int16 activations (%s is int8): the compiler takes a model quantized "
                          "all in int8 or all in 16x8" % (fname, ", ".join(repr(n) for n in int8[:3])))
    problems = []
    for op in g.ops:
        rule = LOWER.get(op.kind, False)
        if rule is None:
            continue
        try:
            if rule is False:
                raise ExportError("no 16x8 form (%s)" % op.kind)
            rule(g, op)
        except ExportError as e:
            problems.append("%s: %s" % (op.name, e))
    if problems:
        raise ExportError("%d operator%s of %s (16x8) cannot be compiled for the ESP32: %s"
                          % (len(problems), "" if len(problems) == 1 else "s", fname, "; ".join(problems)))
