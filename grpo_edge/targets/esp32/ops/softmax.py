"""SOFTMAX int8, TFLite's fixed-point rules (softmax_ref.py holds the arithmetic).

NumPy reference, C emission (gx_softmax), TFLite Micro mapping (SOFTMAX, and a QUANTIZE when the
model's output scale is not TFLite's 1/256).
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..codegen import c_struct
from ..tflm import nhwc
from ..ir import TensorInfo
from ..parse import attr, label
from . import OpSpec, elementwise_macs


def reference(x, p):
    from ..softmax_ref import softmax_int8
    return softmax_int8(x, p)


def emit(em, i, op, name):
    a = op.attrs
    shape = em.g.tensors[op.output].shape
    n = shape[-1]
    tfl = bool(a["tflite_output"])
    em.data.append(c_struct("gx_softmax_t", name, [
        ("rows", int(np.prod(shape)) // n), ("n", n), ("diff_min", a["diff_min"]),
        ("input_mult", a["input_multiplier"]), ("input_left_shift", a["input_left_shift"]),
        ("tflite_output", int(tfl)), ("out_mult", 0 if tfl else a["output_multiplier"]),
        ("out_shift", 0 if tfl else a["output_shift"]), ("out_offset", 0 if tfl else a["output_offset"])]))
    return "gx_softmax(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))

# -- 16x8 kernels (gx_kernels16.h; int16 activations, zero points 0)


def tflm(b, i, op):
    """SOFTMAX; TFLite fixes its outputs at 1/256, -128, so another output scale needs a QUANTIZE after."""
    tfl, B, out = b.tfl, b.tfl.BuiltinOperator, b.g.tensors[op.output]
    y = b.act(op.output)
    if not op.attrs["tflite_output"]:
        y = b.act("softmax_fixed%d" % i, nhwc(out.shape), 1.0 / 256, -128)
        b.notes.append("op %d (softmax): TFLM needs output scale 1/256 then a QUANTIZE to the model's "
                          "scale %g (two roundings); we requantize from 16 fractional bits once" % (i, out.scale))
    b.op(B.SOFTMAX, [b.act(op.inputs[0])], [y], tfl.BuiltinOptions.SoftmaxOptions,
            tfl.SoftmaxOptionsT(beta=1.0))
    if not op.attrs["tflite_output"]:
        b.op(B.QUANTIZE, [y], [b.act(op.output)])


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def from_softmax(p, node):
    from ..softmax_ref import softmax_params
    x = p.tensors[p.act_input(node, 0)]
    axis = attr(node, "axis", -1) % len(x.shape)
    if axis != len(x.shape) - 1:
        raise ExportError("%s: Softmax only over the last axis" % label(node))
    name, scale, zp = p.output_q(node)
    out = TensorInfo(name, x.shape, scale, zp)
    p.add_op("softmax", node, [x.name], x.shape, softmax_params(x, out, node_label=label(node)))


SPECS = [OpSpec("softmax", reference, emit, tflm, elementwise_macs)]

ONNX = {"Softmax": from_softmax}
