"""Elementwise product of two int8 activations, one of them possibly broadcast (a squeeze-excitation gate
(1, C, 1, 1) times a feature map; two branches multiplied). TFLite MUL's int8 rule: acc = (a - za)(b - zb),
out = mbqm(acc, sa sb / sy) + zy, clamped (gx_mul in csrc/gx_kernels.h, broadcast through zero strides).
A product with a constant scalar is a table instead (ops/lut.py). NumPy reference, C emission, TFLite Micro
mapping (MUL), MACs (one per output element). The 16x8 form (mul16) is TFLM's MUL at int16: zero points 0,
the same multiplier, an int16 clamp.
"""
import numpy as np

from grpo_edge.errors import ExportError

from .. import reference as R
from ..codegen import c_struct
from ..parse import label
from . import OpSpec, elementwise_macs


def reference(a, b, p, clamp=R.clamp8):
    acc = R.check_int32((R.i64(a) + p["a_offset"]) * (R.i64(b) + p["b_offset"]), "mul product")
    return clamp(R.mbqm(acc, p["multiplier"], p["shift"]) + p["output_offset"], p["activation_min"],
                 p["activation_max"])


def reference16(a, b, p):
    """MUL 16x8: the int8 rule with zero points 0 and an int16 clamp (TFLM's MUL at int16)."""
    return reference(a, b, p, clamp=R.clamp16)


def to_mul16(g, op):
    """The int8 mul of two int16 activations (zero points 0): the same multiplier, the int16 range."""
    op.kind = "mul16"
    op.attrs.update(a_offset=0, b_offset=0, output_offset=0, activation_min=-32768, activation_max=32767)


def _strides(shape, out):
    """An input's strides over the output's axes (rank padded to 4), 0 where it is broadcast."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    own = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    st = [0 if shape[k] == 1 and out[k] != 1 else own[k] for k in range(len(out))]
    return [0] * (4 - len(out)) + st


def emit16(em, i, op, name):
    return emit(em, i, op, name, kernel="gx_mul16")


def emit(em, i, op, name, kernel="gx_mul"):
    a, g = op.attrs, em.g
    out = g.tensors[op.output].shape
    sa, sb = (_strides(g.tensors[t].shape, out) for t in op.inputs)
    em.data.append(c_struct("gx_mul_t", name, [
        ("dims", "{%s}" % ", ".join(map(str, [1] * (4 - len(out)) + list(out)))),
        ("a_stride", "{%s}" % ", ".join(map(str, sa))), ("b_stride", "{%s}" % ", ".join(map(str, sb))),
        ("a_offset", a["a_offset"]), ("b_offset", a["b_offset"]), ("mult", a["multiplier"]), ("shift", a["shift"]),
        ("out_offset", a["output_offset"]), ("act_min", a["activation_min"]), ("act_max", a["activation_max"])]))
    return "%s(&%s, %s, %s, %s)" % (kernel, name, em.ptr(op.inputs[0]), em.ptr(op.inputs[1]), em.ptr(op.output))


def tflm(b, i, op):
    b.op(b.tfl.BuiltinOperator.MUL, [b.act(op.inputs[0]), b.act(op.inputs[1])], [b.act(op.output)],
         b.tfl.BuiltinOptions.MulOptions, b.tfl.MulOptionsT())


def product_params(p, node, a, b) -> dict:
    """The parameters of a product of two int8 activations a, b into node's output (this Mul, a MatMul):
    their offsets, the multiplier sa sb / sy, the output's offset and range."""
    _, scale, zp = p.output_q(node)
    m, s = R.quantize_multiplier(float(a.scale) * float(b.scale) / float(scale))
    lo, hi = R.activation_range("none", scale, zp)
    return {"a_offset": -a.zero_point, "b_offset": -b.zero_point, "multiplier": m, "shift": s, "output_offset": zp,
            "activation_min": lo, "activation_max": hi}


def from_activations(p, node):
    """lut.from_mul hands over a Mul of two activations."""
    a, b = (p.tensors[p.act_input(node, k)] for k in (0, 1))
    try:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ExportError("%s: Mul of shapes %s and %s does not broadcast" % (label(node), a.shape, b.shape))
    if len(shape) > 4 or shape[0] != 1:
        raise ExportError("%s: Mul to a %s tensor (rank 4 at most, batch 1)" % (label(node), shape))
    p.add_op("mul", node, [a.name, b.name], shape, product_params(p, node, a, b))


SPECS = [OpSpec("mul", reference, emit, tflm, elementwise_macs, to_int16=to_mul16),
         OpSpec("mul16", reference16, emit16, tflm, elementwise_macs, int16=True)]

ONNX = {}
