"""Constant padding of an int8 tensor (Pad, mode constant; rank <= 4, no padding of the batch axis): gx_pad in
csrc/gx_kernels.h fills the output with the pad value's code, then copies the input's rows in. When onnxruntime
gives the output other parameters than the input, the rows go through a requantization table (TFLM's
QUANTIZE rule, ops/lut.requant_table). NumPy reference, C
emission, TFLite Micro mapping (PAD when the value is the zero point, else PADV2; NHWC order for 4-D), MACs
(one per output element). The 16x8 form (pad16): the value's int16 code, a rescale (TFLite's Requantize) when
the parameters differ.
"""
import numpy as np

from grpo_edge.errors import ExportError

from .. import reference as R
from ..codegen import c_array, c_struct
from ..parse import attr, label
from . import OpSpec, elementwise_macs


def reference(x, p):
    if p["table"] is not None:
        x = np.asarray(p["table"], np.int8)[R.i64(x) + 128]
    return np.pad(x, p["widths"], mode="constant", constant_values=p["value"])


def reference16(x, p):
    """int16: the input rescaled when its parameters differ (TFLite's Requantize; multiplier 0: copied)."""
    if p["multiplier"]:
        x = R.clamp16(R.mbqm(R.i64(x), p["multiplier"], p["shift"]))
    return np.pad(x, p["widths"], mode="constant", constant_values=p["value"])


def to_pad16(g, op):
    """The int8 pad between int16 tensors (zero points 0): the pad value's int16 code, the rescale."""
    x, y = g.tensors[op.inputs[0]], g.tensors[op.output]
    m, s = (0, 0) if x.scale == y.scale else R.quantize_multiplier(float(x.scale) / float(y.scale))
    code = int(R.quantize(np.array([op.attrs["real_value"]], np.float32), y.scale, 0, "int16").reshape(-1)[0])
    op.kind = "pad16"
    op.attrs = {"widths": op.attrs["widths"], "value": code, "multiplier": m, "shift": s,
                "real_value": op.attrs["real_value"]}


def _dims(em, op):
    a = op.attrs
    shape, out = em.g.tensors[op.inputs[0]].shape, em.g.tensors[op.output].shape
    pad = 4 - len(shape)
    return [("dims", "{%s}" % ", ".join(map(str, [1] * pad + list(shape)))),
            ("out_dims", "{%s}" % ", ".join(map(str, [1] * pad + list(out)))),
            ("begin", "{%s}" % ", ".join(map(str, [0] * pad + [w[0] for w in a["widths"]])))]


def emit16(em, i, op, name):
    a = op.attrs
    em.data.append(c_struct("gx_pad16_t", name, _dims(em, op) + [("value", a["value"]), ("mult", a["multiplier"]),
                                                                ("shift", a["shift"])]))
    return "gx_pad16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def emit(em, i, op, name):
    a = op.attrs
    table = "0"
    if a["table"] is not None:
        table = "%s_t%d" % (em.p, i)
        em.data.append(c_array("int8_t", table, a["table"]))
    em.data.append(c_struct("gx_pad_t", name, _dims(em, op) + [("value", a["value"]), ("table", table)]))
    return "gx_pad(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op, dtype="int8"):
    tfl, a = b.tfl, op.attrs
    widths = [list(w) for w in a["widths"]]
    if len(widths) == 4:
        widths = [widths[k] for k in (0, 2, 3, 1)]
    pt = b.const(np.array(widths, np.int32), "pads%d" % i, tfl.TensorType.INT32)
    out = b.g.tensors[op.output]
    x = b.act(op.inputs[0])
    if a.get("table") is not None or a.get("multiplier"):     # to the output's parameters first
        t = b.act("pad%d_in" % i, b.t[op.inputs[0]].shape, out.scale, out.zero_point)
        b.op(tfl.BuiltinOperator.QUANTIZE, [x], [t])
        x = t
    if a["value"] == out.zero_point:
        b.op(tfl.BuiltinOperator.PAD, [x, pt], [b.act(op.output)])
        return
    v = b.const(np.array([a["value"]], dtype), "padv%d" % i, tfl.TensorType.INT8 if dtype == "int8" else tfl.TensorType.INT16)
    v.quantization = b.me.Quantization(scales=[float(out.scale)], zero_points=[int(out.zero_point)])
    b.op(tfl.BuiltinOperator.PADV2, [x, pt, v], [b.act(op.output)])


# -- the ONNX rule: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _pad_value(p, node):
    """The real value of a Pad's constant input (parse.const_value: a float constant or int8 codes)."""
    v = p.const_value(node, 2)
    if v is None or v.size != 1:
        raise ExportError("%s: the pad value must be a constant scalar" % label(node))
    return float(v[0])


def from_pad(p, node):
    x = p.tensors[p.act_input(node, 0)]
    rank = len(x.shape)
    mode = attr(node, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pads = attr(node, "pads")
    if pads is None and len(node.input) > 1 and node.input[1]:
        pads = p.consts.get(node.input[1])
    if pads is None or mode != "constant" or (len(node.input) > 3 and node.input[3]):
        raise ExportError("%s: Pad only in constant mode, with constant pads, over all axes" % label(node))
    pads = [int(v) for v in np.asarray(pads).reshape(-1)]
    widths = [(pads[k], pads[k + rank]) for k in range(rank)]
    if rank > 4 or widths[0] != (0, 0) or min(pads) < 0:
        raise ExportError("%s: Pad %s of a %s tensor (rank 4 at most, none on the batch axis, no cropping)"
                          % (label(node), pads, x.shape))
    value = _pad_value(p, node) if len(node.input) > 2 and node.input[2] else 0.0
    from ..ir import TensorInfo
    from .lut import requant_table
    name, scale, zp = p.output_q(node)
    shape = tuple(d + w[0] + w[1] for d, w in zip(x.shape, widths))
    same = scale == x.scale and zp == x.zero_point
    table = None if same else requant_table(x, TensorInfo(name, shape, scale, zp), -128, 127)
    code = int(R.quantize(np.array([value], np.float32), scale, zp, "int8").reshape(-1)[0])
    p.add_op("pad", node, [x.name], shape, {"widths": tuple(widths), "value": code, "table": table,
                                            "real_value": value})


def tflm16(b, i, op):
    """PAD / PADV2 at int16 (TFLM's pad takes int16)."""
    tflm(b, i, op, dtype="int16")


SPECS = [OpSpec("pad", reference, emit, tflm, elementwise_macs, to_int16=to_pad16),
         OpSpec("pad16", reference16, emit16, tflm16, elementwise_macs, int16=True)]

ONNX = {"Pad": from_pad}
