"""Pooling, int8 and 16x8: max, average (AVERAGE_POOL_2D rounding) and MEAN (global average, any in/out
params); the 16x8 kinds (maxpool16, avgpool16) are the same rules with zero points 0 and the int16 range.

NumPy reference, C emission (gx_pool), TFLite Micro mapping (MAX_POOL_2D, AVERAGE_POOL_2D, MEAN), MACs
(one per output element).
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from ..codegen import c_struct
from ..tflm import nhwc
from ..reference import check_int32, clamp8, clamp16, i64, mbqm, pool_windows
from .. import reference as R
from ..ir import Op, TensorInfo
from ..parse import attr, label, pads as onnx_pads
from . import OpSpec, elementwise_macs


@R.nhwc_aware
def reference_max(x, p, clamp=clamp8):
    """MAX_POOL_2D int8: max over the valid taps, then the activation clamp (same in/out params)."""
    win, _ = pool_windows(i64(x), p, -(1 << 20))
    return clamp(win.max(axis=(4, 5)), p["activation_min"], p["activation_max"])


def reference_max16(x, p):
    return reference_max(x, p, clamp16)


def reference_avg16(x, p):
    return reference_avg(x, p, clamp16)


MAX_WINDOW16 = 65536          # taps whose int16 sum fits int32


def to_pool16(g, op):
    """A max / average pool or mean between int16 tensors (zero points 0): the int8 rules at the int16 range."""
    a = op.attrs
    if int(a["kernel"][0]) * int(a["kernel"][1]) >= MAX_WINDOW16:
        raise ExportError("%s node %r: a window of %d taps; at int16 the sum fits int32 below %d"
                          % (op.kind, op.name, a["kernel"][0] * a["kernel"][1], MAX_WINDOW16))
    op.kind += "16"
    a["activation_min"], a["activation_max"] = -32768, 32767


@R.nhwc_aware
def reference_avg(x, p, clamp=clamp8):
    """Average pooling, two rules (chosen at parse time from the quantization parameters):

    - "round_div" (AVERAGE_POOL_2D int8, same in/out params): sum of raw q over valid taps,
      divided by the tap count rounding half away from zero (C integer division).
    - "mean" (MEAN int8, any in/out params, no padding): (sum of q - zp_in * count) times the
      multiplier/shift from mean_params, + zp_out.
    """
    win, cnt = pool_windows(i64(x), p, 0)
    acc = win.sum(axis=(4, 5))                                # (B, C, OH, OW)
    if p["mode"] == "round_div":
        half = cnt // 2
        num = np.where(acc > 0, acc + half, acc - half)
        q = np.where(num >= 0, num // cnt, -((-num) // cnt))  # truncate toward zero
        return clamp(q, p["activation_min"], p["activation_max"])
    shifted = check_int32(acc - p["input_zero_point"] * p["count"], "mean sum")
    out = mbqm(shifted, p["mean_multiplier"], p["mean_shift"]) + p["output_offset"]
    return clamp(out, p["activation_min"], p["activation_max"])


def _emit_pool(em, i, op, name, mode, extra, lo, hi, kernel="gx_pool"):
    a = op.attrs
    out = em.g.tensors[op.output].shape
    if a.get("layout") == "nhwc":                          # a .tflite's images as TFLite holds them
        if kernel != "gx_pool":
            raise ExportError("%s node %r: no int16 pool over NHWC images" % (op.kind, op.name))
        _, H, W, C = em.g.tensors[op.inputs[0]].shape
        OH, OW = out[1:3] if len(out) == 4 else (1, 1)
        kernel = "gx_pool_nhwc"
    else:
        _, C, H, W = em.g.tensors[op.inputs[0]].shape
        OH, OW = out[2:] if len(out) == 4 else (1, 1)      # a mean without keepdims: (1, C)
    em.data.append(c_struct("gx_pool_t", name, [
        ("c", C), ("h", H), ("w", W), ("oh", OH), ("ow", OW), ("kh", a["kernel"][0]), ("kw", a["kernel"][1]),
        ("sh", a["strides"][0]), ("sw", a["strides"][1]), ("pad_t", a["pads"][0]), ("pad_l", a["pads"][1]),
        ("mode", mode)] + extra + [("act_min", lo), ("act_max", hi)]))
    ours = "%s(&%s, %s, %s)" % (kernel, name, em.ptr(op.inputs[0]), em.ptr(op.output))
    if em.g.esp_nn and kernel == "gx_pool_nhwc":    # the S3 firmware: ESP-NN's pools
        from ..esp_nn_adapters import pool_call
        nn = pool_call(em, i, op)
        if nn:
            return nn, ours
    return ours


def emit_max(em, i, op, name, kernel="gx_pool"):
    a = op.attrs
    return _emit_pool(em, i, op, name, "GX_POOL_MAX", [], a["activation_min"], a["activation_max"], kernel)


def emit_avg(em, i, op, name, kernel="gx_pool", qmin=-128, qmax=127):
    a = op.attrs
    lo, hi = max(qmin, a["activation_min"]), min(qmax, a["activation_max"])
    if a["mode"] == "round_div":
        return _emit_pool(em, i, op, name, "GX_POOL_AVG_ROUND", [], lo, hi, kernel)
    # MEAN int8: (sum - zp_in * count) * multiplier (1/count folded in) + zp_out.
    extra = [("mean_mult", a["mean_multiplier"]), ("mean_shift", a["mean_shift"]),
             ("mean_sub", a["input_zero_point"] * a["count"]), ("out_offset", a["output_offset"])]
    return _emit_pool(em, i, op, name, "GX_POOL_MEAN", extra, lo, hi, kernel)


def emit_max16(em, i, op, name):
    return emit_max(em, i, op, name, "gx_pool16")


def emit_avg16(em, i, op, name):
    return emit_avg(em, i, op, name, "gx_pool16", -32768, 32767)


def tflm(b, i, op):
    tfl, B, g, a = b.tfl, b.tfl.BuiltinOperator, b.g, op.attrs
    x, out = op.inputs[0], g.tensors[op.output]
    C, H, W = g.tensors[x].shape[1:]
    if op.kind in ("avgpool", "avgpool16") and a["mode"] == "mean":
        if tuple(a["kernel"]) != (H, W) or any(a["pads"]):
            raise TargetError("TFLM has no requantizing average pool (node %r)" % op.name)
        axis = b.const(np.array([1, 2], np.int32), "axis%d" % i, tfl.TensorType.INT32)
        keep = len(out.shape) == 4
        b.op(B.SUM if a.get("sum") else B.MEAN, [b.act(x), axis], [b.act(op.output, nhwc(out.shape) if keep else out.shape)],
                tfl.BuiltinOptions.ReducerOptions, tfl.ReducerOptionsT(keepDims=keep))
        return
    pad = b.padding(a, (H, W), out.shape[2:], a["kernel"], op.name)
    if pad is None:
        raise TargetError("TFLM pooling needs SAME or VALID padding (node %r)" % op.name)
    kh, kw = a["kernel"]
    b.op(B.MAX_POOL_2D if op.kind in ("maxpool", "maxpool16") else B.AVERAGE_POOL_2D, [b.act(x)], [b.act(op.output)],
            tfl.BuiltinOptions.Pool2DOptions,
            tfl.Pool2DOptionsT(padding=pad, strideW=a["strides"][1], strideH=a["strides"][0],
                               filterWidth=kw, filterHeight=kh))


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _pool(p, node, kind, kernel, strides, pads, mode=None, x=None, onnx_shape=None):
    x = x if x is not None else p.tensors[p.act_input(node, 0)]
    if len(x.shape) != 4:
        raise ExportError("%s: pooling needs an NCHW input" % label(node))
    name, scale, zp = p.output_q(node)
    C, H, W = x.shape[1:]
    oh = (H + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (W + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    out = TensorInfo(name, (1, C, oh, ow), scale, zp)
    attrs = {"kernel": tuple(kernel), "strides": tuple(strides), "pads": tuple(pads),
             "activation_min": -128, "activation_max": 127}
    same = scale == x.scale and zp == x.zero_point
    if kind == "maxpool" and not same:
        raise ExportError("%s: MaxPool input and output quantization differ" % label(node))
    if kind == "avgpool":
        if mode is None:
            mode = "round_div" if same else "mean"
        if mode in ("mean", "sum") and any(pads):
            raise ExportError("%s: average pooling with padding needs equal input and output quantization"
                              % label(node))
        count = int(kernel[0] * kernel[1])
        attrs["mean_multiplier"], attrs["mean_shift"] = R.mean_params(x.scale, scale, 1 if mode == "sum" else count)
        if mode == "sum":                  # TFLite SUM: MEAN's arithmetic without the 1/count
            attrs["sum"], mode = True, "mean"
        attrs["mode"] = mode
        attrs["count"] = count
        attrs["input_zero_point"] = x.zero_point
        attrs["output_offset"] = zp
    return p.add_op(kind, node, [x.name], out.shape, attrs, onnx_shape=onnx_shape)


def _pool_attrs(p, node):
    """(kernel, strides, pads, x as 4-D, the output's ONNX shape or None): a 1-D pool over (1, C, L) runs as a
    2-D one over a (1, L) image (a 4-D view, no copy)."""
    x = p.tensors[p.act_input(node, 0)]
    one_d = len(x.shape) == 3
    k = tuple(attr(node, "kernel_shape"))
    if attr(node, "ceil_mode", 0) or any(d != 1 for d in attr(node, "dilations", [1] * len(k))):
        raise ExportError("%s: ceil_mode and dilations are not supported" % label(node))
    if not one_d:
        st = tuple(attr(node, "strides", [1, 1]))
        return k, st, onnx_pads(node, x.shape[2:], k, st, (1, 1)), x, None
    from .conv import geometry_1d
    st, _, pads = geometry_1d(node, x.shape[2], k[0])
    out_len = (x.shape[2] + pads[1] + pads[3] - k[0]) // st[1] + 1
    return (1, k[0]), st, pads, p.as_4d(x), (1, x.shape[1], out_len)


def from_max_pool(p, node):
    if len(node.output) > 1 and node.output[1]:
        raise ExportError("%s: MaxPool indices output is not supported" % label(node))
    k, st, pads, x, shape = _pool_attrs(p, node)
    _pool(p, node, "maxpool", k, st, pads, x=x, onnx_shape=shape)


def from_average_pool(p, node):
    k, st, pads, x, shape = _pool_attrs(p, node)
    if attr(node, "count_include_pad", 0) and any(pads):
        raise ExportError("%s: count_include_pad=1 with padding is not supported" % label(node))
    _pool(p, node, "avgpool", k, st, pads, x=x, onnx_shape=shape)


def from_global_average_pool(p, node):
    x = p.tensors[p.act_input(node, 0)]
    if len(x.shape) == 3:                         # (1, C, L) -> (1, C, 1): a mean over a (1, L) image
        x4 = p.as_4d(x)
        _pool(p, node, "avgpool", x4.shape[2:], (1, 1), (0, 0, 0, 0), mode="mean", x=x4,
              onnx_shape=(1, x.shape[1], 1))
        return
    _pool(p, node, "avgpool", x.shape[2:], (1, 1), (0, 0, 0, 0), mode="mean")


def _reduce_axes(p, node, x):
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = p.consts.get(node.input[1])
    if axes is None:
        return list(range(1, len(x.shape)))
    return sorted(int(a) % len(x.shape) for a in np.asarray(axes).reshape(-1))


def _reduce_view(p, node, x, what):
    """A reduction over whole axes as a pool over a 4-D view: -> (the view, kernel, the output's ONNX shape,
    or None for an NCHW input, whose (1, C, 1, 1) output loses its unit axes without keepdims)."""
    axes, keep = _reduce_axes(p, node, x), attr(node, "keepdims", 1)
    if len(x.shape) == 3 and axes == [2]:             # (1, C, L): over a (1, L) image
        x4 = p.as_4d(x)
        return x4, x4.shape[2:], x.shape[:2] + ((1,) if keep else ())
    if len(x.shape) == 3 and axes == [1]:             # (1, T, D): over T, a (T, D) image of one channel
        x4 = p.view(x, (1, 1) + tuple(x.shape[1:]), "/4d_t")
        return x4, (x.shape[1], 1), (1, 1, x.shape[2]) if keep else (1, x.shape[2])
    if len(x.shape) == 4 and axes in ([2, 3], [1, 2, 3] if x.shape[1] == 1 else None):
        return x, x.shape[2:], None
    raise ExportError("%s: %s only over the spatial axes (2, 3) of an NCHW tensor, or axis 1 or 2 of a "
                      "rank-3 one" % (label(node), what))


def _reduce(p, node, what, kind, mode=None):
    """ReduceMean / ReduceSum / ReduceMax as a pool over the whole extent of a 4-D view (_reduce_view).
    ReduceMax whose output onnxruntime calibrated apart from its input: the max pool, then a requantize
    table (max commutes with the monotone table)."""
    x, kernel, shape = _reduce_view(p, node, p.tensors[p.act_input(node, 0)], what)
    name, scale, zp = p.output_q(node)
    if kind == "maxpool" and (scale != x.scale or zp != x.zero_point):
        from .lut import requant_table
        out4 = (1, x.shape[1], x.shape[2] - kernel[0] + 1, x.shape[3] - kernel[1] + 1)
        inner = TensorInfo(name + "/max", out4, x.scale, x.zero_point)
        p.tensors[inner.name] = inner
        attrs = {"kernel": tuple(kernel), "strides": (1, 1), "pads": (0, 0, 0, 0), "activation_min": -128,
                 "activation_max": 127}
        p.ops.append(Op("maxpool", (node.name or node.output[0]) + "/max", [x.name], inner.name, attrs))
        table = requant_table(inner, TensorInfo(name, out4, scale, zp), -128, 127)
        t = p.add_op("lut", node, [inner.name], out4, {"table": table, "function": "requantize"}, onnx_shape=shape)
    else:
        t = _pool(p, node, kind, kernel, (1, 1), (0, 0, 0, 0), mode=mode, x=x, onnx_shape=shape)
    if shape is None and not attr(node, "keepdims", 1):
        t.shape = t.shape[:2]


def from_reduce_mean(p, node):
    _reduce(p, node, "ReduceMean", "avgpool", "mean")


def from_reduce_sum(p, node):
    """TFLite SUM's rule: MEAN's without the 1/count (QuantizedMeanOrSum, compute_sum)."""
    _reduce(p, node, "ReduceSum", "avgpool", "sum")


def from_reduce_max(p, node):
    _reduce(p, node, "ReduceMax", "maxpool")


def from_global_max_pool(p, node):
    x = p.tensors[p.act_input(node, 0)]
    x4 = p.as_4d(x)
    _pool(p, node, "maxpool", x4.shape[2:], (1, 1), (0, 0, 0, 0), x=x4,
          onnx_shape=(1, x.shape[1], 1) if len(x.shape) == 3 else None)


SPECS = [OpSpec("maxpool", reference_max, emit_max, tflm, elementwise_macs, to_int16=to_pool16),
         OpSpec("avgpool", reference_avg, emit_avg, tflm, elementwise_macs, to_int16=to_pool16),
         OpSpec("maxpool16", reference_max16, emit_max16, tflm, elementwise_macs, int16=True),
         OpSpec("avgpool16", reference_avg16, emit_avg16, tflm, elementwise_macs, int16=True)]

ONNX = {"MaxPool": from_max_pool, "AveragePool": from_average_pool, "GlobalAveragePool": from_global_average_pool,
        "GlobalMaxPool": from_global_max_pool, "ReduceMean": from_reduce_mean, "ReduceMax": from_reduce_max,
        "ReduceSum": from_reduce_sum}
