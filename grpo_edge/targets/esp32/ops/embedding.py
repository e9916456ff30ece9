"""Embedding: the model's input is token ids (int32 on the device), and a Gather picks rows of a constant
int8 table (nn.Embedding). onnxruntime quantizes the table as a weight and gives the Gather's output the
table's parameters, so the row's codes are the output (QDQDirect8BitOp); when the output has other
parameters, the table is requantized once at compile time (quantize(dequantize(code)), what onnxruntime's
QDQ graph computes). An id outside 0 .. rows - 1 reads the nearest row (the C cannot read past the table).

NumPy reference, C emission (gx_embedding in csrc/gx_kernels.h), TFLite Micro mapping (none: the TFLite
writer takes int8 model inputs), MACs (one per output element). The ONNX rule is split.from_gather's: a
Gather whose indices are the model's token-id input comes here.
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from ..codegen import c_array
from ..ir import TensorInfo
from ..parse import attr, label
from . import OpSpec, elementwise_macs


def reference(ids, p):
    table = np.asarray(p["table"], np.int8)
    return table[np.clip(np.asarray(ids, np.int64), 0, len(table) - 1)]


def emit(em, i, op, name):
    table = op.attrs["table"]
    em.data.append(c_array("int8_t", "%s_e%d" % (em.p, i), table))
    n = em.g.tensors[op.inputs[0]].size
    return "gx_embedding(%s_e%d, %d, %d, %d, %s, %s)" % (em.p, i, table.shape[0], table.shape[1], n,
                                                        em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    raise TargetError("no TFLM mapping for an embedding of token ids (node %r): the TFLite writer takes int8 "
                      "model inputs" % op.name)


def from_gather_ids(p, node):
    """Gather(table, ids) with the model's token ids as indices and a constant int8 2-D table (axis 0)."""
    from .lut import float_table
    s = p.source(node, node.input[0])
    if s[0] != "const" or s[1].ndim != 2 or s[1].dtype != np.int8 or int(np.asarray(s[2]).size) != 1:
        raise ExportError("%s: an embedding needs a constant 2-D int8 table with one scale" % label(node))
    if int(attr(node, "axis", 0)) != 0:
        raise ExportError("%s: an embedding gathers rows (axis 0)" % label(node))
    table, scale, zp = s[1], float(np.asarray(s[2]).reshape(-1)[0]), int(np.asarray(s[3]).reshape(-1)[0])
    name, oscale, ozp = p.output_q(node)
    if (oscale, ozp) != (scale, zp):
        lut = float_table(TensorInfo("table", table.shape, scale, zp), TensorInfo(name, (), oscale, ozp),
                          "scale", {"k": 1.0})
        table = lut[table.astype(np.int64) + 128].astype(np.int8)
    ids = p.tensors[node.input[1]]
    p.add_op("embedding", node, [ids.name], tuple(ids.shape) + (table.shape[1],), {"table": table})


SPECS = [OpSpec("embedding", reference, emit, tflm, elementwise_macs)]

ONNX = {}
