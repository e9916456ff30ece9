"""Reshape / Flatten: no data moves (the arena keeps the bytes; NCHW order is the ONNX order).

Reference: identity; no C call; TFLite Micro mapping (RESHAPE, after a TRANSPOSE back to NCHW order when
an image is flattened).
"""
import numpy as np

from grpo_edge.errors import TargetError

from ..tflm import nhwc
from . import OpSpec


def reference(x, p):
    return x


def emit(em, i, op, name):
    return None                      # same bytes, another shape: nothing to run


def tflm(b, i, op):
    tfl, B, g = b.tfl, b.tfl.BuiltinOperator, b.g
    src, out = g.tensors[op.inputs[0]], g.tensors[op.output]
    if len(out.shape) == 4 and tuple(out.shape) != tuple(src.shape):
        raise TargetError("no TFLM mapping for a reshape to 4-D (node %r)" % op.name)
    x = b.act(op.inputs[0])
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


SPECS = [OpSpec("reshape", reference, emit, tflm, macs, int16=True)]
