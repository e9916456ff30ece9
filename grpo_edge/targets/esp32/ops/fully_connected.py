"""Fully connected: int8 (fc) and 16x8 (fc16).

NumPy reference (TFLite integer_ops/fully_connected.h), C emission (gx_fc / gx_fc16 in
csrc/gx_kernels*.h), TFLite Micro mapping (FULLY_CONNECTED), MACs.
"""
import numpy as np

from grpo_edge.errors import ExportError

from ..codegen import INT32_MAX, c_requant, c_struct
from ..reference import i64, requantize
from ..ir import TensorInfo
from ..parse import attr, label
from . import OpSpec


def reference(x, p):
    """x (B, IN) or (B, T, IN) int8 (every row alike); weights (OUT, IN) int8; bias (OUT,) int32 -> (B, OUT)
    or (B, T, OUT) int8.

    acc = sum(w * (x + input_offset)) + bias (reference/integer_ops/fully_connected.h).
    """
    w = i64(p["weights"])
    xo = i64(x).reshape(-1, w.shape[1]) + p["input_offset"]  # (B rows, IN)
    acc = xo @ w.T + i64(p["bias"])                         # (B rows, OUT)
    return requantize(acc, p, 1).reshape(np.shape(x)[:-1] + (w.shape[0],))


def reference16(x, p):
    from ..int16_ref import fully_connected16
    return fully_connected16(x, p)


def emit(em, i, op, name):
    a, p = op.attrs, em.p
    w = a["weights"].astype(np.int64)
    OUT, IN = w.shape
    bias = a["bias"].astype(np.int64)
    folded = bias + a["input_offset"] * w.sum(axis=1)
    fold = int(np.abs(bias).max(initial=0)) + 2 * 128 * 128 * IN < INT32_MAX
    em.arrays(i, a, a["weights"], folded if fold else bias)
    em.data.append(c_struct("gx_fc_t", name, [
        ("n_in", IN), ("n_out", OUT), ("in_offset", 0 if fold else a["input_offset"]),
        ("weights", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a))]))
    ours = _rows(em, op, "gx_fc(&%s, %%s, %%s)" % name, IN, OUT)
    if em.g.esp_nn:                                 # the S3 firmware: ESP-NN's FC on the same arrays
        from ..esp_nn_adapters import fc_call
        nn = fc_call(em, i, op, 0 if fold else a["input_offset"])
        if nn:
            return nn, ours
    return ours


def _rows(em, op, call, IN, OUT) -> str:
    """The call on the one row of a (1, IN) input, or a loop over the rows of a (1, T, IN) one."""
    rows = em.g.tensors[op.inputs[0]].size // IN
    x, y = em.ptr(op.inputs[0]), em.ptr(op.output)
    if rows == 1:
        return call % (x, y)
    return "{ int r_; for (r_ = 0; r_ < %d; ++r_) %s; }" % (rows, call % ("(%s) + r_ * %d" % (x, IN),
                                                                             "(%s) + r_ * %d" % (y, OUT)))


def emit16(em, i, op, name):
    """int16 x int8 with an int32 bias and accumulator (to_16x8 proved it cannot overflow; checked
    again here for hand-made graphs), double-rounding requantization, clamp; no offsets."""
    a, p = op.attrs, em.p
    w = a["weights"].astype(np.int64)
    OUT, IN = w.shape
    bound = int(np.abs(a["bias"].astype(np.int64)).max(initial=0)) + 32768 * int(np.abs(w).sum(axis=1).max(initial=0))
    if bound > INT32_MAX:
        raise ExportError("%s: int16 x int8 accumulator could overflow int32 (%d inputs)" % (op.name, IN))
    em.arrays(i, a, a["weights"], a["bias"])
    em.data.append(c_struct("gx_fc16_t", name, [
        ("n_in", IN), ("n_out", OUT), ("weights", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a, False))]))
    kernel = "gx_fc16_r64" if a.get("requant64") else "gx_fc16"     # a .tflite's int64 bias: TFLM's int64 rule
    return _rows(em, op, kernel + "(&%s, %%s, %%s)" % name, IN, OUT)


def tflm(b, i, op):
    """FULLY_CONNECTED; fc16: int16 in/out via act(); the INT32 bias picks TFLM's int32 accumulator."""
    tfl, a = b.tfl, op.attrs
    wt = b.const(a["weights"], "w%d" % i, tfl.TensorType.INT8, a["weight_scales"], 0)
    bt = b.bias(i, op)
    b.op(tfl.BuiltinOperator.FULLY_CONNECTED, [b.act(op.inputs[0]), wt, bt], [b.act(op.output)],
         tfl.BuiltinOptions.FullyConnectedOptions,
         tfl.FullyConnectedOptionsT(keepNumDims=len(b.g.tensors[op.output].shape) > 2))


def macs(op, tensors):
    w = op.attrs["weights"]
    return int(w.size * (tensors[op.inputs[0]].size // w.shape[1]))


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def from_gemm(p, node):
    x = p.tensors[p.act_input(node, 0)]
    if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
        raise ExportError("%s: only alpha=1, beta=1, transA=0 are supported" % label(node))
    s = p.source(node, node.input[1])
    w = s[1] if s[0] == "const" else None
    if w is None or w.ndim != 2:
        raise ExportError("%s: weights must be a constant 2-D int8 tensor" % label(node))
    trans_b = attr(node, "transB", 0)
    out_f = w.shape[0] if trans_b else w.shape[1]
    w, s_w = p.weights(node, 1, out_f)
    w = w if trans_b else w.T
    _fc(p, node, x, np.ascontiguousarray(w), s_w, 2)


def from_mat_mul(p, node):
    """activation x constant 2-D weights: a fully connected layer; two activations: ops/matmul.py."""
    s = p.source(node, node.input[1])
    if s[0] == "act":
        from .matmul import from_activations
        return from_activations(p, node)
    x = p.tensors[p.act_input(node, 0)]
    if s[0] != "const" or s[1].ndim != 2:
        raise ExportError("%s: only activation x constant 2-D weight MatMul is supported" % label(node))
    w, s_w = p.weights(node, 1, s[1].shape[1])
    _fc(p, node, x, np.ascontiguousarray(w.T), s_w, None)


def _fc(p, node, x, w, s_w, bias_index):
    """(1, IN) -> (1, OUT), or every row of a (1, T, IN) -> (1, T, OUT) (a MatMul over a sequence)."""
    if len(x.shape) not in (2, 3) or x.shape[-1] != w.shape[1]:
        raise ExportError("%s: input shape %s does not match weights %s (flatten first)"
                          % (label(node), x.shape, w.shape))
    bias = p.bias(node, bias_index, w.shape[0], x.scale, s_w) if bias_index else np.zeros(w.shape[0], np.int32)
    name, scale, zp = p.output_q(node)
    out = TensorInfo(name, tuple(x.shape[:-1]) + (w.shape[0],), scale, zp)
    attrs = {"weights": w.astype(np.int8), "bias": bias, "input_offset": -x.zero_point,
             "weight_scales": s_w.astype(np.float32)}
    attrs.update(p.requant_params(x.scale, s_w, out))
    p.add_op("fc", node, [x.name], out.shape, attrs)


SPECS = [OpSpec("fc", reference, emit, tflm, macs),
         OpSpec("fc16", reference16, emit16, tflm, macs, int16=True)]

ONNX = {"Gemm": from_gemm, "MatMul": from_mat_mul}
