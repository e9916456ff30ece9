"""Layer norm over the last axis, int8 in and out (LayerNormalization; also a decomposed one, which
export/onnx_fuse.py fuses before quantizing).

TFLite has no layer norm op, so this arithmetic is ours, in integers throughout (gx_layernorm in
csrc/gx_kernels.h):
    e_k   = d x_k - sum(x)                      (int32; the input's zero point cancels, and so does its scale)
    sigma = isqrt(((sum e_k^2 + eps) << 16) / d)  = std(e) 2^8  (eps = d^3 epsilon / s_x^2, from the model)
    n_k   = (e_k floor(2^40 / sigma) + 2^15) >> 16  = e_k / std(e) in Q16
    out_k = clamp(mbqm(n_k gamma_k + B_k, M_k) + zp_out)
with gamma int8 (onnxruntime's quantized weight), B_k = round(beta_k / s_gamma_k 2^16) and M_k = s_gamma_k /
(s_out 2^16). onnxruntime computes the same function in float between the model's Q / DQ pairs: the two
agree within 1 LSB (tests/test_esp32_common_ops.py). No TFLite Micro mapping.

The 16x8 form (layernorm16, gx_layernorm16 in csrc/gx_kernels16.h) keeps the steps but not the fixed
2^8 scaling of sigma: an int16 input's e reaches d 2^16, so the variance v = (sum e^2 + eps) / d is scaled by
4^t into [2^60, 2^62) row by row and sigma = isqrt(v 4^t) = std(e) 2^t keeps 31 bits.
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from .. import reference as R
from ..codegen import INT32_MAX, c_requant, c_struct
from ..fixedpoint import isqrt64
from ..ir import TensorInfo
from ..parse import attr, label
from . import OpSpec, elementwise_macs

MAX_D = 1024         # (sum e^2 + eps) << 16 stays in int64


def reference(x, p):
    D = int(p["d"])
    xs = R.i64(x).reshape(-1, D)
    e = D * xs - xs.sum(axis=1, keepdims=True)
    ss = (e * e).sum(axis=1)
    sigma = isqrt64(((ss + int(p["eps"])) << 16) // D)
    rec = np.where(sigma > 0, (np.int64(1) << 40) // np.maximum(sigma, 1), 0).reshape(-1, 1)
    n = (e * rec + (1 << 15)) >> 16
    acc = n * R.i64(p["gamma"]).reshape(1, D) + R.i64(p["bias"]).reshape(1, D)
    return R.requantize(acc, p, 1).reshape(np.shape(x))


MAX_D16 = 1024       # at int16, sum e^2 < d^3 2^32 stays in int64


def bit_length(v):
    """Bits of non-negative int64 values (0 for 0), exactly."""
    v = np.asarray(v, np.int64)
    return sum(((v >> k) > 0).astype(np.int64) for k in range(63))


def reference16(x, p):
    """Layer norm at int16 (zero points 0; ours, gx_layernorm16): the variance v = (sum e^2 + eps) / d scaled
    by 4^t into [2^60, 2^62) so that sigma = isqrt(v 4^t) keeps 31 bits, whatever the input's spread; the
    normalized value e / std(e) in Q16 from floor(2^62 / sigma), then the int8 kernel's affine and requantize."""
    D = int(p["d"])
    xs = R.i64(x).reshape(-1, D)
    e = D * xs - xs.sum(axis=1, keepdims=True)
    v = ((e * e).sum(axis=1) + int(p["eps"])) // D
    bits = bit_length(v)
    t = np.where(bits > 0, (62 - bits) // 2, 31)
    sigma = isqrt64(np.where(bits > 0, v << (2 * t), 0))
    rec = np.where(sigma > 0, (np.int64(1) << 62) // np.maximum(sigma, 1), 0).reshape(-1, 1)
    sh = (46 - t).reshape(-1, 1)
    n = (e * rec + (np.int64(1) << (sh - 1))) >> sh
    acc = R.check_int32(n * R.i64(p["gamma"]).reshape(1, D) + R.i64(p["bias"]).reshape(1, D), "accumulator")
    out = R.mbqm(acc, R.i64(p["multiplier"]).reshape(1, D), R.i64(p["shift"]).reshape(1, D))
    return R.clamp16(out, p["activation_min"], p["activation_max"]).reshape(np.shape(x))


def to_int16(g, op):
    """The int8 layer norm between int16 tensors (zero points 0): the int16 range, the int64 bound checked."""
    a, D = op.attrs, int(op.attrs["d"])
    if D > MAX_D16 or int(a["eps"]) + D ** 3 * (1 << 32) >= 1 << 63:
        raise ExportError("layer norm node %r over %d values with eps %d: at int16 the kernel's int64 variance "
                          "needs d <= %d and a smaller epsilon / input scale^2" % (op.name, D, a["eps"], MAX_D16))
    op.kind = "layernorm16"
    a["output_offset"], a["activation_min"], a["activation_max"] = 0, -32768, 32767


def emit16(em, i, op, name):
    return emit(em, i, op, name, kernel="gx_layernorm16")


def emit(em, i, op, name, kernel="gx_layernorm"):
    a, p = op.attrs, em.p
    em.arrays(i, a, a["gamma"], a["bias"])
    size = em.g.tensors[op.output].size
    em.data.append(c_struct("gx_layernorm_t", name, [
        ("rows", size // int(a["d"])), ("d", int(a["d"])), ("eps", "(int64_t)%dLL" % int(a["eps"])),
        ("gamma", "%s_w%d" % (p, i)), ("q", c_requant(p, i, a))]))
    return "%s(&%s, %s, %s)" % (kernel, name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    raise TargetError("no TFLM mapping for layer norm (node %r): TFLite has no layer norm op" % op.name)


def macs(op, tensors):
    return 3 * elementwise_macs(op, tensors)


# -- the ONNX rule: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _real(p, node, i, dtypes, what, D):
    """A constant input's real values (D,) (parse.const_value) and, when it is int8 behind a symmetric
    DequantizeLinear, its codes and scales; (real, None, None) for a float constant or another quantization."""
    s = p.source(node, node.input[i])
    if s[0] == "act" or (s[0] == "const" and s[1].dtype not in dtypes):
        raise ExportError("%s: %s must be a constant (float, or %s behind DequantizeLinear)" % (
            label(node), what, " or ".join(np.dtype(d).name for d in dtypes)))
    real = np.broadcast_to(p.const_value(node, i), (D,))
    if s[0] == "const" and s[1].dtype == np.int8 and np.all(s[3] == 0):
        return real, np.broadcast_to(s[1].reshape(-1), (D,)), np.broadcast_to(s[2].astype(np.float64).reshape(-1), (D,))
    return real, None, None


def from_layer_normalization(p, node):
    x = p.tensors[p.act_input(node, 0)]
    D = int(x.shape[-1])
    if attr(node, "axis", -1) % len(x.shape) != len(x.shape) - 1:
        raise ExportError("%s: LayerNormalization only over the last axis" % label(node))
    if D > MAX_D:
        raise ExportError("%s: LayerNormalization over %d values; the kernel takes at most %d" % (label(node), D, MAX_D))
    real, gamma, s_g = _real(p, node, 1, (np.int8,), "the scale (gamma)", D)
    if gamma is None:            # a float or asymmetric gamma (a Constant): +-127 at scale |gamma| / 127, exact
        gamma = np.where(real == 0, 0, np.where(real < 0, -127, 127)).astype(np.int8)
        s_g = np.where(real == 0, 1.0, np.abs(real) / 127.0)
    beta = np.zeros(D)
    if len(node.input) > 2 and node.input[2]:
        beta = _real(p, node, 2, (np.int32, np.int8), "the bias (beta)", D)[0]
    name, scale, zp = p.output_q(node)
    out = TensorInfo(name, x.shape, scale, zp)
    bias = np.round(np.broadcast_to(beta, (D,)) / s_g * 65536.0)
    if np.abs(bias).max(initial=0) + 128 * 32 * 65536 > INT32_MAX:
        raise ExportError("%s: beta / gamma scale too large for the int32 accumulator" % label(node))
    attrs = {"d": D, "eps": int(round(D ** 3 * float(attr(node, "epsilon", 1e-5)) / float(x.scale) ** 2)),
             "gamma": gamma.astype(np.int8), "bias": bias.astype(np.int32)}
    attrs.update(p.requant_params(1.0, s_g / 65536.0, out))
    if attrs["eps"] + 65025 * D ** 3 >= 1 << 47:
        raise ExportError("%s: epsilon / input scale^2 too large for the kernel's int64 variance" % label(node))
    p.add_op("layernorm", node, [x.name], x.shape, attrs)


SPECS = [OpSpec("layernorm", reference, emit, tflm, macs, to_int16=to_int16),
         OpSpec("layernorm16", reference16, emit16, tflm, macs, int16=True)]

ONNX = {"LayerNormalization": from_layer_normalization}
