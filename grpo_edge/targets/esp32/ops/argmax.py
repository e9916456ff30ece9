"""ARG_MAX over the last axis (int8 or int16 input; ties go to the first index).

NumPy reference, C emission (gx_argmax / gx_argmax16), TFLite Micro mapping (ARG_MAX, int8 only).
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from ..reference import i64
from ..tflm import REASON_ARGMAX16
from ..ir import Op, TensorInfo
from ..parse import attr, label
from . import OpSpec, elementwise_macs


def reference(x, p):
    """ARG_MAX over the last axis; ties go to the first index. Output stored as int8 (<128 classes)."""
    return np.argmax(i64(x), axis=-1).astype(np.int8).reshape(x.shape[0], 1)


def emit(em, i, op, name):
    x = em.g.tensors[op.inputs[0]]
    fn = "gx_argmax16" if x.dtype == "int16" else "gx_argmax"
    return "%s(%d, %s, %s)" % (fn, x.size, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    """ARG_MAX over the last axis (int8 inputs only: TFLM has no int16 ARG_MAX)."""
    tfl, g, x = b.tfl, b.g, op.inputs[0]
    I32 = tfl.TensorType.INT32
    if g.tensors[x].dtype != "int8":
        raise TargetError("no TFLM baseline for this 16x8 model: %s (node %r)" % (REASON_ARGMAX16, op.name))
    axis = b.const(np.array([len(g.tensors[x].shape) - 1], np.int32), "axis%d" % i, I32)
    o = b.me.Tensor(shape=(1,), dtype=I32, name=op.output)
    b.t[op.output] = o
    b.op(tfl.BuiltinOperator.ARG_MAX, [b.act(x), axis], [o], tfl.BuiltinOptions.ArgMaxOptions,
            tfl.ArgMaxOptionsT(outputType=I32))


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def from_arg_max(p, node):
    x = p.tensors[p.act_input(node, 0)]
    axis = attr(node, "axis", 0) % len(x.shape)
    if axis != len(x.shape) - 1 or len(x.shape) != 2:
        raise ExportError("%s: ArgMax only over the last axis of a (1, N) tensor" % label(node))
    if x.shape[1] > 127:
        raise ExportError("%s: ArgMax over %d classes does not fit an int8 output" % (label(node), x.shape[1]))
    name = node.output[0]
    p.tensors[name] = TensorInfo(name, (1, 1), 1.0, 0)
    p.ops.append(Op("argmax", node.name or name, [x.name], name, {}))


SPECS = [OpSpec("argmax", reference, emit, tflm, elementwise_macs, int16=True)]

ONNX = {"ArgMax": from_arg_max}
