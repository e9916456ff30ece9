"""MatMul of two int8 activations (attention: q k^T and weights x v), batched over the leading axes:
(..., M, K) x (..., K, N) -> (..., M, N), the same leading sizes on both sides (no broadcasting).

TFLite BATCH_MATMUL's rule: acc = sum_k (a - za)(b - zb) in int32, one multiplier sa sb / sy, double
rounding, + zy, clamped (gx_matmul in csrc/gx_kernels.h). A MatMul with a constant right side is a fully
connected layer (ops/fully_connected.py hands the other kind here). NumPy reference, C emission, TFLite
Micro mapping (BATCH_MATMUL, rank 3: the TFLite writer keeps 4-D tensors in NHWC for images, so a 4-D
attention has no TFLM baseline), MACs.
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from .. import reference as R
from ..codegen import INT32_MAX, c_struct
from ..parse import label
from . import OpSpec


def reference(a, b, p):
    acc = np.matmul(R.i64(a) + p["a_offset"], R.i64(b) + p["b_offset"])
    acc = R.check_int32(acc, "matmul accumulator")
    out = R.mbqm(acc, p["multiplier"], p["shift"]) + p["output_offset"]
    return R.clamp8(out, p["activation_min"], p["activation_max"])


MATMUL16_ORT_LSB = 2        # the 16-bit reduced multiplier: measured in tests/test_esp32_int16.py


def reference16(a, b, p):
    """int16 x int16 (zero points 0) in int64, TFLite's int64 MultiplyByQuantizedMultiplier, int16 clamp."""
    from ..text_ref import mbqm64
    acc = np.matmul(R.i64(a), R.i64(b))
    return R.clamp16(mbqm64(acc, p["multiplier"], p["shift"]), p["activation_min"], p["activation_max"])


def to_matmul16(g, op):
    """The int8 matmul of two int16 activations: the int64 accumulator within TFLite's 2^47, a shift below 8."""
    k = g.tensors[op.inputs[0]].shape[-1]
    if k * (1 << 30) >= 1 << 47 or op.attrs["shift"] >= 8:
        raise ExportError("matmul node %r: %d terms or an output multiplier shift of %d is beyond the 16x8 "
                          "matmul's int64 rule" % (op.name, k, op.attrs["shift"]))
    op.kind = "matmul16"
    op.attrs.update(a_offset=0, b_offset=0, output_offset=0, activation_min=-32768, activation_max=32767)


def emit16(em, i, op, name):
    return emit(em, i, op, name, kernel="gx_matmul16")


def tflm16(b, i, op):
    raise TargetError("no TFLM mapping for an int16 MatMul of two activations (node %r): not compared" % op.name)


def emit(em, i, op, name, kernel="gx_matmul"):
    a, g = op.attrs, em.g
    sa, sb = g.tensors[op.inputs[0]].shape, g.tensors[op.inputs[1]].shape
    em.data.append(c_struct("gx_matmul_t", name, [
        ("batches", int(np.prod(sa[:-2]))), ("m", sa[-2]), ("k", sa[-1]), ("n", sb[-1]),
        ("a_offset", a["a_offset"]), ("b_offset", a["b_offset"]), ("mult", a["multiplier"]), ("shift", a["shift"]),
        ("out_offset", a["output_offset"]), ("act_min", a["activation_min"]), ("act_max", a["activation_max"])]))
    return "%s(&%s, %s, %s, %s)" % (kernel, name, em.ptr(op.inputs[0]), em.ptr(op.inputs[1]), em.ptr(op.output))


def tflm(b, i, op):
    if len(b.g.tensors[op.output].shape) != 3:
        raise TargetError("no TFLM mapping for a %d-D MatMul of two activations (node %r): the TFLite writer "
                          "keeps 4-D tensors in NHWC" % (len(b.g.tensors[op.output].shape), op.name))
    b.op(b.tfl.BuiltinOperator.BATCH_MATMUL, [b.act(op.inputs[0]), b.act(op.inputs[1])], [b.act(op.output)],
         b.tfl.BuiltinOptions.BatchMatMulOptions, b.tfl.BatchMatMulOptionsT())


def macs(op, tensors):
    sa = tensors[op.inputs[0]].shape
    return int(tensors[op.output].size * sa[-1])


# -- the ONNX rule (fully_connected.from_mat_mul hands over a MatMul whose right side is an activation)

def from_activations(p, node):
    a, b = (p.tensors[p.act_input(node, k)] for k in (0, 1))
    if len(a.shape) != len(b.shape) or len(a.shape) not in (3, 4) or a.shape[:-2] != b.shape[:-2] \
            or a.shape[-1] != b.shape[-2]:
        raise ExportError("%s: MatMul of activations %s x %s (rank 3 or 4, equal leading sizes)"
                          % (label(node), a.shape, b.shape))
    if a.shape[-1] * 256 * 256 > INT32_MAX:
        raise ExportError("%s: MatMul over %d terms could overflow the int32 accumulator" % (label(node), a.shape[-1]))
    from .mul import product_params
    p.add_op("matmul", node, [a.name, b.name], tuple(a.shape[:-1]) + (b.shape[-1],), product_params(p, node, a, b))


SPECS = [OpSpec("matmul", reference, emit, tflm, macs, to_int16=to_matmul16),
         OpSpec("matmul16", reference16, emit16, tflm16, macs, int16=True, ort_lsb=MATMUL16_ORT_LSB)]

ONNX = {}
