"""Fully connected: int8 (fc) and 16x8 (fc16).

NumPy reference (TFLite integer_ops/fully_connected.h), C emission (gx_fc / gx_fc16 in
csrc/gx_kernels*.h), TFLite Micro mapping (FULLY_CONNECTED), MACs.
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..codegen import INT32_MAX, c_requant, c_struct
from ..reference import i64, requantize
from . import OpSpec


def reference(x, p):
    """x (B, IN) int8; weights (OUT, IN) int8; bias (OUT,) int32 -> (B, OUT) int8.

    acc = sum(w * (x + input_offset)) + bias (reference/integer_ops/fully_connected.h).
    """
    xo = i64(x) + p["input_offset"]                         # (B, IN)
    acc = xo @ i64(p["weights"]).T + i64(p["bias"])        # (B, OUT)
    return requantize(acc, p, 1)


def reference16(x, p):
    from ..int16_ref import fully_connected16
    return fully_connected16(x, p)


def emit(em, i, op, name):
    a, p = op.attrs, em.p
    w = a["weights"].astype(np.int64)
    OUT, IN = w.shape
    bias = a["bias"].astype(np.int64)
    folded = bias + a["input_offset"] * w.sum(axis=1)
    fold = int(np.abs(bias).max(initial=0)) + 2 * 128 * 128 * IN < INT32_MAX
    em.arrays(i, a, a["weights"], folded if fold else bias)
    em.data.append(c_struct("gx_fc_t", name, [
        ("n_in", IN), ("n_out", OUT), ("in_offset", 0 if fold else a["input_offset"]),
        ("weights", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a))]))
    return "gx_fc(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def emit16(em, i, op, name):
    """int16 x int8 with an int32 bias and accumulator (to_16x8 proved it cannot overflow; checked
    again here for hand-made graphs), double-rounding requantization, clamp; no offsets."""
    a, p = op.attrs, em.p
    w = a["weights"].astype(np.int64)
    OUT, IN = w.shape
    bound = int(np.abs(a["bias"].astype(np.int64)).max(initial=0)) + 32768 * int(np.abs(w).sum(axis=1).max(initial=0))
    if bound > INT32_MAX:
        raise ExportError("%s: int16 x int8 accumulator could overflow int32 (%d inputs)" % (op.name, IN))
    em.arrays(i, a, a["weights"], a["bias"])
    em.data.append(c_struct("gx_fc16_t", name, [
        ("n_in", IN), ("n_out", OUT), ("weights", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a, False))]))
    return "gx_fc16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    """FULLY_CONNECTED; fc16: int16 in/out via act(); the INT32 bias picks TFLM's int32 accumulator."""
    tfl, a = b.tfl, op.attrs
    wt = b.const(a["weights"], "w%d" % i, tfl.TensorType.INT8, a["weight_scales"], 0)
    bt = b.bias(i, op)
    b.op(tfl.BuiltinOperator.FULLY_CONNECTED, [b.act(op.inputs[0]), wt, bt], [b.act(op.output)],
            tfl.BuiltinOptions.FullyConnectedOptions, tfl.FullyConnectedOptionsT())


def macs(op, tensors):
    return int(op.attrs["weights"].size)


SPECS = [OpSpec("fc", reference, emit, tflm, macs),
         OpSpec("fc16", reference16, emit16, tflm, macs, int16=True)]
