"""Split of an int8 tensor along one axis (Split), as one slice op per output (gx_slice in csrc/gx_kernels.h:
blocks copied out of the input); also Slice (constant bounds, step 1, one axis) and Gather of constant
indices that form a range (x[:, 0] picking a class token: a slice and a view without the axis).
onnxruntime quantizes every output of these with the input's parameters, so no arithmetic. NumPy reference, C emission, TFLite Micro mapping (SLICE, on the NHWC layout for 4-D),
MACs (one per output element).
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..parse import attr, label
from . import OpSpec, elementwise_macs


def reference(x, p):
    return np.take(x, range(p["start"], p["start"] + p["length"]), axis=p["axis"])


def to_slice16(g, op):
    """Data moves, no arithmetic: the same slice over int16."""
    op.kind = "slice16"


def emit16(em, i, op, name):
    return emit(em, i, op, name, kernel="gx_slice16")


def emit(em, i, op, name, kernel="gx_slice"):
    a = op.attrs
    shape = em.g.tensors[op.inputs[0]].shape
    post = int(np.prod(shape[a["axis"] + 1:]))
    outer = int(np.prod(shape[:a["axis"]]))
    return "%s(%d, %d, %d, (%s) + %d, %s)" % (kernel, outer, a["length"] * post, shape[a["axis"]] * post,
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


def _slice_op(p, node, x, axis, start, length, onnx_shape=None):
    name, scale, zp = p.output_q(node)
    if scale != x.scale or zp != x.zero_point:
        raise ExportError("%s: %s output quantized unlike its input" % (label(node), node.op_type))
    shape = list(x.shape)
    shape[axis] = length
    p.add_op("slice", node, [x.name], tuple(shape), {"axis": axis, "start": start, "length": length},
             onnx_shape=onnx_shape)


def from_slice(p, node):
    x = p.tensors[p.act_input(node, 0)]
    ins = list(node.input[1:5]) + [""] * 4
    if any(n and n not in p.consts for n in ins[:4]) or not ins[0] or not ins[1]:
        raise ExportError("%s: Slice bounds must be constants" % label(node))
    starts, ends, axes, steps = (None if not n else [int(t) for t in np.asarray(p.consts[n]).reshape(-1)]
                                 for n in ins[:4])
    axes = axes or list(range(len(starts)))
    cut = []
    for st, en, ax, sp in zip(starts, ends, axes, steps or [1] * len(starts)):
        ax, dim = ax % len(x.shape), x.shape[ax % len(x.shape)]
        st, en = max(0, min(dim, st + dim if st < 0 else st)), max(0, min(dim, en + dim if en < 0 else en))
        if sp != 1:
            raise ExportError("%s: Slice with step %d (only 1)" % (label(node), sp))
        if (st, en) != (0, dim):
            cut.append((ax, st, en - st))
    if len(cut) != 1 or cut[0][0] == 0 or cut[0][2] < 1:
        raise ExportError("%s: Slice of one axis past the batch, not empty (got %s)" % (label(node), cut))
    _slice_op(p, node, x, *cut[0])


def from_gather(p, node):
    """Constant indices into an activation (a slice); the model's token ids into a constant table: an
    embedding (ops/embedding.py)."""
    if node.input[1] == p.input and p.tensors[p.input].limit:
        from .embedding import from_gather_ids
        return from_gather_ids(p, node)
    x = p.tensors[p.act_input(node, 0)]
    idx = p.consts.get(node.input[1])
    axis = int(attr(node, "axis", 0)) % len(x.shape)
    if idx is None or axis == 0:
        raise ExportError("%s: Gather of an activation needs constant indices, on an axis past the batch"
                          % label(node))
    flat = [int(i) % x.shape[axis] for i in np.asarray(idx).reshape(-1)]
    if flat != list(range(flat[0], flat[0] + len(flat))):
        raise ExportError("%s: Gather indices %s are not a range" % (label(node), flat))
    shape = list(x.shape)
    shape[axis:axis + 1] = list(np.asarray(idx).shape)          # a scalar index drops the axis
    _slice_op(p, node, x, axis, flat[0], len(flat), onnx_shape=tuple(shape))


SPECS = [OpSpec("slice", reference, emit, tflm, elementwise_macs, to_int16=to_slice16),
         OpSpec("slice16", reference, emit16, tflm, elementwise_macs, int16=True)]

ONNX = {"Split": from_split, "Slice": from_slice, "Gather": from_gather}
