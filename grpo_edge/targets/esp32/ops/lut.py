"""Elementwise functions as tables: int8 lut (tanh, sigmoid, relu, requantize as 256 entries) and the
16x8 tanh (TFLM's int16 rule).

NumPy reference, C emission (gx_lut / gx_tanh16), TFLite Micro mapping (TANH / LOGISTIC + QUANTIZE,
RELU, QUANTIZE; TANH int16), MACs (one per output element).
"""
import numpy as np

from grpo_edge.errors import TargetError

from ..codegen import INT32_MAX, c_array, c_struct
from ..reference import i64
from ..tflm import REASON_TANH, nhwc
from . import OpSpec, elementwise_macs


def reference(x, p):
    """Any int8 -> int8 elementwise function as a 256-entry table indexed by x + 128."""
    table = np.asarray(p["table"], dtype=np.int8)
    return table[i64(x) + 128]


def reference16(x, p):
    from ..int16_ref import tanh_int16
    return tanh_int16(x, p)


def emit(em, i, op, name):
    p = em.p
    em.data.append("/* %s as a 256-entry table */\n" % op.attrs["function"]
                     + c_array("int8_t", "%s_t%d" % (p, i), op.attrs["table"]))
    return "gx_lut(%s_t%d, %d, %s, %s)" % (p, i, em.g.tensors[op.output].size, em.ptr(op.inputs[0]),
                                          em.ptr(op.output))


def emit16(em, i, op, name):
    """TFLM's int16 tanh: the power-of-two case (input_multiplier 0) becomes multiplier 3 << shift,
    shift 0; the rescale runs in int32 when 32768 * multiplier + rounding provably fits (wide = 0),
    else in int64 clamped to +-65535 (wide = 1)."""
    m, ls = int(op.attrs["input_multiplier"]), int(op.attrs["input_left_shift"])
    if m == 0:
        m, ls = 3 << ls, 0
    rnd = (1 << (ls - 1)) if ls > 0 else 0
    em.data.append(c_struct("gx_tanh16_t", name, [
        ("n", em.g.tensors[op.output].size), ("mult", m), ("left_shift", ls),
        ("wide", int(32768 * m + rnd > INT32_MAX)), ("table", "%s_sigmoid16" % em.p)]))
    return "gx_tanh16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    B = b.tfl.BuiltinOperator
    f = op.attrs["function"]
    x, y = b.act(op.inputs[0]), op.output
    if f in ("tanh", "sigmoid"):
        scale, zp = (1.0 / 128, 0) if f == "tanh" else (1.0 / 256, -128)
        mid = b.act("%s_fixed%d" % (f, i), nhwc(b.g.tensors[y].shape), scale, zp)
        b.op(B.TANH if f == "tanh" else B.LOGISTIC, [x], [mid])
        b.op(B.QUANTIZE, [mid], [b.act(y)])
        b.notes.append("op %d (%s): %s" % (i, f, REASON_TANH))
    elif f == "relu":
        b.op(B.RELU, [x], [b.act(y)])
    elif f == "requantize":
        b.op(B.QUANTIZE, [x], [b.act(y)])
    else:
        raise TargetError("no TFLM mapping for elementwise %s (node %r)" % (f, op.name))


def tflm16(b, i, op):
    """TANH, int16 in/out, zero point 0, output scale 2^-15 (checked by the parser)."""
    b.op(b.tfl.BuiltinOperator.TANH, [b.act(op.inputs[0])], [b.act(op.output)])


SPECS = [OpSpec("lut", reference, emit, tflm, elementwise_macs),
         OpSpec("tanh16", reference16, emit16, tflm16, elementwise_macs, int16=True)]
