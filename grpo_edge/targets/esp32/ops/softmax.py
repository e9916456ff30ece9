"""SOFTMAX and LOG_SOFTMAX int8, TFLite's fixed-point rules (softmax_ref.py, log_softmax_ref.py hold the
arithmetic).

NumPy reference, C emission (gx_softmax, gx_log_softmax), TFLite Micro mapping (SOFTMAX, and a QUANTIZE when
the model's output scale is not TFLite's 1/256; LOG_SOFTMAX, whose output is always TFLite's 16/256, 127).
"""
import numpy as np

from grpo_edge.errors import ExportError, TargetError

from ..codegen import c_array, c_struct
from ..tflm import nhwc
from ..ir import TensorInfo
from ..parse import attr, label
from . import OpSpec, elementwise_macs



def _softmax_fields(a, mask_name):
    tfl = bool(a["tflite_output"])
    return [("tflite_output", int(tfl)), ("out_mult", 0 if tfl else a["output_multiplier"]),
            ("out_shift", 0 if tfl else a["output_shift"]), ("out_offset", 0 if tfl else a["output_offset"]),
            ("mask", mask_name if "mask" in a else "0")]


def _log_softmax_fields(a, mask_name):
    return [("reverse_mult", a["reverse_multiplier"]), ("reverse_shift", a["reverse_shift"])]


# kind -> (C kernel, its own struct fields, TFLite operator and options)
KINDS = {"softmax": ("gx_softmax", _softmax_fields, "SOFTMAX", "SoftmaxOptions"),
         "log_softmax": ("gx_log_softmax", _log_softmax_fields, "LOG_SOFTMAX", "LogSoftmaxOptions"),
         "log_softmax16": ("gx_log_softmax16", _log_softmax_fields, None, None)}


def reference(x, p):
    from ..softmax_ref import softmax_int8
    return softmax_int8(x, p)


def log_reference(x, p):
    from ..log_softmax_ref import log_softmax_int8
    return log_softmax_int8(x, p)


def log_reference16(x, p):
    from ..log_softmax_ref import log_softmax_int16
    return log_softmax_int16(x, p)


def emit(em, i, op, name):
    a = op.attrs
    fn, fields = KINDS[op.kind][:2]
    shape = em.g.tensors[op.output].shape
    n = shape[-1]
    if "mask" in a:                      # an attention mask: 1 where a score takes part, one row per softmax row
        em.data.append(c_array("uint8_t", name + "_mask", a["mask"]))
    em.data.append(c_struct(fn + "_t", name, [
        ("rows", int(np.prod(shape)) // n), ("n", n), ("diff_min", a["diff_min"]),
        ("input_mult", a["input_multiplier"]), ("input_left_shift", a["input_left_shift"])] + fields(a, name + "_mask")))
    return "%s(&%s, %s, %s)" % (fn, name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm(b, i, op):
    """SOFTMAX / LOG_SOFTMAX. TFLite fixes softmax's outputs at 1/256, -128, so another output scale needs a
    QUANTIZE after; a log-softmax has TFLite's own parameters (16/256, 127) already (the rule checks)."""
    if op.kind == "log_softmax16":
        raise TargetError("no TFLM mapping for an int16 log-softmax (node %r): TFLite Micro's LOG_SOFTMAX takes "
                          "int8 only" % op.name)
    if "mask" in op.attrs:
        raise TargetError("no TFLM mapping for a masked softmax (node %r): TFLite's SOFTMAX takes no mask" % op.name)
    code, options = KINDS[op.kind][2:]
    tfl, out = b.tfl, b.g.tensors[op.output]
    y = b.act(op.output)
    fixed = op.kind == "log_softmax" or op.attrs["tflite_output"]
    if not fixed:
        y = b.act("softmax_fixed%d" % i, nhwc(out.shape), 1.0 / 256, -128)
        b.notes.append("op %d (softmax): TFLM needs output scale 1/256 then a QUANTIZE to the model's "
                       "scale %g (two roundings); we requantize from 16 fractional bits once" % (i, out.scale))
    opts = getattr(tfl, options + "T")(**({"beta": 1.0} if op.kind == "softmax" else {}))
    b.op(getattr(tfl.BuiltinOperator, code), [b.act(op.inputs[0])], [y], getattr(tfl.BuiltinOptions, options), opts)
    if not fixed:
        b.op(tfl.BuiltinOperator.QUANTIZE, [y], [b.act(op.output)])


# -- the ONNX rules: check the node, compute the kernel's parameters once (TFLM's Prepare)

def _last_axis_rule(kind, op_type, params_of):
    """The ONNX rule of an op over the last axis whose kernel parameters come from params_of(x, out, label). A
    softmax of masked scores (mask_rule) reads the int8 scores and keeps the mask, one row per softmax row."""
    def rule(p, node):
        scores, keep = p.masked.get(node.input[0], (None, None))
        x = p.tensors[scores or p.act_input(node, 0)]
        axis = attr(node, "axis", -1) % len(x.shape)
        if axis != len(x.shape) - 1:
            raise ExportError("%s: %s only over the last axis" % (label(node), op_type))
        name, scale, zp = p.output_q(node)
        out = TensorInfo(name, x.shape, scale, zp)
        attrs = params_of(x, out, node_label=label(node))
        if keep is not None:
            attrs["mask"] = np.ascontiguousarray(np.broadcast_to(keep, x.shape).reshape(-1, x.shape[-1]), np.uint8)
        p.add_op(kind, node, [x.name], x.shape, attrs)
    return rule


def mask_rule(p, node) -> bool:
    """A Where or Add that applies a constant attention mask of -inf before a Softmax (export/attention_mask.py):
    no op of its own, the Softmax's rule takes the scores and the mask; -> True when node is one."""
    if p.attention_masks is None:           # found once per model
        from grpo_edge.export.attention_mask import masked_softmaxes
        p.attention_masks = masked_softmaxes(p.model)
    found = [m for m in p.attention_masks if m["node"].output[0] == node.output[0]]
    if not found:
        return False
    scores = p.act_input(node, list(node.input).index(found[0]["scores"]))
    keep, shape = found[0]["keep"], p.tensors[scores].shape
    try:
        np.broadcast_to(keep, shape)
    except ValueError:
        raise ExportError("%s: mask of shape %s does not fit scores of shape %s" % (label(node), keep.shape, shape))
    p.masked[node.output[0]] = (scores, keep)
    return True


def from_where(p, node):
    from grpo_edge.export.attention_mask import NOT_A_MASK
    if not mask_rule(p, node):
        raise ExportError("%s: %s" % (label(node), NOT_A_MASK))


def _softmax_params(x, out, node_label=""):
    from ..softmax_ref import softmax_params
    return softmax_params(x, out, node_label)


def _log_softmax_params(x, out, node_label=""):
    from ..log_softmax_ref import log_softmax_params
    return log_softmax_params(x, out, node_label)


def _log_softmax16_params(x, out, node_label=""):
    from ..log_softmax_ref import log_softmax_params
    return log_softmax_params(x, out, node_label, int16=True)


def _softmax16_params(x, out, node_label=""):
    """TFLite SoftmaxPrepare at int16: the input multiplier and the exp / 1 / (1 + x) tables; the output at
    TFLite's 1/32768, zero point 0 (onnx2int8 pins it)."""
    from ..textir import softmax_multiplier, softmax_tables
    if not (np.float32(out.scale) == np.float32(1.0 / 32768) and out.zero_point == 0):
        raise ExportError("%s: a 16x8 softmax output must have scale 1/32768 and zero point 0, got %g / %d: quantize "
                          "with grpo-edge quantize (onnx2int8 sets them)" % (node_label, out.scale, out.zero_point))
    m, s = softmax_multiplier(x.scale)
    t = softmax_tables()
    return {"multiplier": m, "shift": s, "exp_lut": t["exp"], "recip_lut": t["recip"]}


_softmax_rule = _last_axis_rule("softmax", "Softmax", _softmax_params)
_softmax16_rule = _last_axis_rule("softmax16", "Softmax", _softmax16_params)


def from_softmax(p, node):
    """Softmax over the last axis: TFLite's int8 rule, or at int16 its SoftmaxInt16 (not of masked scores)."""
    masked = p.masked.get(node.input[0])
    if p.qtype.get(masked[0] if masked else p.act_input(node, 0)) == "int16":
        if masked:
            raise ExportError("%s: a masked softmax has no 16x8 form here (deploy with --activations int8)"
                              % label(node))
        _softmax16_rule(p, node)
    else:
        _softmax_rule(p, node)


def softmax16_bound(op, tensors) -> int:
    """TFLite's int16 softmax reads exp over [-10, 0] only: a score more than 10 below its row's maximum still
    gets about exp(-10) (1.5-2 LSB of 2^-15) where onnxruntime gives 0, and the row's sum grows with them. The
    documented distance from onnxruntime: 2 n + 2 LSB for rows of n (measured: 2 for n = 2, 30 for n = 16,
    125 for n = 64, at input scales 1e-5 .. 1e-2)."""
    return 2 * int(tensors[op.output].shape[-1]) + 2


def reference16(x, p):
    from ..text_ref import softmax16
    return softmax16(x, p["multiplier"], p["shift"], p["exp_lut"], p["recip_lut"])


def emit16(em, i, op, name):
    a, shape = op.attrs, em.g.tensors[op.output].shape
    em.data.append(c_array("int16_t", "%s_e%d" % (em.p, i), a["exp_lut"])
                   + c_array("int16_t", "%s_r%d" % (em.p, i), a["recip_lut"]))
    em.data.append(c_struct("gx_softmax16_t", name, [
        ("rows", int(np.prod(shape)) // shape[-1]), ("n", shape[-1]), ("mult", a["multiplier"]),
        ("shift", a["shift"]), ("exp_lut", "%s_e%d" % (em.p, i)), ("recip_lut", "%s_r%d" % (em.p, i))]))
    return "gx_softmax16(&%s, %s, %s)" % (name, em.ptr(op.inputs[0]), em.ptr(op.output))


def tflm16(b, i, op):
    """SOFTMAX at int16 (TFLM's SoftmaxInt16)."""
    tfl = b.tfl
    b.op(tfl.BuiltinOperator.SOFTMAX, [b.act(op.inputs[0])], [b.act(op.output)], tfl.BuiltinOptions.SoftmaxOptions,
         tfl.SoftmaxOptionsT(beta=1.0))
_log_softmax_rule = _last_axis_rule("log_softmax", "LogSoftmax", _log_softmax_params)
_log_softmax16_rule = _last_axis_rule("log_softmax16", "LogSoftmax", _log_softmax16_params)


def from_log_softmax(p, node):
    """onnxruntime leaves LogSoftmax in float: onnx2int8 gives its output TFLite's fixed int8 parameters; a model
    quantized elsewhere, or with int16 activations, says what to do (log_softmax_params checks the parameters)."""
    if "QuantizeLinear" not in [c.op_type for c in p.consumers.get(node.output[0], [])]:
        raise ExportError("%s: its float output is not quantized: quantize with grpo-edge quantize (onnx2int8), "
                          "which gives it TFLite's fixed int8 output (scale 16/256, zero point 127)" % label(node))
    if p.qtype.get(p.act_input(node, 0)) == "int16":
        _log_softmax16_rule(p, node)
    else:
        _log_softmax_rule(p, node)

SPECS = [OpSpec("softmax", reference, emit, tflm, elementwise_macs),
         OpSpec("softmax16", reference16, emit16, tflm16, elementwise_macs, int16=True, ort_lsb=softmax16_bound),
         OpSpec("log_softmax", log_reference, emit, tflm, elementwise_macs),
         OpSpec("log_softmax16", log_reference16, emit, tflm, elementwise_macs, int16=True)]

ONNX = {"Softmax": from_softmax, "LogSoftmax": from_log_softmax, "Where": from_where}
