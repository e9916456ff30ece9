"""Concatenation of int8 tensors along one axis (Concat).

onnxruntime quantizes every input of a Concat with its own parameters; TFLite's CONCATENATION wants them
equal to the output's. So each input whose parameters differ is first requantized to the output's, with
TFLM's QUANTIZE rule (a 256-entry table, ops/lut.requant_table), then the blocks are copied (gx_concat_part
in csrc/gx_kernels.h, one call per input). NumPy reference, C emission, TFLite Micro mapping (QUANTIZE where
needed + CONCATENATION), MACs (one per output element). The 16x8 form (concat16) rescales an input whose scale
differs with TFLite's Requantize rule (zero points 0) and copies every part.
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..codegen import c_array
from .. import reference as R
from ..ir import TensorInfo, concat_blocks
from ..parse import attr, label
from ..reference import i64
from ..tflm import nhwc
from . import OpSpec, elementwise_macs


def reference(*args):
    *xs, p = args
    parts = [x if t is None else np.asarray(t, np.int8)[i64(x) + 128] for x, t in zip(xs, p["tables"])]
    batch = max(len(x) for x in parts)            # a constant input (a class token) has batch 1
    parts = [np.broadcast_to(x, (batch,) + x.shape[1:]) for x in parts]
    return np.concatenate(parts, axis=p["axis"])


def emit(em, i, op, name):
    a, g = op.attrs, em.g
    outer, inner, out_inner = concat_blocks(op, g.tensors)
    calls, offset = [], 0
    for k, (t, table) in enumerate(zip(op.inputs, a["tables"])):
        tab, src = "0", None
        if table is not None:
            tab = "%s_t%d_%d" % (em.p, i, k)
            em.data.append(c_array("int8_t", tab, table))
        if t in em.plan.offsets:                  # written in its place by its producer (planner.concat_parts)
            if table is not None:
                calls.append("gx_lut(%s, %d, %s, %s)" % (tab, inner[k], em.ptr(t), em.ptr(t)))
            offset += inner[k]
            continue
        if t in a["constants"]:                   # a constant input: its bytes in flash
            src = "%s_c%d_%d" % (em.p, i, k)
            em.data.append(c_array("int8_t", src, a["constants"][t]))
        calls.append("gx_concat_part(%s, %d, %d, %d, %s, (%s) + %d)" % (tab, outer, inner[k], out_inner,
                                                                        src or em.ptr(t), em.ptr(op.output), offset))
        offset += inner[k]
    return ";\n    ".join(calls) or None


def to_concat16(g, op):
    """The int8 concat between int16 tensors (zero points 0): each input rescaled to the output's scale by a
    quantized multiplier (0: copied). Its parts are copied, not written in place (planner.concat_parts
    plans the int8 concat only)."""
    if op.attrs["constants"]:
        raise ExportError("concat node %r: a constant input (%s) is not supported with int16 activations"
                          % (op.name, ", ".join(op.attrs["constants"])))
    y = g.tensors[op.output]
    rescale = []
    for t in op.inputs:
        x = g.tensors[t]
        rescale.append((0, 0) if x.scale == y.scale else R.quantize_multiplier(float(x.scale) / float(y.scale)))
    op.kind = "concat16"
    op.attrs = {"axis": op.attrs["axis"], "rescale": rescale, "constants": {}}


def reference16(*args):
    *xs, p = args
    parts = [x if m == 0 else R.clamp16(R.mbqm(i64(x), m, s)) for x, (m, s) in zip(xs, p["rescale"])]
    return np.concatenate(parts, axis=p["axis"])


def emit16(em, i, op, name):
    outer, inner, out_inner = concat_blocks(op, em.g.tensors)
    calls, offset = [], 0
    for k, (t, (m, s)) in enumerate(zip(op.inputs, op.attrs["rescale"])):
        calls.append("gx_concat_part16(%d, %d, %d, %d, %d, %s, (%s) + %d)" % (m, s, outer, inner[k], out_inner,
                                                                              em.ptr(t), em.ptr(op.output), offset))
        offset += inner[k]
    return ";\n    ".join(calls)


def tflm16(b, i, op):
    """QUANTIZE (int16 -> int16) where an input's scale differs, then CONCATENATION."""
    tflm(b, i, op, rescaled=[m != 0 for m, _ in op.attrs["rescale"]])


def tflm(b, i, op, rescaled=None):
    """QUANTIZE where an input's parameters differ from the output's (TFLite requires them equal), constants
    in the output's parameters, then CONCATENATION. rescaled: which inputs (16x8: from the rescales)."""
    tfl, B, g = b.tfl, b.tfl.BuiltinOperator, b.g
    out = g.tensors[op.output]
    if rescaled is None:
        rescaled = [t is not None for t in op.attrs["tables"]]
    ins = []
    for k, (t, requant) in enumerate(zip(op.inputs, rescaled)):
        if t in op.attrs["constants"]:
            c = op.attrs["constants"][t]
            x = b.const(np.ascontiguousarray(c.transpose(0, 2, 3, 1) if c.ndim == 4 else c), t, tfl.TensorType.INT8)
            x.quantization = b.me.Quantization(scales=[float(out.scale)], zero_points=[int(out.zero_point)])
            ins.append(x)
            continue
        x = b.act(t)
        if requant:
            y = b.act("concat%d_in%d" % (i, k), nhwc(g.tensors[t].shape), out.scale, out.zero_point)
            b.op(B.QUANTIZE, [x], [y])
            x = y
        ins.append(x)
    axis = op.attrs["axis"]
    if len(out.shape) == 4:
        axis = (0, 3, 1, 2)[axis]
    b.op(B.CONCATENATION, ins, [b.act(op.output)], tfl.BuiltinOptions.ConcatenationOptions,
         tfl.ConcatenationOptionsT(axis=axis))


# -- the ONNX rule: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _inputs(p, node):
    """The inputs as TensorInfo, and {name: int8 array} of the constant ones (still in their own parameters)."""
    xs, consts = [], {}
    for k, name in enumerate(node.input):
        src = p.source(node, name)
        if src[0] == "act":
            xs.append(p.tensors[src[1]])
        elif src[0] == "const" and np.asarray(src[2]).size == 1 and src[1].dtype == np.int8:
            cname = "%s/const%d" % (node.name or node.output[0], k)
            xs.append(TensorInfo(cname, tuple(src[1].shape), R.f32(np.asarray(src[2]).reshape(())),
                                 int(np.asarray(src[3]).reshape(()))))
            consts[cname] = src[1]
        else:
            raise ExportError("%s: Concat input %d must be an int8 activation or a per-tensor int8 constant"
                              % (label(node), k))
    return xs, consts


def from_concat(p, node):
    from .lut import requant_table
    xs, consts = _inputs(p, node)
    rank = len(xs[0].shape)
    axis = int(attr(node, "axis", 1)) % rank
    if axis == 0 or any(len(x.shape) != rank or tuple(np.delete(x.shape, axis)) != tuple(np.delete(xs[0].shape, axis))
                        for x in xs):
        raise ExportError("%s: Concat along axis %d of shapes %s (same rank, equal sizes off the axis, not the "
                          "batch)" % (label(node), axis, [x.shape for x in xs]))
    name, scale, zp = p.output_q(node)
    shape = list(xs[0].shape)
    shape[axis] = int(sum(x.shape[axis] for x in xs))
    out = TensorInfo(name, tuple(shape), scale, zp)
    tables = [None if (x.scale == scale and x.zero_point == zp) else requant_table(x, out, -128, 127) for x in xs]
    for k, x in enumerate(xs):             # a constant is requantized here, once: no table at run time
        if x.name in consts:
            t = tables[k]
            consts[x.name] = consts[x.name] if t is None else np.asarray(t, np.int8)[i64(consts[x.name]) + 128]
            tables[k] = None
    p.add_op("concat", node, [x.name for x in xs], tuple(shape), {"axis": axis, "tables": tables,
                                                                  "constants": consts})


SPECS = [OpSpec("concat", reference, emit, tflm, elementwise_macs, to_int16=to_concat16),
         OpSpec("concat16", reference16, emit16, tflm16, elementwise_macs, int16=True)]

ONNX = {"Concat": from_concat}
