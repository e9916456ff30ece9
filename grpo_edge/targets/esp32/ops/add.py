"""Elementwise ADD, int8 (add) and 16x8 (add16), with TFLite's rescaling (add_common.cc).

NumPy reference, C emission (gx_add / gx_add16; a constant operand as a full-shape array), TFLite Micro
mapping (ADD / SUB), MACs (one per output element). The int16 form is the same arithmetic with the inputs
shifted left by 15 instead of 20 (TFLM: left_shift = 15 for an int16 output) and an int16 clamp.
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..codegen import c_array, c_struct
from ..reference import check_int32, clamp8, clamp16, i64, mbqm, wrap_int32
from .. import reference as R
from ..ir import TensorInfo
from ..parse import label
from . import OpSpec, elementwise_macs


def add_params(a, b, out, consts=None, left_shift=20):
    """ADD parameters (add_common.cc): left_shift 20 for int8, 15 for int16."""
    twice_max = 2.0 * max(float(a.scale), float(b.scale))
    m1, s1 = R.quantize_multiplier(float(a.scale) / twice_max)
    m2, s2 = R.quantize_multiplier(float(b.scale) / twice_max)
    mo, so = R.quantize_multiplier(twice_max / ((1 << left_shift) * float(out.scale)))
    lo, hi = R.activation_range("none", out.scale, out.zero_point) if left_shift == 20 else (-32768, 32767)
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


def reference16(a, b, p):
    """ADD 16x8: the int8 rule with left shift 15 and an int16 clamp (zero points 0)."""
    a1 = wrap_int32(i64(a) << p["left_shift"])
    b1 = wrap_int32(i64(b) << p["left_shift"])
    raw = check_int32(mbqm(a1, p["input1_multiplier"], p["input1_shift"])
                      + mbqm(b1, p["input2_multiplier"], p["input2_shift"]), "add sum")
    return clamp16(mbqm(raw, p["output_multiplier"], p["output_shift"]), p["activation_min"], p["activation_max"])


def emit16(em, i, op, name):
    return emit(em, i, op, name, ctype="int16_t", kernel="gx_add16")


def emit(em, i, op, name, ctype="int8_t", kernel="gx_add"):
    a, p = op.attrs, em.p
    args = []
    for t in op.inputs:
        if t in a["constants"]:
            full = np.broadcast_to(a["constants"][t], em.g.tensors[op.output].shape)
            em.data.append(c_array(ctype, "%s_c%d" % (p, i), full))
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
    ours = "%s(&%s, %s, %s, %s)" % (kernel, name, args[0], args[1], em.ptr(op.output))
    if em.g.esp_nn and kernel == "gx_add" and em.ptr(op.output) not in args:    # not in place: ESP-NN's add
        from ..esp_nn_adapters import add_call
        nn = add_call(em, i, op)
        if nn:
            return nn, ours
    return ours


def tflm(b, i, op):
    """ADD; a constant operand becomes a full-shape int8 tensor in TFLite layout."""
    tfl, a, out = b.tfl, op.attrs, b.g.tensors[op.output]
    ins = []
    for t in op.inputs:
        if t in a["constants"]:
            full = np.broadcast_to(a["constants"][t], out.shape)
            full = full.transpose(0, 2, 3, 1) if full.ndim == 4 else full
            sc, zp = a["constant_quant"][t]
            wide = op.kind == "add16"
            tt = b.const(np.ascontiguousarray(full).astype(np.int16 if wide else np.int8), t,
                         tfl.TensorType.INT16 if wide else tfl.TensorType.INT8)
            tt.quantization = b.me.Quantization(scales=[float(sc)], zero_points=[int(zp)])
            ins.append(tt)
        else:
            ins.append(b.act(t))
    if a.get("subtract"):
        b.op(tfl.BuiltinOperator.SUB, ins, [b.act(op.output)], tfl.BuiltinOptions.SubOptions, tfl.SubOptionsT())
    else:
        b.op(tfl.BuiltinOperator.ADD, ins, [b.act(op.output)], tfl.BuiltinOptions.AddOptions, tfl.AddOptionsT())


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _as_int16(codes, scale, zp, axis):
    """A constant operand that onnxruntime's 16x8 quantizer left int8 (per tensor or per channel along axis)
    -> the same real values as int16 codes at one scale, zero point 0 (max |v| / 32767): each moves by at most
    half of that step, which the Add's output scale does not resolve."""
    codes, scale, zp = np.asarray(codes), np.asarray(scale, np.float64), np.asarray(zp)
    shape = [1] * codes.ndim
    if scale.size > 1:
        shape[axis % codes.ndim] = -1
    real = (codes.astype(np.float64) - zp.astype(np.float64).reshape(shape)) * scale.reshape(shape)
    step = R.f32(max(float(np.abs(real).max()), 1e-12) / 32767.0)
    q = np.clip(np.sign(real) * np.floor(np.abs(real) / float(step) + 0.5), -32767, 32767).astype(np.int16)
    return q, np.array(step, np.float32), np.array(0, np.int16)


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
        if p.qtype.get(a.name) == "int16" and (sc.size != 1 or arr.dtype == np.int8):
            arr, sc, zpb = _as_int16(arr, sc, zpb, srcs[1][4])
        if sc.size != 1 or arr.dtype not in (np.int8, np.int16):
            raise ExportError("%s: a constant Add operand must be per-tensor int8 or int16" % label(node))
        bname = node.name + "/const" if node.name else node.input[1] + "/const"
        b = TensorInfo(bname, arr.shape, R.f32(sc.reshape(())), int(zpb.reshape(())), arr.dtype.name)
        try:
            np.broadcast_to(arr.reshape((1,) * (len(a.shape) - arr.ndim) + arr.shape), a.shape)
        except ValueError:
            raise ExportError("%s: constant of shape %s does not broadcast to %s" % (label(node), arr.shape, a.shape))
        consts[bname] = arr.reshape((1,) * (len(a.shape) - arr.ndim) + arr.shape)
    if b.name not in consts and tuple(b.shape) != tuple(a.shape):
        raise ExportError("%s: Add of shapes %s and %s: only equal shapes or a constant operand" % (label(node), a.shape, b.shape))
    name, scale, zp = p.output_q(node)
    out = TensorInfo(name, a.shape, scale, zp)
    attrs = add_params(a, b, out, consts)
    attrs["constant_quant"] = {n: (b.scale, b.zero_point) for n in consts}
    if sub:
        attrs["input2_multiplier"], attrs["subtract"] = -attrs["input2_multiplier"], True
    p.add_op("add", node, [a.name, b.name], a.shape, attrs)


def to_add16(g, op):
    """ADD / SUB between int16 tensors (or an int16 constant): TFLM's rule with left shift 15."""
    a, b = (g.tensors[n] if n in g.tensors else None for n in op.inputs)
    consts = op.attrs["constants"]
    if any(np.asarray(v).dtype != np.int16 for v in consts.values()):
        raise ExportError("Add node %r: its constant operand is int8 in a model with int16 activations" % op.name)
    if b is None:                                # the constant operand's parameters, as from_add read them
        sc, zp = op.attrs["constant_quant"][op.inputs[1]]
        b = type(a)(op.inputs[1], tuple(np.shape(consts[op.inputs[1]])), sc, zp, "int16")
    if a.zero_point or b.zero_point:
        raise ExportError("Add node %r: int16 operands need zero point 0 (TFLite 16x8)" % op.name)
    p = add_params(a, b, g.tensors[op.output], consts, left_shift=15)
    p["constant_quant"] = op.attrs.get("constant_quant", {})
    if op.attrs.get("subtract"):
        p["input2_multiplier"], p["subtract"] = -p["input2_multiplier"], True
    op.kind, op.attrs = "add16", p


SPECS = [OpSpec("add", reference, emit, tflm, elementwise_macs, in_place=True, to_int16=to_add16),
         OpSpec("add16", reference16, emit16, tflm, elementwise_macs, int16=True, in_place=True)]

ONNX = {"Add": from_add, "Sub": from_sub}
