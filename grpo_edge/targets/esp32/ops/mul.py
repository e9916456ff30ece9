"""Elementwise product of two int8 activations, one of them possibly broadcast (a squeeze-excitation gate
(1, C, 1, 1) times a feature map; two branches multiplied). TFLite MUL's int8 rule: acc = (a - za)(b - zb),
out = mbqm(acc, sa sb / sy) + zy, clamped (gx_mul in csrc/gx_kernels.h, broadcast through zero strides).
A product with a constant scalar is a table instead (ops/lut.py). NumPy reference, C emission, TFLite Micro
mapping (MUL), MACs (one per output element).
"""
import numpy as np

from grpo_edge.errors import ExportError

from .. import reference as R
from ..codegen import c_struct
from ..parse import label
from . import OpSpec, elementwise_macs


def reference(a, b, p):
    acc = R.check_int32((R.i64(a) + p["a_offset"]) * (R.i64(b) + p["b_offset"]), "mul product")
    return R.clamp8(R.mbqm(acc, p["multiplier"], p["shift"]) + p["output_offset"], p["activation_min"],
                    p["activation_max"])


def _strides(shape, out):
    """An input's strides over the output's axes (rank padded to 4), 0 where it is broadcast."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    own = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    st = [0 if shape[k] == 1 and out[k] != 1 else own[k] for k in range(len(out))]
    return [0] * (4 - len(out)) + st


def emit(em, i, op, name):
    a, g = op.attrs, em.g
    out = g.tensors[op.output].shape
    sa, sb = (_strides(g.tensors[t].shape, out) for t in op.inputs)
    em.data.append(c_struct("gx_mul_t", name, [
        ("dims", "{%s}" % ", ".join(map(str, [1] * (4 - len(out)) + list(out)))),
        ("a_stride", "{%s}" % ", ".join(map(str, sa))), ("b_stride", "{%s}" % ", ".join(map(str, sb))),
        ("a_offset", a["a_offset"]), ("b_offset", a["b_offset"]), ("mult", a["multiplier"]), ("shift", a["shift"]),
        ("out_offset", a["output_offset"]), ("act_min", a["activation_min"]), ("act_max", a["activation_max"])]))
    return "gx_mul(&%s, %s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.inputs[1]), em.ptr(op.output))


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


SPECS = [OpSpec("mul", reference, emit, tflm, elementwise_macs)]

ONNX = {}
