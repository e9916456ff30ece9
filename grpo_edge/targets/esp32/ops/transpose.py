"""Transpose of an int8 tensor (rank <= 4, the batch axis kept): data moves, so a kernel (gx_transpose in
csrc/gx_kernels.h: the output walked in order, the input read through the permuted strides).

onnxruntime quantizes a Transpose's output with its input's parameters (QDQDirect8BitOp), so no arithmetic.
NumPy reference, C emission, TFLite Micro mapping (TRANSPOSE, the permutation expressed on TFLite's NHWC
layout for 4-D tensors), MACs (one per element). transpose16: the same over int16.
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..codegen import c_struct
from ..parse import attr, label
from . import OpSpec, elementwise_macs

NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def reference(x, p):
    return np.transpose(x, p["perm"])


def emit16(em, i, op, name):
    return emit(em, i, op, name, kernel="gx_transpose16")


def to_transpose16(g, op):
    """Data moves, no arithmetic: the same permutation over int16."""
    op.kind = "transpose16"


def emit(em, i, op, name, kernel="gx_transpose"):
    shape = em.g.tensors[op.inputs[0]].shape
    perm = op.attrs["perm"]
    pad = 4 - len(shape)
    strides = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    dims = [1] * pad + [int(shape[k]) for k in perm]
    stride = [0] * pad + [strides[k] for k in perm]
    em.data.append(c_struct("gx_transpose_t", name, [("dims", "{%s}" % ", ".join(map(str, dims))),
                                                     ("stride", "{%s}" % ", ".join(map(str, stride)))]))
    return "%s(&%s, %s, %s)" % (kernel, name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    tfl = b.tfl
    perm = list(op.attrs["perm"])
    if len(perm) == 4:                      # TFLite holds 4-D tensors as NHWC: the same move on that layout
        perm = [NCHW[perm[NHWC[k]]] for k in range(4)]
    pt = b.const(np.array(perm, np.int32), "perm%d" % i, tfl.TensorType.INT32)
    b.op(tfl.BuiltinOperator.TRANSPOSE, [b.act(op.inputs[0]), pt], [b.act(op.output)])


# -- the ONNX rule: check the node, compute the kernel's parameters once (TFLM's Prepare)

def from_transpose(p, node):
    x = p.tensors[p.act_input(node, 0)]
    rank = len(x.shape)
    perm = [int(k) % rank for k in attr(node, "perm", list(range(rank))[::-1])]
    if rank > 4 or sorted(perm) != list(range(rank)) or perm[0] != 0:
        raise ExportError("%s: Transpose %s of a %s tensor (rank 4 at most, the batch axis first)"
                          % (label(node), perm, x.shape))
    name, scale, zp = p.output_q(node)
    if scale != x.scale or zp != x.zero_point:
        raise ExportError("%s: Transpose input and output quantization differ" % label(node))
    p.add_op("transpose", node, [x.name], tuple(x.shape[k] for k in perm), {"perm": tuple(perm)})


def reference_slice(x, p):
    """strided_slice: x[begin : begin + size * step : step] on every axis (a TFLite STRIDED_SLICE, masks resolved
    by the front end), the batch axis kept."""
    return x[(slice(None),) + tuple(slice(b, b + n * s, s) for b, n, s in
                                    zip(p["begin"][1:], p["size"][1:], p["step"][1:]))]


def emit_slice(em, i, op, name):
    """gx_transpose's walk (the output in order, the input through strides) with each stride times its step, from
    the first element of the slice."""
    shape = em.g.tensors[op.inputs[0]].shape
    a = op.attrs
    strides = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    pad = 4 - len(shape)
    dims = [1] * pad + [int(n) for n in a["size"]]
    stride = [0] * pad + [strides[k] * int(a["step"][k]) for k in range(len(shape))]
    base = sum(strides[k] * int(a["begin"][k]) for k in range(len(shape)))
    em.data.append(c_struct("gx_transpose_t", name, [("dims", "{%s}" % ", ".join(map(str, dims))),
                                                     ("stride", "{%s}" % ", ".join(map(str, stride)))]))
    return "gx_transpose(&%s, (%s) + %d, %s)" % (name, em.ptr(op.inputs[0]), base, em.ptr(op.output))


def tflm_slice(b, i, op):
    from grpo_edge.errors import TargetError
    raise TargetError("no TFLM mapping written for strided_slice (op %r): it comes from a .tflite, which TFLM "
                      "runs as it is" % op.name)


SPECS = [OpSpec("strided_slice", reference_slice, emit_slice, tflm_slice, elementwise_macs),
         OpSpec("transpose", reference, emit, tflm, elementwise_macs, to_int16=to_transpose16),
         OpSpec("transpose16", reference, emit16, tflm, elementwise_macs, int16=True)]

ONNX = {"Transpose": from_transpose}
