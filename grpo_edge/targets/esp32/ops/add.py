"""Elementwise ADD, int8, with TFLite's rescaling (add_common.cc).

NumPy reference, C emission (gx_add; a constant operand as a full-shape array), TFLite Micro mapping
(ADD), MACs (one per output element).
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..codegen import c_array, c_struct
from ..reference import check_int32, clamp8, i64, mbqm, wrap_int32
from .. import reference as R
from ..ir import TensorInfo
from ..parse import label
from . import OpSpec, elementwise_macs


def add_params(a, b, out, consts=None):
    """ADD int8 parameters (add_common.cc)."""
    left_shift = 20
    twice_max = 2.0 * max(float(a.scale), float(b.scale))
    m1, s1 = R.quantize_multiplier(float(a.scale) / twice_max)
    m2, s2 = R.quantize_multiplier(float(b.scale) / twice_max)
    mo, so = R.quantize_multiplier(twice_max / ((1 << left_shift) * float(out.scale)))
    lo, hi = R.activation_range("none", out.scale, out.zero_point)
    return {"left_shift": left_shift, "input1_offset": -a.zero_point, "input2_offset": -b.zero_point,
            "input1_multiplier": m1, "input1_shift": s1, "input2_multiplier": m2, "input2_shift": s2,
            "output_multiplier": mo, "output_shift": so, "output_offset": out.zero_point,
            "activation_min": lo, "activation_max": hi, "constants": consts or {}}


def reference(a, b, p):
    """ADD int8 (add_common.cc): inputs shifted left by 20, rescaled to 2*max(s1, s2), summed, rescaled.

    b may be broadcast (numpy rules), e.g. a constant per-feature vector.
    """
    a1 = wrap_int32((i64(a) + p["input1_offset"]) << p["left_shift"])
    b1 = wrap_int32((i64(b) + p["input2_offset"]) << p["left_shift"])
    s1 = mbqm(a1, p["input1_multiplier"], p["input1_shift"])
    s2 = mbqm(b1, p["input2_multiplier"], p["input2_shift"])
    raw = check_int32(s1 + s2, "add sum")
    out = mbqm(raw, p["output_multiplier"], p["output_shift"]) + p["output_offset"]
    return clamp8(out, p["activation_min"], p["activation_max"])


def emit(em, i, op, name):
    a, p = op.attrs, em.p
    args = []
    for t in op.inputs:
        if t in a["constants"]:
            full = np.broadcast_to(a["constants"][t], em.g.tensors[op.output].shape)
            em.data.append(c_array("int8_t", "%s_c%d" % (p, i), full))
            args.append("%s_c%d" % (p, i))
        else:
            args.append(em.ptr(t))
    em.data.append(c_struct("gx_add_t", name, [
        ("n", em.g.tensors[op.output].size), ("in1_offset", a["input1_offset"]),
        ("in2_offset", a["input2_offset"]), ("left_shift", a["left_shift"]),
        ("in1_mult", a["input1_multiplier"]), ("in2_mult", a["input2_multiplier"]),
        ("out_mult", a["output_multiplier"]), ("in1_shift", a["input1_shift"]), ("in2_shift", a["input2_shift"]),
        ("out_shift", a["output_shift"]), ("out_offset", a["output_offset"]),
        ("act_min", a["activation_min"]), ("act_max", a["activation_max"])]))
    return "gx_add(&%s, %s, %s, %s)" % (name, args[0], args[1], em.ptr(op.output))


def tflm(b, i, op):
    """ADD; a constant operand becomes a full-shape int8 tensor in TFLite layout."""
    tfl, a, out = b.tfl, op.attrs, b.g.tensors[op.output]
    ins = []
    for t in op.inputs:
        if t in a["constants"]:
            full = np.broadcast_to(a["constants"][t], out.shape)
            full = full.transpose(0, 2, 3, 1) if full.ndim == 4 else full
            sc, zp = a["constant_quant"][t]
            tt = b.const(np.ascontiguousarray(full).astype(np.int8), t, tfl.TensorType.INT8)
            tt.quantization = b.me.Quantization(scales=[float(sc)], zero_points=[int(zp)])
            ins.append(tt)
        else:
            ins.append(b.act(t))
    if a.get("subtract"):
        b.op(tfl.BuiltinOperator.SUB, ins, [b.act(op.output)], tfl.BuiltinOptions.SubOptions, tfl.SubOptionsT())
    else:
        b.op(tfl.BuiltinOperator.ADD, ins, [b.act(op.output)], tfl.BuiltinOptions.AddOptions, tfl.AddOptionsT())


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def from_sub(p, node):
    """a - b: TFLite's SUB is ADD's arithmetic with the second rescaled term subtracted; mbqm is odd (it
    rounds half away from zero), so that is ADD with the second multiplier negated: no other kernel."""
    if p.source(node, node.input[0])[0] != "act":
        raise ExportError("%s: Sub of a constant minus an activation is not supported (activation - constant is)"
                          % label(node))
    from_add(p, node, sub=True)


def from_add(p, node, sub=False):
    from .softmax import mask_rule
    if not sub and mask_rule(p, node):          # scores + a constant mask of 0 / -inf, read by a Softmax
        return
    srcs = [p.source(node, node.input[i]) for i in (0, 1)]
    if srcs[0][0] != "act":
        srcs = srcs[::-1]
    if srcs[0][0] != "act" or srcs[1][0] == "float_const":
        raise ExportError("%s: %s needs an int8 activation and an int8 activation or constant"
                          % (label(node), "Sub" if sub else "Add"))
    a = p.tensors[srcs[0][1]]
    consts = {}
    if srcs[1][0] == "act":
        b = p.tensors[srcs[1][1]]
    else:
        arr, sc, zpb = srcs[1][1], srcs[1][2], srcs[1][3]
        if sc.size != 1 or arr.dtype != np.int8:
            raise ExportError("%s: a constant Add operand must be per-tensor int8" % label(node))
        bname = node.name + "/const" if node.name else node.input[1] + "/const"
        b = TensorInfo(bname, arr.shape, R.f32(sc.reshape(())), int(zpb.reshape(())))
        try:
            np.broadcast_to(arr.reshape((1,) * (len(a.shape) - arr.ndim) + arr.shape), a.shape)
        except ValueError:
            raise ExportError("%s: constant of shape %s does not broadcast to %s" % (label(node), arr.shape, a.shape))
        consts[bname] = arr.reshape((1,) * (len(a.shape) - arr.ndim) + arr.shape).astype(np.int8)
    if b.name not in consts and tuple(b.shape) != tuple(a.shape):
        raise ExportError("%s: Add of shapes %s and %s: only equal shapes or a constant operand" % (label(node), a.shape, b.shape))
    name, scale, zp = p.output_q(node)
    out = TensorInfo(name, a.shape, scale, zp)
    attrs = add_params(a, b, out, consts)
    attrs["constant_quant"] = {n: (b.scale, b.zero_point) for n in consts}
    if sub:
        attrs["input2_multiplier"], attrs["subtract"] = -attrs["input2_multiplier"], True
    p.add_op("add", node, [a.name, b.name], a.shape, attrs)


SPECS = [OpSpec("add", reference, emit, tflm, elementwise_macs, in_place=True)]

ONNX = {"Add": from_add, "Sub": from_sub}
