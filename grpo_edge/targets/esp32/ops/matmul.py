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


def emit(em, i, op, name):
    a, g = op.attrs, em.g
    sa, sb = g.tensors[op.inputs[0]].shape, g.tensors[op.inputs[1]].shape
    em.data.append(c_struct("gx_matmul_t", name, [
        ("batches", int(np.prod(sa[:-2]))), ("m", sa[-2]), ("k", sa[-1]), ("n", sb[-1]),
        ("a_offset", a["a_offset"]), ("b_offset", a["b_offset"]), ("mult", a["multiplier"]), ("shift", a["shift"]),
        ("out_offset", a["output_offset"]), ("act_min", a["activation_min"]), ("act_max", a["activation_max"])]))
    return "gx_matmul(&%s, %s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.inputs[1]), em.ptr(op.output))


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


SPECS = [OpSpec("matmul", reference, emit, tflm, macs)]

ONNX = {}
