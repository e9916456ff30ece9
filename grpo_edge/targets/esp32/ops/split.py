"""Split of an int8 tensor along one axis (Split), as one slice op per output (gx_slice in csrc/gx_kernels.h:
blocks copied out of the input). onnxruntime quantizes every output of a Split with the input's parameters,
so no arithmetic. NumPy reference, C emission, TFLite Micro mapping (SLICE, on the NHWC layout for 4-D),
MACs (one per output element).
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..parse import attr, label
from . import OpSpec, elementwise_macs


def reference(x, p):
    return np.take(x, range(p["start"], p["start"] + p["length"]), axis=p["axis"])


def emit(em, i, op, name):
    a = op.attrs
    shape = em.g.tensors[op.inputs[0]].shape
    post = int(np.prod(shape[a["axis"] + 1:]))
    outer = int(np.prod(shape[:a["axis"]]))
    return "gx_slice(%d, %d, %d, (%s) + %d, %s)" % (outer, a["length"] * post, shape[a["axis"]] * post,
                                                   em.ptr(op.inputs[0]), a["start"] * post, em.ptr(op.output))


def tflm(b, i, op):
    tfl, a = b.tfl, op.attrs
    shape = list(b.g.tensors[op.inputs[0]].shape)
    begin, size = [0] * len(shape), list(shape)
    begin[a["axis"]], size[a["axis"]] = a["start"], a["length"]
    if len(shape) == 4:
        begin, size = [begin[k] for k in (0, 2, 3, 1)], [size[k] for k in (0, 2, 3, 1)]
    bt = b.const(np.array(begin, np.int32), "begin%d" % i, tfl.TensorType.INT32)
    st = b.const(np.array(size, np.int32), "size%d" % i, tfl.TensorType.INT32)
    b.op(tfl.BuiltinOperator.SLICE, [b.act(op.inputs[0]), bt, st], [b.act(op.output)])


# -- the ONNX rule: check the node, compute the kernel's parameters once (TFLM's Prepare)

def from_split(p, node):
    x = p.tensors[p.act_input(node, 0)]
    axis = int(attr(node, "axis", 0)) % len(x.shape)
    sizes = attr(node, "split")
    if sizes is None and len(node.input) > 1 and node.input[1]:
        sizes = p.consts.get(node.input[1])
        if sizes is None:
            raise ExportError("%s: the split sizes must be a constant" % label(node))
    n = len(node.output)
    sizes = [x.shape[axis] // n] * n if sizes is None else [int(v) for v in np.asarray(sizes).reshape(-1)]
    if axis == 0 or sum(sizes) != x.shape[axis] or len(sizes) != n:
        raise ExportError("%s: Split of %s along axis %d into %s" % (label(node), x.shape, axis, sizes))
    start = 0
    for k, size in enumerate(sizes):
        name, scale, zp = p.output_q(node, k)
        if scale != x.scale or zp != x.zero_point:
            raise ExportError("%s: Split output %d is quantized unlike its input" % (label(node), k))
        shape = list(x.shape)
        shape[axis] = size
        p.add_op("slice", node, [x.name], tuple(shape), {"axis": axis, "start": start, "length": size}, out_index=k)
        start += size


SPECS = [OpSpec("slice", reference, emit, tflm, elementwise_macs)]

ONNX = {"Split": from_split}
