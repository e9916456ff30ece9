"""Reshape / Flatten / Squeeze / Unsqueeze / Identity: no data moves (the arena keeps the bytes; NCHW order is the ONNX order).

Reference: identity; no C call; TFLite Micro mapping (RESHAPE, after a TRANSPOSE back to NCHW order when
an image is flattened).
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from ..tflm import nhwc
from ..parse import attr, label
from . import OpSpec


def reference(x, p):
    return x


def emit(em, i, op, name):
    return None                      # same bytes, another shape: nothing to run


def tflm(b, i, op):
    tfl, B, g = b.tfl, b.tfl.BuiltinOperator, b.g
    src, out = g.tensors[op.inputs[0]], g.tensors[op.output]
    x = b.act(op.inputs[0])
    if len(out.shape) == 4 and tuple(out.shape) != tuple(src.shape):
        if len(src.shape) == 4:
            raise TargetError("no TFLM mapping for a reshape from 4-D to 4-D (node %r)" % op.name)
        t = b.act("nchw%d" % i, tuple(out.shape), out.scale, out.zero_point)     # ONNX's order, then NHWC
        shape = b.const(np.array(out.shape, np.int32), "shape%d" % i, tfl.TensorType.INT32)
        b.op(B.RESHAPE, [x, shape], [t], tfl.BuiltinOptions.ReshapeOptions,
             tfl.ReshapeOptionsT(newShape=list(out.shape)))
        perm = b.const(np.array([0, 2, 3, 1], np.int32), "perm%d" % i, tfl.TensorType.INT32)
        b.op(B.TRANSPOSE, [t, perm], [b.act(op.output)])
        return
    if len(src.shape) == 4 and src.shape[1] > 1 and src.shape[2] * src.shape[3] > 1 and len(out.shape) != 4:
        perm = b.const(np.array([0, 3, 1, 2], np.int32), "perm%d" % i, tfl.TensorType.INT32)
        t = b.act("nchw%d" % i, tuple(src.shape), src.scale, src.zero_point)
        b.op(B.TRANSPOSE, [x, perm], [t])
        x = t
    shape = b.const(np.array(nhwc(out.shape), np.int32), "shape%d" % i, tfl.TensorType.INT32)
    b.op(B.RESHAPE, [x, shape], [b.act(op.output)], tfl.BuiltinOptions.ReshapeOptions,
            tfl.ReshapeOptionsT(newShape=list(nhwc(out.shape))))


def macs(op, tensors):
    return 0


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _alias(p, node, shape):
    x = p.tensors[p.act_input(node, 0)]
    name, scale, zp = p.output_q(node)
    if int(np.prod(shape)) != x.size:
        raise ExportError("%s: reshape from %s to %s changes the size" % (label(node), x.shape, shape))
    if scale != x.scale or zp != x.zero_point:
        raise ExportError("%s: input and output quantization differ" % label(node))
    p.add_op("reshape", node, [x.name], shape, {})


def from_flatten(p, node):
    x = p.tensors[p.act_input(node, 0)]
    axis = attr(node, "axis", 1) % max(len(x.shape), 1)
    if axis != 1:
        raise ExportError("%s: Flatten only with axis=1" % label(node))
    _alias(p, node, (1, x.size))


def from_reshape(p, node):
    x = p.tensors[p.act_input(node, 0)]
    shape = p.consts.get(node.input[1])
    if shape is None:
        raise ExportError("%s: the target shape must be a constant" % label(node))
    shape = [int(d) for d in shape]
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        shape[shape.index(-1)] = x.size // max(known, 1)
    if shape[0] != 1:
        raise ExportError("%s: reshape must keep the batch dimension" % label(node))
    _alias(p, node, tuple(shape))


def _axes(p, node):
    """A Squeeze / Unsqueeze node's axes (attribute, or a constant input from opset 13), or None."""
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = p.consts.get(node.input[1])
        if axes is None:
            raise ExportError("%s: the axes must be a constant" % label(node))
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


def from_squeeze(p, node):
    x = p.tensors[p.act_input(node, 0)]
    raw = _axes(p, node)
    axes = [k for k in range(1, len(x.shape)) if x.shape[k] == 1] if raw is None else sorted(a % len(x.shape)
                                                                                            for a in raw)
    if 0 in axes or any(x.shape[k] != 1 for k in axes):
        raise ExportError("%s: Squeeze of axes %s of a %s tensor (only size-1 axes past the batch)"
                          % (label(node), axes, x.shape))
    _alias(p, node, tuple(d for k, d in enumerate(x.shape) if k not in axes))


def from_unsqueeze(p, node):
    x = p.tensors[p.act_input(node, 0)]
    raw = _axes(p, node) or []
    axes, shape = sorted(a % (len(x.shape) + len(raw)) for a in raw), list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    if not axes or 0 in axes or len(shape) > 4:
        raise ExportError("%s: Unsqueeze to %s: new axes past the batch, rank 4 at most" % (label(node), shape))
    _alias(p, node, tuple(shape))


def from_identity(p, node):
    x = p.tensors[p.act_input(node, 0)]
    _alias(p, node, x.shape)


SPECS = [OpSpec("reshape", reference, emit, tflm, macs, int16=True)]

ONNX = {"Flatten": from_flatten, "Reshape": from_reshape, "Squeeze": from_squeeze, "Unsqueeze": from_unsqueeze, "Identity": from_identity}
