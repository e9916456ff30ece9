"""2-D convolution (grouped and depthwise included), int8 and 16x8 (conv16: int16 activations, int8 weights,
an int32 accumulator proved not to overflow, direct loops in gx_conv16).

NumPy reference (TFLite integer_ops/conv.h, depthwise_conv.h), C emission (gx_conv), TFLite Micro
mapping (CONV_2D / DEPTHWISE_CONV_2D, an explicit PAD when needed), MACs.
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from ..codegen import INT32_MAX, c_requant, c_struct
from .. import reference as R
from ..reference import i64, requantize
from ..ir import TensorInfo
from ..parse import attr, label, pads as onnx_pads
from . import OpSpec


def _requantize16(acc, p):
    from ..int16_ref import requantize16
    acc = R.check_int32(acc, "accumulator")
    return R.clamp16(requantize16(acc, p, (1, -1, 1, 1)), p["activation_min"], p["activation_max"])


def reference16(x, p):
    """conv16: the int8 rule over int16 inputs (zero point 0, so padding is 0), the int16 clamp."""
    return reference(x, p, requant=_requantize16)


def to_conv16(g, op):
    """The int8 conv between int16 tensors: the int32 accumulator's bound proved per output channel
    (|bias| + 32768 sum |w|), the int16 range."""
    a = op.attrs
    w = a["weights"].astype(np.int64).reshape(a["weights"].shape[0], -1)
    bound = np.abs(a["bias"].astype(np.int64)) + 32768 * np.abs(w).sum(axis=1)
    if int(bound.max(initial=0)) > INT32_MAX:
        raise ExportError("conv node %r: the int16 x int8 accumulator could reach %d, beyond int32 (%d taps): not "
                          "supported with int16 activations" % (op.name, int(bound.max()), w.shape[1]))
    op.kind = "conv16"
    a["input_offset"], a["output_offset"], a["activation_min"], a["activation_max"] = 0, 0, -32768, 32767


def emit16(em, i, op, name):
    a, p = op.attrs, em.p
    OC, CG, KH, KW = a["weights"].shape
    _, C, H, W = em.g.tensors[op.inputs[0]].shape
    _, _, OH, OW = em.g.tensors[op.output].shape
    em.arrays(i, a, a["weights"], a["bias"].astype(np.int64))
    em.data.append(c_struct("gx_conv_t", name, [
        ("c", C), ("h", H), ("w", W), ("oc", OC), ("oh", OH), ("ow", OW), ("kh", KH), ("kw", KW),
        ("sh", a["strides"][0]), ("sw", a["strides"][1]), ("dh", a["dilations"][0]), ("dw", a["dilations"][1]),
        ("pad_t", a["pads"][0]), ("pad_l", a["pads"][1]), ("groups", a["group"]),
        ("pad_value", 0), ("weights", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a))]))
    kernel = "gx_conv16_r64" if a.get("requant64") else "gx_conv16"   # a .tflite's int64 bias: TFLM's int64 rule
    return "%s(&%s, %s, %s)" % (kernel, name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm16(b, i, op):
    """CONV_2D at int16 (its int32 bias: TFLM's int32 accumulator, our rule). TFLM's int16 DEPTHWISE_CONV_2D
    does not give our outputs with an int32 bias (measured: up to 65,535 LSB apart), so it is not mapped."""
    if op.attrs["group"] != 1:
        raise TargetError("no TFLM mapping for an int16 depthwise or grouped conv (node %r): TFLM's int16 "
                          "DEPTHWISE_CONV_2D does not compute our int32-bias rule" % op.name)
    tflm(b, i, op)


def reference(x, p, requant=None):
    """The conv over NCHW; an op marked layout "nhwc" over NHWC (R.nhwc_aware), one marked input_nhwc reads an
    NHWC input (a .tflite's model input, read as it is) and writes NCHW."""
    if p.get("input_nhwc"):
        return _reference(np.transpose(x, (0, 3, 1, 2)), p, requant)
    return _reference(x, p, requant)


@R.nhwc_aware
def _reference(x, p, requant=None):
    """x (B, C, H, W) int8, weights (OC, C/group, KH, KW) -> (B, OC, OH, OW).

    Grouped convolution covers depthwise (group == C). Taps in the padding are skipped, which is
    the same as x == -input_offset there, so the input is padded with that value.
    """
    B, C, H, W = x.shape
    w = i64(p["weights"])
    OC, Cg, KH, KW = w.shape
    sh, sw = p["strides"]
    dh, dw = p["dilations"]
    pt, pl, pb, pr = p["pads"]
    G = p["group"]
    xo = np.zeros((B, C, H + pt + pb, W + pl + pr), dtype=np.int64)
    xo[:, :, pt:pt + H, pl:pl + W] = i64(x) + p["input_offset"]
    OH = (H + pt + pb - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pl + pr - dw * (KW - 1) - 1) // sw + 1
    # patches (B, C, OH, OW, KH, KW)
    patches = np.empty((B, C, OH, OW, KH, KW), dtype=np.int64)
    for ky in range(KH):
        for kx in range(KW):
            y0, x0 = ky * dh, kx * dw
            patches[:, :, :, :, ky, kx] = xo[:, :, y0:y0 + sh * (OH - 1) + 1:sh, x0:x0 + sw * (OW - 1) + 1:sw]
    OCg = OC // G
    acc = np.empty((B, OC, OH, OW), dtype=np.int64)
    for g in range(G):
        pg = patches[:, g * Cg:(g + 1) * Cg]                  # (B, Cg, OH, OW, KH, KW)
        wg = w[g * OCg:(g + 1) * OCg]                         # (OCg, Cg, KH, KW)
        acc[:, g * OCg:(g + 1) * OCg] = np.einsum("bcyxij,ocij->boyx", pg, wg)
    acc += i64(p["bias"]).reshape(1, OC, 1, 1)
    return requant(acc, p) if requant else requantize(acc, p, 1)


def nhwc_weights(a):
    """The IR's (OC, C/group, KH, KW) weights in gx_conv_nhwc's (and ESP-NN's) order: a conv OHWI, a depthwise
    [kh][kw][oc] (TFLite's 1HWO); (weights, depth multiplier or 0)."""
    w = a["weights"]
    oc, cg, kh, kw = w.shape
    if a["group"] == 1:
        return np.ascontiguousarray(w.transpose(0, 2, 3, 1)), 0
    if cg == 1:
        return np.ascontiguousarray(w[:, 0].transpose(1, 2, 0)), oc // a["group"]
    return None, None


def emit_nhwc(em, i, op, name):
    """Conv / depthwise conv over NHWC images (gx_conv_nhwc): the plain bias, padded taps skipped; on the S3
    firmware (GX_USE_ESP_NN) ESP-NN's conv instead (esp_nn_adapters.py)."""
    a, p = op.attrs, em.p
    w, mult = nhwc_weights(a)
    if w is None:
        raise ExportError("conv node %r: a grouped conv (group %d) over NHWC images is not supported"
                          % (op.name, a["group"]))
    OC, CG, KH, KW = a["weights"].shape
    _, H, W, C = em.g.tensors[op.inputs[0]].shape
    _, OH, OW, _ = em.g.tensors[op.output].shape
    bias = a["bias"].astype(np.int64)
    if int(np.abs(bias).max(initial=0)) + 255 * 128 * CG * KH * KW >= INT32_MAX:
        raise ExportError("%s: accumulator could overflow int32 (%d taps)" % (op.name, CG * KH * KW))
    em.arrays(i, a, w, bias)
    em.data.append(c_struct("gx_conv_nhwc_t", name, [
        ("c", C), ("h", H), ("w", W), ("oc", OC), ("oh", OH), ("ow", OW), ("kh", KH), ("kw", KW),
        ("sh", a["strides"][0]), ("sw", a["strides"][1]), ("dh", a["dilations"][0]), ("dw", a["dilations"][1]),
        ("pad_t", a["pads"][0]), ("pad_l", a["pads"][1]), ("depth_mult", mult), ("in_offset", a["input_offset"]),
        ("weights", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a))]))
    scratch = "(int32_t *)(void *)(%s)" % em.scratch(i) if mult else "0"
    ours = "gx_conv_nhwc(&%s, %s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output), scratch)
    if em.g.esp_nn and em.ptr(op.output) != em.ptr(op.inputs[0]):    # not in place: ESP-NN's conv
        from ..esp_nn_adapters import conv_call
        nn = conv_call(em, i, op, name, mult)
        if nn:
            return nn, ours
    return ours


def emit(em, i, op, name):
    """Conv / depthwise / grouped conv, NCHW; input_offset folded into the bias:
    acc = (bias + input_offset * sum(w)) + sum(w * x), padded taps reading the input zero point."""
    if op.attrs.get("layout") == "nhwc":
        return emit_nhwc(em, i, op, name)
    a, p = op.attrs, em.p
    w = a["weights"]
    OC, CG, KH, KW = w.shape
    _, C, H, W = em.g.tensors[op.inputs[0]].shape
    if a.get("input_nhwc"):
        _, H, W, C = em.g.tensors[op.inputs[0]].shape
    _, _, OH, OW = em.g.tensors[op.output].shape
    bias = a["bias"].astype(np.int64)
    folded = bias + a["input_offset"] * w.reshape(OC, -1).astype(np.int64).sum(axis=1)
    if int(np.abs(bias).max(initial=0)) + 2 * 128 * 128 * CG * KH * KW >= INT32_MAX:
        raise ExportError("%s: accumulator could overflow int32 (%d taps)" % (op.name, CG * KH * KW))
    em.arrays(i, a, w, folded)
    em.data.append(c_struct("gx_conv_t", name, [
        ("c", C), ("h", H), ("w", W), ("oc", OC), ("oh", OH), ("ow", OW), ("kh", KH), ("kw", KW),
        ("sh", a["strides"][0]), ("sw", a["strides"][1]), ("dh", a["dilations"][0]), ("dw", a["dilations"][1]),
        ("pad_t", a["pads"][0]), ("pad_l", a["pads"][1]), ("groups", a["group"]),
        ("pad_value", -a["input_offset"]), ("weights", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a)),
        ("in_nhwc", int(bool(a.get("input_nhwc")))),
        ("plane", int(a["group"] > 1 and em.ptr(op.inputs[0]) == em.ptr(op.output)))]))
    scratch = em.scratch(i) if "scratch%d" % i in em.plan.buffers else "0"
    return "gx_conv(&%s, %s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output), scratch)


def tflm(b, i, op):
    """CONV_2D or DEPTHWISE_CONV_2D (weights to TFLite layout), with an explicit PAD when needed."""
    tfl, B, I8, a = b.tfl, b.tfl.BuiltinOperator, b.tfl.TensorType.INT8, op.attrs
    x = op.inputs[0]
    w = a["weights"]
    OC, CG, KH, KW = w.shape
    C, H, W = b.g.tensors[x].shape[1:]
    pad = b.padding(a, (H, W), b.g.tensors[op.output].shape[2:], (KH, KW), op.name)
    xin = b.act(x)
    if pad is None:
        xin = b.explicit_pad(i, x, a["pads"])
        pad = tfl.Padding.VALID
    bt = b.bias(i, op)
    sh, sw = a["strides"]
    dh, dw = a["dilations"]
    if a["group"] == 1:
        wt = b.const(w.transpose(0, 2, 3, 1), "w%d" % i, I8, a["weight_scales"], 0)
        b.op(B.CONV_2D, [xin, wt, bt], [b.act(op.output)], tfl.BuiltinOptions.Conv2DOptions,
                tfl.Conv2DOptionsT(padding=pad, strideW=sw, strideH=sh, dilationWFactor=dw, dilationHFactor=dh))
    elif a["group"] == C and CG == 1:
        wt = b.const(w.transpose(1, 2, 3, 0), "w%d" % i, I8, a["weight_scales"], 3)
        b.op(B.DEPTHWISE_CONV_2D, [xin, wt, bt], [b.act(op.output)],
                tfl.BuiltinOptions.DepthwiseConv2DOptions,
                tfl.DepthwiseConv2DOptionsT(padding=pad, strideW=sw, strideH=sh, depthMultiplier=OC // C,
                                            dilationWFactor=dw, dilationHFactor=dh))
    else:
        raise TargetError("TFLM has no grouped convolution (node %r, group %d)" % (op.name, a["group"]))


def macs(op, tensors):
    return int(tensors[op.output].size * op.attrs["weights"][0].size)


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def geometry_1d(node, L, k):
    """A 1-D conv's (strides, dilations, pads) as those of a 2-D conv over a (1, L) image."""
    st, dil = int(attr(node, "strides", [1])[0]), int(attr(node, "dilations", [1])[0])
    auto = attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p0, p1 = list(attr(node, "pads", [0, 0]))
    elif auto == "VALID":
        p0 = p1 = 0
    else:
        total = max((-(-L // st) - 1) * st + dil * (k - 1) + 1 - L, 0)
        p0, p1 = (total // 2, total - total // 2) if auto == "SAME_UPPER" else (total - total // 2, total // 2)
    return (1, st), (1, dil), (0, int(p0), 0, int(p1))


def from_conv(p, node):
    """Conv over NCHW, or Conv1d over (N, C, L) as a 2-D conv over a (1, L) image (4-D views, no copies)."""
    x = p.tensors[p.act_input(node, 0)]
    rank = len(x.shape)
    if rank not in (3, 4):
        raise ExportError("%s: only 1-D and 2-D convolution (NCL / NCHW input) is supported" % label(node))
    s = p.source(node, node.input[1])
    if s[0] != "const" or s[1].ndim != rank:
        raise ExportError("%s: weights must be a constant %d-D int8 tensor" % (label(node), rank))
    oc = s[1].shape[0]
    w, s_w = p.weights(node, 1, oc)
    x = p.as_4d(x)
    w = w.reshape(w.shape[:2] + (1,) * (4 - rank) + w.shape[2:])
    group = int(attr(node, "group", 1))
    C, H, W = x.shape[1:]
    if w.shape[1] * group != C or oc % group:
        raise ExportError("%s: weight shape %s does not fit %d input channels, group %d" % (label(node), w.shape, C, group))
    kh, kw = w.shape[2:]
    if rank == 3:
        strides, dil, pads = geometry_1d(node, W, kw)
    else:
        strides = tuple(attr(node, "strides", [1, 1]))
        dil = tuple(attr(node, "dilations", [1, 1]))
        pads = onnx_pads(node, (H, W), (kh, kw), strides, dil)
    oh = (H + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (W + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    if oh < 1 or ow < 1:
        raise ExportError("%s: output would be empty" % label(node))
    bias = p.bias(node, 2, oc, x.scale, s_w)
    name, scale, zp = p.output_q(node)
    out = TensorInfo(name, (1, oc, oh, ow), scale, zp)
    attrs = {"weights": w.astype(np.int8), "bias": bias, "input_offset": -x.zero_point,
             "strides": strides, "dilations": dil, "pads": pads, "group": group,
             "weight_scales": s_w.astype(np.float32), "in_plane": H * W, "out_plane": oh * ow}
    attrs.update(p.requant_params(x.scale, s_w, out))
    p.add_op("conv", node, [x.name], out.shape, attrs, onnx_shape=(1, oc, ow) if rank == 3 else None)


def scratch(op):
    """Two im2col columns of one output pixel, int8 (GX_CONV_SCRATCH in csrc/gx_kernels.h), and for a depthwise
    conv that may run in place one output plane (GX_CONV_PLANE); over NHWC images a depthwise conv's int32
    accumulators (GX_CONV_NHWC_SCRATCH), or ESP-NN's scratch where it is larger (esp_nn_adapters: the S3)."""
    oc, cg, kh, kw = op.attrs["weights"].shape
    if op.attrs.get("layout") == "nhwc":
        ours = 4 * oc if (op.attrs["group"] > 1 and cg == 1) else 0
        nn = op.attrs.get("esp_nn_scratch", 0)
        return max(ours, nn)
    return 2 * cg * kh * kw + (op.attrs.get("out_plane", 0) if _depthwise_in_place(op) else 0)


def _depthwise_in_place(op) -> bool:
    """An NCHW depthwise conv of multiplier 1 whose output plane is no larger than its input's (stride >= 1)."""
    a = op.attrs
    oc, cg, kh, kw = a["weights"].shape
    return (a.get("layout") != "nhwc" and cg == 1 and a["group"] == oc and a.get("out_plane", 0) > 0
            and a.get("out_plane", 0) <= a.get("in_plane", 0))


def in_place(op):
    """Whether gx_conv may write op's output over its input: a depthwise 1x1 conv of stride 1 without padding
    (element k from element k); over NCHW images, at any size, a 1x1 conv of stride 1 without padding (each pixel
    pair's channels are read into the im2col columns before that pair's outputs are written) and a depthwise
    conv of multiplier 1 (each channel's output plane is built in scratch, then copied over its input plane,
    which no later channel reads)."""
    from ..planner import ANY_SIZE
    a = op.attrs
    oc, cg, kh, kw = a["weights"].shape
    if pointwise(op):
        return True
    if a.get("layout") == "nhwc":
        return False
    if a["group"] == 1 and (kh, kw) == (1, 1) and tuple(a["strides"]) == (1, 1) and not any(a["pads"]):
        return ANY_SIZE
    if _depthwise_in_place(op):
        return ANY_SIZE
    return False


def pointwise(op) -> bool:
    """A depthwise 1x1 conv of stride 1 without padding (a batch norm after a concat): output element k reads
    input element k only, so gx_conv may write over its input (the planner's in-place rule)."""
    a = op.attrs
    oc, cg, kh, kw = a["weights"].shape
    return (cg == 1 and a["group"] == oc and (kh, kw) == (1, 1) and tuple(a["strides"]) == (1, 1)
            and not any(a["pads"]))


SPECS = [OpSpec("conv", reference, emit, tflm, macs, scratch=scratch, in_place=in_place, to_int16=to_conv16),
         OpSpec("conv16", reference16, emit16, tflm16, macs, int16=True)]

ONNX = {"Conv": from_conv}
