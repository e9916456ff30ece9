"""Elementwise functions as tables: int8 lut (tanh, sigmoid, hardswish, gelu (erf and tanh forms),
hardsigmoid, leakyrelu (and PRelu of one slope), elu, celu, selu, softplus, softsign, relu, clip, requantize
as 256 entries), the 16x8 tanh and sigmoid (TFLM's int16 rules) and the 16x8 relu / clip / requantize (requant16: a
rescale and a clamp; a table of 65536 entries would not fit).

ONNX rules (Relu, Clip, Tanh, Sigmoid, HardSwish, Gelu / FastGelu (com.microsoft, made by
export/onnx_fuse.py from torch's decomposed GELU; or ONNX Gelu), HardSigmoid, LeakyRelu, PRelu, Elu, Celu,
Selu, Softplus, Softsign; QuantizeLinear after DequantizeLinear), NumPy reference, C emission (gx_lut /
gx_tanh16), TFLite Micro mapping (TANH / LOGISTIC + QUANTIZE, HARD_SWISH, GELU, LEAKY_RELU, ELU, RELU,
QUANTIZE; TANH int16; HardSigmoid, Celu, Selu, Softplus and Softsign have no TFLM builtin), MACs (one per
output element).

A smooth function f is the table quantize(f(dequantize(q))) for the 256 int8 codes (FLOAT_FUNCTIONS): what
onnxruntime's QDQ graph computes in float, so the C matches it, whatever f costs.
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from ..codegen import INT32_MAX, c_array, c_struct
from ..reference import i64
from ..tflm import REASON_TANH, nhwc
from .. import reference as R
from ..ir import Op, TensorInfo
from ..parse import attr, label
from . import OpSpec, elementwise_macs


def requant_table(x, out, lo, hi):
    """TFLM ReluQuantized / requantize rule as a table: zp_out + MBQM(q - zp_in, s_in / s_out), clamped."""
    m, s = R.quantize_multiplier(float(x.scale) / float(out.scale))
    q = np.arange(-128, 128, dtype=np.int64)
    v = R.mbqm(q - x.zero_point, m, s) + out.zero_point
    return R.clamp8(v, lo, hi)


REASON_FIXED_POINT = ("TFLM computes int8 %s in fixed point; our 256-entry table is quantize(f(dequantize(q))), "
                      "which matches onnxruntime: they can differ by 1 LSB on a few codes")
NO_TFLM = {"gelu": "the pip tflite-micro build registers no GELU kernel (\"Didn't find op for builtin opcode "
                   "'GELU'\")", "hardsigmoid": "TFLite has no HARD_SIGMOID builtin"}
NO_TFLM["gelu_tanh"] = NO_TFLM["gelu"]
NO_TFLM.update({f: "TFLite has no %s builtin" % f.upper() for f in ("celu", "selu", "softplus", "softsign")})


def _erf(r):
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(r)


FLOAT_FUNCTIONS = {
    "tanh": lambda r, a: np.tanh(r),
    "sigmoid": lambda r, a: 1.0 / (1.0 + np.exp(-r)),
    "hardswish": lambda r, a: r * np.clip(r + 3.0, 0.0, 6.0) / 6.0,        # ONNX HardSwish: x * relu6(x + 3) / 6
    "gelu": lambda r, a: 0.5 * r * (1.0 + _erf(r / np.sqrt(2.0))),
    "gelu_tanh": lambda r, a: 0.5 * r * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (r + 0.044715 * r ** 3))),
    "hardsigmoid": lambda r, a: np.clip(a["alpha"] * r + a["beta"], 0.0, 1.0),
    "leakyrelu": lambda r, a: np.where(r >= 0, r, a["alpha"] * r),
    "scale": lambda r, a: r * a["k"],                 # Mul / Div by a constant scalar
    "elu": lambda r, a: np.where(r > 0, r, a["alpha"] * np.expm1(np.minimum(r, 0.0))),
    "celu": lambda r, a: np.maximum(r, 0.0) + np.minimum(0.0, a["alpha"] * np.expm1(np.minimum(r, 0.0) / a["alpha"])),
    "selu": lambda r, a: a["gamma"] * np.where(r > 0, r, a["alpha"] * np.expm1(np.minimum(r, 0.0))),
    "softplus": lambda r, a: np.logaddexp(0.0, r),
    "softsign": lambda r, a: r / (1.0 + np.abs(r)),
}


def float_table(x, out, function, params=None):
    """FLOAT_FUNCTIONS[function] (with its params: alpha, beta) as a table: quantize(f(dequantize(q))) in
    float64, rounding half away from zero."""
    q = np.arange(-128, 128, dtype=np.float64)
    real = float(x.scale) * (q - x.zero_point)
    y = FLOAT_FUNCTIONS[function](real, params or {})
    v = y / float(out.scale)
    r = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return R.clamp8(r.astype(np.int64) + out.zero_point)


def reference(x, p):
    """Any int8 -> int8 elementwise function as a 256-entry table indexed by x + 128."""
    table = np.asarray(p["table"], dtype=np.int8)
    return table[i64(x) + 128]


def reference16(x, p):
    from ..int16_ref import tanh_int16
    return tanh_int16(x, p)


def emit(em, i, op, name):
    p = em.p
    em.data.append("/* %s as a 256-entry table */\n" % op.attrs["function"]
                     + c_array("int8_t", "%s_t%d" % (p, i), op.attrs["table"]))
    return "gx_lut(%s_t%d, %d, %s, %s)" % (p, i, em.g.tensors[op.output].size, em.ptr(op.inputs[0]),
                                          em.ptr(op.output))


def emit16(em, i, op, name):
    """TFLM's int16 tanh: the power-of-two case (input_multiplier 0) becomes multiplier 3 << shift,
    shift 0; the rescale runs in int32 when 32768 * multiplier + rounding provably fits (wide = 0),
    else in int64 clamped to +-65535 (wide = 1)."""
    m, ls = int(op.attrs["input_multiplier"]), int(op.attrs["input_left_shift"])
    if m == 0:
        m, ls = 3 << ls, 0
    rnd = (1 << (ls - 1)) if ls > 0 else 0
    em.data.append(c_struct("gx_tanh16_t", name, [
        ("n", em.g.tensors[op.output].size), ("mult", m), ("left_shift", ls),
        ("wide", int(32768 * m + rnd > INT32_MAX)), ("table", "%s_sigmoid16" % em.p)]))
    return "gx_tanh16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    B = b.tfl.BuiltinOperator
    f = op.attrs["function"]
    x, y = b.act(op.inputs[0]), op.output
    if f in ("tanh", "sigmoid"):
        scale, zp = (1.0 / 128, 0) if f == "tanh" else (1.0 / 256, -128)
        mid = b.act("%s_fixed%d" % (f, i), nhwc(b.g.tensors[y].shape), scale, zp)
        b.op(B.TANH if f == "tanh" else B.LOGISTIC, [x], [mid])
        b.op(B.QUANTIZE, [mid], [b.act(y)])
        b.notes.append("op %d (%s): %s" % (i, f, REASON_TANH))
    elif f == "hardswish":
        b.op(B.HARD_SWISH, [x], [b.act(y)])
        b.notes.append("op %d (hardswish): %s" % (i, REASON_FIXED_POINT % "HARD_SWISH"))
    elif f == "scale":                # MUL by the factor as an int8 constant (+-127 at scale |k| / 127)
        k = float(op.attrs["k"])
        c = b.const(np.array([127 if k > 0 else -127], np.int8), "k%d" % i, b.tfl.TensorType.INT8,
                    [abs(k) / 127.0], 0)
        b.op(B.MUL, [x, c], [b.act(y)], b.tfl.BuiltinOptions.MulOptions, b.tfl.MulOptionsT())
        b.notes.append("op %d (scale): TFLM's int8 MUL by the factor %.6g (rounds differently from our table "
                       "of quantize(k dequantize(q)), which matches onnxruntime)" % (i, k))
    elif f in NO_TFLM:
        raise TargetError("no TFLM mapping for %s (node %r): %s" % (f, op.name, NO_TFLM[f]))
    elif f == "leakyrelu":
        o = b.tfl.LeakyReluOptionsT()
        o.alpha = op.attrs["alpha"]
        b.op(B.LEAKY_RELU, [x], [b.act(y)], b.tfl.BuiltinOptions.LeakyReluOptions, o)
        b.notes.append("op %d (leakyrelu): %s" % (i, REASON_FIXED_POINT % "LEAKY_RELU"))
    elif f == "relu" or (f == "clip" and op.attrs.get("bounds") == (0.0, None)):
        b.op(B.RELU, [x], [b.act(y)])     # TFLM's ReluQuantized: the rule of our table
    elif f == "clip" and op.attrs.get("bounds") in ((0.0, 6.0), (-1.0, 1.0)):
        src, out = b.g.tensors[op.inputs[0]], b.g.tensors[y]
        if (src.scale, src.zero_point) != (out.scale, out.zero_point):     # RELU6 only clamps: requantize first
            mid = b.act("clip_in%d" % i, nhwc(out.shape), out.scale, out.zero_point)
            b.op(B.QUANTIZE, [x], [mid])
            x = mid
        b.op(B.RELU6 if op.attrs["bounds"] == (0.0, 6.0) else B.RELU_N1_TO_1, [x], [b.act(y)])
    elif f == "elu" and op.attrs["alpha"] == 1.0:
        b.op(B.ELU, [x], [b.act(y)])
        b.notes.append("op %d (elu): %s" % (i, REASON_FIXED_POINT % "ELU"))
    elif f == "requantize":
        b.op(B.QUANTIZE, [x], [b.act(y)])
    else:
        raise TargetError("no TFLM mapping for elementwise %s (node %r)" % (f, op.name))


def tflm16(b, i, op):
    """TANH, int16 in/out, zero point 0, output scale 2^-15 (checked by the parser)."""
    b.op(b.tfl.BuiltinOperator.TANH, [b.act(op.inputs[0])], [b.act(op.output)])


def reference_sigmoid16(x, p):
    from ..int16_ref import sigmoid_int16
    return sigmoid_int16(x, p)


def emit_sigmoid16(em, i, op, name):
    """TFLM's int16 logistic: the power-of-two case (input_multiplier 0) is multiplier 3, shift 0."""
    m, ls = int(op.attrs["input_multiplier"]), int(op.attrs["input_left_shift"])
    if m == 0:
        m, ls = 3, 0
    rnd = (1 << (ls - 1)) if ls > 0 else 0
    em.data.append(c_struct("gx_tanh16_t", name, [
        ("n", em.g.tensors[op.output].size), ("mult", m), ("left_shift", ls),
        ("wide", int(32768 * m + rnd > INT32_MAX)), ("table", "%s_sigmoid16" % em.p)]))
    return "gx_sigmoid16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm_sigmoid16(b, i, op):
    """LOGISTIC, int16 in/out, zero point 0, output scale 2^-15 (checked by the parser)."""
    b.op(b.tfl.BuiltinOperator.LOGISTIC, [b.act(op.inputs[0])], [b.act(op.output)])


def reference_requant16(x, p):
    """int16 -> int16, zero points 0: clamp(MBQM(x, s_in / s_out), act_min, act_max) (TFLite's Requantize,
    then the bounds of a clip or relu as CalculateActivationRangeQuantized gives them on the int16 grid)."""
    return R.clamp16(R.mbqm(i64(x), p["multiplier"], p["shift"]), p["act_min"], p["act_max"])


def emit_requant16(em, i, op, name):
    a = op.attrs
    em.data.append(c_struct("gx_requant16_t", name, [
        ("n", em.g.tensors[op.output].size), ("mult", a["multiplier"]), ("shift", a["shift"]),
        ("act_min", a["act_min"]), ("act_max", a["act_max"])]))
    return "gx_requant16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm_requant16(b, i, op):
    """QUANTIZE int16 -> int16 (a requantize). A clip or relu at int16 is not mapped to TFLM here."""
    if op.attrs["function"] != "requantize":
        raise TargetError("the TFLM baseline does not map an int16 %s (node %r) here" % (op.attrs["function"], op.name))
    b.op(b.tfl.BuiltinOperator.QUANTIZE, [b.act(op.inputs[0])], [b.act(op.output)])


# TFLM's int16 tanh against tanh rounded in float32 (onnxruntime), on all 65,536 codes at 1,000 input scales
# 1e-7 .. 10: at most 3 LSB of 2^-15 (1: 216 scales, 2: 629, 3: 155); bit-exact with TFLM, so kept.
TANH16_ORT_LSB = 3


# -- 16x8 tables: any smooth or piecewise function FLOAT_FUNCTIONS has, int16 in and out (ours)

LUT16_STEPS = (7, 6, 5, 4, 3)   # codes per table entry 2^k: 513 .. 8,193 entries
LUT16_MAX_EXACT = 64            # segments stored code by code (a kink, a saturation) at most
LUT16_BUDGET = 1.0              # |table - f(x) / s_y| in output LSB, on every input code


def _lut16_real(x, out, function, params, codes):
    """f(dequantize(codes)) on the output grid, in float64 and in LSB (not rounded), clamped to int16."""
    real = float(x.scale) * np.asarray(codes, np.float64)
    return np.clip(FLOAT_FUNCTIONS[function](real, params) / float(out.scale), -32768.0, 32767.0)


def _round16(v):
    return np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -32768, 32767).astype(np.int64)


def lut16_table(x, out, function, params):
    """The 16x8 table of f between int16 tensors (zero points 0), or None when none fits the budget:
    for k in LUT16_STEPS, entries at the codes -32768 + j 2^k (j = 0 .. 2^(16-k)) read with linear
    interpolation, and the segments where that misses f by more than LUT16_BUDGET LSB on some code stored
    code by code. The smallest such table in bytes wins. Within 1 LSB of f means within 1 LSB of
    onnxruntime (which rounds f in float32: |ort - f| <= 1/2, so |ours - ort| < 2)."""
    every = np.arange(-32768, 32768, dtype=np.int64)
    want = _lut16_real(x, out, function, params, every)
    best = None
    for k in LUT16_STEPS:
        grid = np.arange(-32768, 32769, 1 << k, dtype=np.int64)
        table = _round16(_lut16_real(x, out, function, params, grid))
        got = lut16_interpolate(every, table, k)
        seg_err = np.abs(got - want).reshape(-1, 1 << k).max(axis=1)
        bad = np.nonzero(seg_err > LUT16_BUDGET)[0]
        if len(bad) > LUT16_MAX_EXACT:
            continue
        exact = _round16(want.reshape(-1, 1 << k)[bad]).reshape(-1)
        size = 2 * (len(table) + len(exact)) + 2 * len(bad)
        if best is None or size < best["bytes"]:
            best = {"log2_step": k, "table": table.astype(np.int16), "exact_segments": bad.astype(np.int16),
                    "exact": exact.astype(np.int16), "bytes": size}
    if best is not None:
        lut = reference_lut16(every.astype(np.int16), best)
        best["max_lsb"] = float(np.abs(lut - want).max())
    return best


def lut16_interpolate(codes, table, k):
    u = np.asarray(codes, np.int64) + 32768
    j, r = u >> k, u & ((1 << k) - 1)
    a, b = table[j].astype(np.int64), table[j + 1].astype(np.int64)
    return a + (((b - a) * r + (1 << (k - 1))) >> k)


def reference_lut16(x, p):
    """int16 -> int16: the interpolated table, or the stored codes of an exact segment (gx_lut16)."""
    k = int(p["log2_step"])
    y = lut16_interpolate(x, np.asarray(p["table"], np.int64), k)
    u = R.i64(x) + 32768
    j, r = u >> k, u & ((1 << k) - 1)
    exact = np.asarray(p["exact"], np.int64).reshape(-1, 1 << k) if len(p["exact_segments"]) else None
    for e, seg in enumerate(np.asarray(p["exact_segments"], np.int64)):
        hit = j == seg
        y = np.where(hit, exact[e][r], y)
    return y.astype(np.int16)


def emit_lut16(em, i, op, name):
    a, p = op.attrs, em.p
    em.data.append("/* %s, int16: %d entries every %d codes, interpolated; %d segments stored code by code */\n"
                   % (a["function"], len(a["table"]), 1 << a["log2_step"], len(a["exact_segments"]))
                   + c_array("int16_t", "%s_t%d" % (p, i), a["table"]))
    seg = exact = "0"
    if len(a["exact_segments"]):
        seg, exact = "%s_ts%d" % (p, i), "%s_te%d" % (p, i)
        em.data.append(c_array("int16_t", seg, a["exact_segments"]) + c_array("int16_t", exact, a["exact"]))
    em.data.append(c_struct("gx_lut16_t", name, [
        ("n", em.g.tensors[op.output].size), ("log2_step", a["log2_step"]), ("table", "%s_t%d" % (p, i)),
        ("n_exact", len(a["exact_segments"])), ("exact_segment", seg), ("exact", exact)]))
    return "gx_lut16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm_lut16(b, i, op):
    raise TargetError("no TFLM mapping for an int16 %s (node %r): TFLite Micro's int16 kernels do not include it"
                      % (op.attrs["function"], op.name))


def to_lut16(g, op):
    """A table op between int16 tensors becomes lut16 (ours), or fails naming the node and the error."""
    x, y = g.tensors[op.inputs[0]], g.tensors[op.output]
    f = op.attrs["function"]
    params = {k: v for k, v in op.attrs.items() if k in ("alpha", "beta", "gamma", "k")}
    t = lut16_table(x, y, f, params)
    if t is None:
        raise ExportError("op %s at node %r: no int16 table within %g LSB of the function with at most %d exact "
                          "segments (input scale %g, output scale %g)" % (f, op.name, LUT16_BUDGET,
                                                                          LUT16_MAX_EXACT, x.scale, y.scale))
    op.kind = "lut16"
    op.attrs = dict(t, function=f)


def to_int16(g, op):
    """The tables int16_ref.to_16x8 does not convert itself (tanh, sigmoid, relu / clip / requantize and a
    positive scale have TFLM's rules there): leaky relu of a positive slope as TFLM's LEAKY_RELU, any other
    function as lut16."""
    if op.attrs["function"] == "leakyrelu" and op.attrs["alpha"] > 0:
        to_leakyrelu16(g, op)
    elif op.attrs["function"] in FLOAT_FUNCTIONS:
        to_lut16(g, op)
    else:
        raise ExportError("op %s at node %r has no int16 (16x8) form here" % (op.attrs["function"], op.name))


def leakyrelu16_params(x, out, alpha):
    """TFLM LEAKY_RELU Prepare: the identity and alpha rescales as quantized multipliers."""
    a = float(np.float32(alpha))
    mi, si = R.quantize_multiplier(float(x.scale) / float(out.scale))
    ma, sa = R.quantize_multiplier(float(x.scale) * a / float(out.scale))
    return {"alpha": a, "mult_identity": mi, "shift_identity": si, "mult_alpha": ma, "shift_alpha": sa}


def reference_leakyrelu16(x, p):
    """TFLM's QuantizeLeakyRelu at int16 (zero points 0): x >= 0 rescaled by the identity multiplier,
    x < 0 by alpha's, clamped."""
    v = R.i64(x)
    return R.clamp16(np.where(v >= 0, R.mbqm(v, p["mult_identity"], p["shift_identity"]),
                              R.mbqm(v, p["mult_alpha"], p["shift_alpha"])))


def emit_leakyrelu16(em, i, op, name):
    a = op.attrs
    em.data.append(c_struct("gx_leakyrelu16_t", name, [
        ("n", em.g.tensors[op.output].size), ("mult_identity", a["mult_identity"]),
        ("shift_identity", a["shift_identity"]), ("mult_alpha", a["mult_alpha"]), ("shift_alpha", a["shift_alpha"])]))
    return "gx_leakyrelu16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm_leakyrelu16(b, i, op):
    o = b.tfl.LeakyReluOptionsT()
    o.alpha = op.attrs["alpha"]
    b.op(b.tfl.BuiltinOperator.LEAKY_RELU, [b.act(op.inputs[0])], [b.act(op.output)],
         b.tfl.BuiltinOptions.LeakyReluOptions, o)


def to_leakyrelu16(g, op):
    x, y = g.tensors[op.inputs[0]], g.tensors[op.output]
    op.kind = "leakyrelu16"
    op.attrs = leakyrelu16_params(x, y, op.attrs["alpha"])


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _elementwise(p, node, function, lo=None, hi=None, params=None):
    x = p.tensors[p.act_input(node, 0)]
    name, scale, zp = p.output_q(node)
    out = TensorInfo(name, x.shape, scale, zp)
    if function in ("relu", "clip"):
        alo, ahi = R.activation_range("clip", out.scale, out.zero_point, lo, hi)
        table = requant_table(x, out, alo, ahi)
        params = dict(params or {}, bounds=(lo, hi))
    else:
        table = float_table(x, out, function, params)
    p.add_op("lut", node, [x.name], x.shape, dict(params or {}, table=table, function=function))


def from_quantize_linear(p, node):
    """Q(DQ(t)) with other parameters: a requantize table (same parameters: a reshape, no data moves). The
    model's input Q and the Q after each compute node are the parser's (it reads them with the node)."""
    d = p.producer.get(node.input[0])
    if d is None or d.op_type != "DequantizeLinear" or d.input[0] not in p.tensors:
        return
    t = p.tensors[d.input[0]]
    scale, zp = p.act_qparams(node)
    name = node.output[0]
    p.tensors[name] = TensorInfo(name, t.shape, scale, zp)
    if scale == t.scale and zp == t.zero_point:
        p.ops.append(Op("reshape", node.name or name, [t.name], name, {}))
    elif p.qtype.get(name) == "int16" and p.qtype.get(t.name, "int16") == "int16":   # int16_ref: requant16
        p.ops.append(Op("lut", node.name or name, [t.name], name, {"table": None, "function": "requantize"}))
    elif p.qtype.get(name) == "int16" or p.qtype.get(t.name) == "int16":
        raise ExportError("QuantizeLinear node %r: requantizing between int8 and int16 is not supported"
                          % (node.name or name))
    else:
        table = requant_table(t, p.tensors[name], -128, 127)
        p.ops.append(Op("lut", node.name or name, [t.name], name, {"table": table, "function": "requantize"}))


def from_relu(p, node):
    _elementwise(p, node, "relu", 0.0, None)


def from_clip(p, node):
    lo = attr(node, "min")
    hi = attr(node, "max")
    for i, name in ((1, "lo"), (2, "hi")):
        if len(node.input) > i and node.input[i]:
            v = p.consts.get(node.input[i])
            if v is None:
                raise ExportError("%s: Clip bounds must be constants" % label(node))
            if name == "lo":
                lo = float(v)
            else:
                hi = float(v)
    _elementwise(p, node, "clip", lo, hi)


def from_tanh(p, node):
    _elementwise(p, node, "tanh")


def from_sigmoid(p, node):
    _elementwise(p, node, "sigmoid")


def from_hard_swish(p, node):
    _elementwise(p, node, "hardswish")


def from_gelu(p, node):
    """com.microsoft Gelu (erf form; onnx_fuse.py makes it from torch's decomposed GELU), or ONNX Gelu
    (opset 20) with its approximate attribute."""
    approx = attr(node, "approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    _elementwise(p, node, "gelu_tanh" if approx == "tanh" else "gelu")


def from_fast_gelu(p, node):
    """com.microsoft FastGelu: the tanh form (a bias input is not supported)."""
    if len(node.input) > 1 and node.input[1]:
        raise ExportError("%s: FastGelu with a bias input is not supported" % label(node))
    _elementwise(p, node, "gelu_tanh")


def from_hard_sigmoid(p, node):
    _elementwise(p, node, "hardsigmoid", params={"alpha": float(attr(node, "alpha", 0.2)),
                                                 "beta": float(attr(node, "beta", 0.5))})


def _scalar_operand(p, node, i):
    """A constant scalar input of a Mul / Div (float, or int8 behind a DequantizeLinear), or None."""
    v = p.const_value(node, i)
    return float(v[0]) if v is not None and v.size == 1 else None


def from_mul(p, node):
    """An activation times a constant scalar: the table of quantize(k dequantize(q)); two activations:
    ops/mul.py."""
    for act, const in ((0, 1), (1, 0)):
        k = _scalar_operand(p, node, const)
        if k is not None:
            x = p.tensors[p.act_input(node, act)]
            name, scale, zp = p.output_q(node)
            out = TensorInfo(name, x.shape, scale, zp)
            p.add_op("lut", node, [x.name], x.shape, {"table": float_table(x, out, "scale", {"k": k}),
                                                      "function": "scale", "k": k})
            return
    from .mul import from_activations            # two activations (one may broadcast): TFLite MUL
    from_activations(p, node)


def from_div(p, node):
    """An activation divided by a constant scalar (an attention's 1 / sqrt(d)): the table of quantize(dequantize(q)
    / c)."""
    c = _scalar_operand(p, node, 1)
    if c is None or c == 0:
        raise ExportError("%s: Div only by a non-zero constant scalar" % label(node))
    _elementwise(p, node, "scale", params={"k": 1.0 / c})


def from_leaky_relu(p, node):
    _elementwise(p, node, "leakyrelu", params={"alpha": float(attr(node, "alpha", 0.01))})


def from_prelu(p, node):
    """PRelu with one slope for every channel (nn.PReLU()): a leaky relu of that slope. A slope per
    channel would need a table per channel: refused."""
    slope = p.const_value(node, 1)
    if slope is None or np.unique(np.asarray(slope)).size != 1:
        raise ExportError("%s: PRelu with a slope per channel (only one slope: nn.PReLU())" % label(node))
    _elementwise(p, node, "leakyrelu", params={"alpha": float(np.asarray(slope).reshape(-1)[0])})


def from_elu(p, node):
    _elementwise(p, node, "elu", params={"alpha": float(attr(node, "alpha", 1.0))})


def from_celu(p, node):
    _elementwise(p, node, "celu", params={"alpha": float(attr(node, "alpha", 1.0))})


def from_selu(p, node):
    _elementwise(p, node, "selu", params={"alpha": float(attr(node, "alpha", 1.67326319217681884765625)),
                                          "gamma": float(attr(node, "gamma", 1.05070102214813232421875))})


def from_softplus(p, node):
    _elementwise(p, node, "softplus")


def from_softsign(p, node):
    _elementwise(p, node, "softsign")


SPECS = [OpSpec("lut", reference, emit, tflm, elementwise_macs, in_place=True, to_int16=to_int16),
         OpSpec("tanh16", reference16, emit16, tflm16, elementwise_macs, int16=True, ort_lsb=TANH16_ORT_LSB),
         OpSpec("sigmoid16", reference_sigmoid16, emit_sigmoid16, tflm_sigmoid16, elementwise_macs, int16=True),
         OpSpec("requant16", reference_requant16, emit_requant16, tflm_requant16, elementwise_macs, int16=True,
                in_place=True),
         OpSpec("lut16", reference_lut16, emit_lut16, tflm_lut16, elementwise_macs, int16=True, in_place=True),
         OpSpec("leakyrelu16", reference_leakyrelu16, emit_leakyrelu16, tflm_leakyrelu16, elementwise_macs,
                int16=True, in_place=True)]

ONNX = {"QuantizeLinear": from_quantize_linear, "Relu": from_relu, "Clip": from_clip, "Tanh": from_tanh, "Sigmoid": from_sigmoid,
        "HardSwish": from_hard_swish, "Gelu": from_gelu, "FastGelu": from_fast_gelu, "HardSigmoid": from_hard_sigmoid,
        "LeakyRelu": from_leaky_relu, "Mul": from_mul, "Div": from_div, "PRelu": from_prelu, "Elu": from_elu,
        "Celu": from_celu, "Selu": from_selu, "Softplus": from_softplus, "Softsign": from_softsign}
