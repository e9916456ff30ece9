"""Parse an int8 QDQ ONNX model (onnxruntime quantize_static, QuantFormat.QDQ) into the IR.

Structure we read: every float activation edge is Q -> int8 tensor -> DQ; a compute node takes DQ
outputs (activations, or constant int8 weights / int32 biases) and its float output goes to exactly
one Q node. The IR keeps the int8 tensors and the compute nodes; Q(DQ(t)) with new parameters
becomes a requantize op. Everything else fails here, before any file is generated, naming op and node.

This file is the QDQ front end: the graph walk and what every op rule shares (its quantized inputs, its
single output Q, per-channel weights, the int32 bias, the requantization parameters). Each ONNX op's own
rule (shape checks and the kernel parameters computed once, TFLM's Prepare) is in its op module:
ops.ONNX_RULES = {"Gemm": fully_connected.from_gemm, ...}.
"""
import math

import numpy as np

from grpo_edge.errors import ExportError

from . import reference as R
from .ir import Graph, Op, TensorInfo, file_hash

# Name of the 4-D view "<tensor>/4d" of a rank-3 tensor (as_4d), and of an op's inner 4-D output before the
# view that gives the ONNX tensor its shape (add_op(onnx_shape=)): simulate.ort_check compares there.
VIEW = "/4d"


def load_onnx(path):
    import onnx
    try:
        return onnx.load(str(path))
    except Exception as e:  # noqa: BLE001 - onnx raises several types for a bad file
        raise ExportError("cannot read ONNX model %s: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))


def parse(path) -> Graph:
    """ONNX file -> Graph. Raises ExportError (one line) for anything the generator cannot handle."""
    from grpo_edge.export.validate import check_qdq_scales
    model = load_onnx(path)
    check_qdq_scales(model, path)
    g = _Parser(model).run()
    g.model_hash = file_hash(path)
    g.source = str(path)
    return g


def compile_refusal(problems, rules) -> str:
    """All the ops that cannot be compiled, one line each, under a line that says how many and what compiles;
    a single one is one line."""
    kinds = sorted(k for k in rules if k != "QuantizeLinear")
    n_in = sum(1 for p in problems if p.startswith("input "))
    what = [("%d op%s" % (n, "" if n == 1 else "s")) if k == "op" else ("%d input shape%s" % (n, "" if n == 1 else "s"))
            for k, n in (("op", len(problems) - n_in), ("input", n_in)) if n]
    if len(problems) == 1:               # one line: what is at fault, then what compiles
        return "%s cannot be compiled for the ESP32: %s (it compiles %s)" % (what[0], problems[0], ", ".join(kinds))
    return "\n".join(["%s cannot be compiled for the ESP32 (it compiles %s):" % (" and ".join(what), ", ".join(kinds))]
                     + ["  " + p for p in problems])


def unsupported_ops(model) -> list:
    """The nodes of an fp32 (or QDQ) ONNX model whose op type has no ESP32 rule, the nodes that begin a
    tensor without the batch axis first (what export/onnx_layout.py could not rewrite), and the input shapes
    the compiler cannot take (rank > 4, a dynamic dimension past the batch), one line each: what deploy
    checks before quantizing. A fused pattern (export/onnx_fuse.py) is named by its fused node."""
    from .ops import ONNX_RULES
    lines = ["%s: no ESP32 rule for this op type" % label(n)
             for n in model.graph.node if n.op_type not in ONNX_RULES and n.op_type not in ("Constant",
                                                                                            "DequantizeLinear")]
    consts = {i.name for i in model.graph.initializer}
    scalars = {i.name for i in model.graph.initializer if int(np.prod(i.dims)) == 1}
    scalars |= {n.output[0] for n in model.graph.node if n.op_type == "Constant" and n.attribute
                and int(np.prod(n.attribute[0].t.dims)) == 1}
    for n in model.graph.node:          # a Div compiles as a table, only by a constant scalar
        if n.op_type == "Div" and n.input[1] not in scalars:
            lines.append("%s: Div by a tensor (only by a constant scalar)" % label(n))
    from grpo_edge.export.attention_mask import NOT_A_MASK, masked_softmaxes
    masks = {m["node"].output[0] for m in masked_softmaxes(model)}
    lines += ["%s: %s" % (label(n), NOT_A_MASK) for n in model.graph.node if n.op_type == "Where" and n.output[0] not in masks]
    from grpo_edge.export.onnx_layout import not_batch_first
    for n, t, shape in not_batch_first(model):
        lines.append("%s: writes %r of shape %s: the compiler keeps the batch axis first, rank 4 at most"
                     % (label(n), t, shape))
    for i in (i for i in model.graph.input if i.name not in consts):
        dims = i.type.tensor_type.shape.dim
        if len(dims) > 4:
            lines.append("input %r has rank %d: the compiler takes at most 4" % (i.name, len(dims)))
        bad = [k for k, d in enumerate(dims) if k > 0 and not d.dim_value]
        if bad:
            lines.append("input %r has a dynamic dimension at axis %s: export it with fixed sizes past the batch"
                         % (i.name, ", ".join(str(k) for k in bad)))
    return lines


def attr(node, name, default=None):
    """An ONNX node's attribute value, or default."""
    import onnx
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def label(node):
    """How errors name a node: 'Conv node '/stem/conv/Conv''."""
    return "%s node %r" % (node.op_type, node.name or node.output[0])


class _Parser:
    def __init__(self, model):
        from onnx import numpy_helper
        self.model = model
        gr = model.graph
        self.consts = {i.name: numpy_helper.to_array(i) for i in gr.initializer}
        for n in gr.node:
            if n.op_type == "Constant":
                self.consts[n.output[0]] = numpy_helper.to_array(attr(n, "value"))
        self.producer = {o: n for n in gr.node for o in n.output}
        self.consumers = {}
        for n in gr.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.tensors = {}
        self.ops = []
        self.qtype = {}          # quantized tensor name -> "int8" | "int16"
        self.masked = {}         # a mask node's output (an attention mask of -inf) -> (int8 scores, keep mask)
        self.attention_masks = None   # export.attention_mask.masked_softmaxes(model), found at the first Where / Add

    # -- helpers
    def qparams(self, node):
        scale = self.consts.get(node.input[1])
        zp = self.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.uint8)
        if scale is None or zp is None:
            raise ExportError("%s: scale / zero point must be constants" % label(node))
        return scale, zp

    def act_qparams(self, node):
        scale, zp = self.qparams(node)
        if scale.size != 1:
            raise ExportError("%s: per-channel activation quantization is not supported" % label(node))
        if zp.dtype not in (np.int8, np.int16):
            raise ExportError("%s: activations must be int8 (QInt8) or int16 (QInt16), got %s" % (label(node), zp.dtype))
        if zp.dtype == np.int16 and int(zp.reshape(())) != 0:
            raise ExportError("%s: int16 activations must be symmetric (zero point 0, TFLite 16x8 mode), got %d"
                              % (label(node), int(zp.reshape(()))))
        self.qtype[node.output[0]] = zp.dtype.name
        return R.f32(scale.reshape(())), int(zp.reshape(()))

    def source(self, node, float_name):
        """A compute node's float input -> ('act', int8 tensor name) or ('const', array, scale, zp)."""
        p = self.producer.get(float_name)
        if p is None or p.op_type != "DequantizeLinear":
            if float_name in self.consts:
                return ("float_const", self.consts[float_name])
            raise ExportError("%s: input %r is not quantized (no DequantizeLinear before it)" % (label(node), float_name))
        src = p.input[0]
        if src in self.consts:
            scale, zp = self.qparams(p)
            return ("const", self.consts[src], scale, zp, attr(p, "axis", 1))
        q = self.producer.get(src)
        if q is not None and q.op_type == "QuantizeLinear" and q.input[0] in self.consts:
            # a float constant quantized in the graph (onnxruntime does so with Constant nodes): its codes now
            scale, zp = self.qparams(q)
            codes = R.quantize(self.consts[q.input[0]], scale.reshape(()), int(zp.reshape(())), zp.dtype.name)
            return ("const", codes, scale, zp, attr(p, "axis", 1))
        if src not in self.tensors:
            raise ExportError("%s: input %r comes from an unsupported path" % (label(node), float_name))
        return ("act", src)

    def const_value(self, node, i):
        """Input i's real values, float64, flat: a float constant, or codes behind a DequantizeLinear (per
        tensor or per channel); None when it is an activation."""
        s = self.source(node, node.input[i])
        if s[0] == "act":
            return None
        if s[0] == "float_const":
            return np.asarray(s[1], np.float64).reshape(-1)
        codes = np.asarray(s[1], np.float64).reshape(-1)
        return (codes - np.asarray(s[3], np.float64).reshape(-1)) * np.asarray(s[2], np.float64).reshape(-1)

    def act_input(self, node, i):
        s = self.source(node, node.input[i])
        if s[0] != "act":
            raise ExportError("%s: input %d must be an activation, got a constant" % (label(node), i))
        return s[1]

    def output_q(self, node, k=0):
        """The single QuantizeLinear after a compute node's output k -> (name of the int8 tensor, scale, zp)."""
        cons = self.consumers.get(node.output[k], [])
        if len(cons) != 1 or cons[0].op_type != "QuantizeLinear":
            raise ExportError("%s: output %r must feed exactly one QuantizeLinear (found %s)"
                              % (label(node), node.output[k], [c.op_type for c in cons] or "none"))
        q = cons[0]
        scale, zp = self.act_qparams(q)
        return q.output[0], scale, zp

    def add_op(self, kind, node, inputs, shape, attrs, onnx_shape=None, out_index=0):
        """One op computing `node`'s output (its Q's int8 tensor) of `shape`. An op that works on a 4-D view of
        a rank-3 tensor (conv1d, a mean over its last axis) gives onnx_shape: its output is then an inner
        4-D tensor, and a reshape (no data moves) gives the node's output its ONNX shape. out_index: which
        output of a node with several (Split)."""
        name, scale, zp = self.output_q(node, out_index)
        label_ = (node.name or node.output[0]) + ("/%d" % out_index if out_index else "")
        if onnx_shape is not None and tuple(onnx_shape) != tuple(shape):
            inner = name + VIEW
            if name in self.qtype:
                self.qtype[inner] = self.qtype[name]
            self.tensors[inner] = TensorInfo(inner, tuple(int(d) for d in shape), scale, zp)
            self.ops.append(Op(kind, label_, list(inputs), inner, attrs))
            kind, inputs, attrs, shape, label_ = "reshape", [inner], {}, onnx_shape, label_ + "/view"
        self.tensors[name] = TensorInfo(name, tuple(int(d) for d in shape), scale, zp)
        self.ops.append(Op(kind, label_, list(inputs), name, attrs))
        return self.tensors[name]

    def as_4d(self, x):
        """A rank-3 (1, C, L) activation as (1, C, 1, L) for the 2-D kernels: an alias (a reshape that moves
        no data), made once per tensor."""
        if len(x.shape) == 4:
            return x
        return self.view(x, (x.shape[0], x.shape[1], 1, x.shape[2]), VIEW)

    def view(self, x, shape, suffix):
        """x seen with another shape of the same size (a reshape that moves no data), named x.name + suffix."""
        name = x.name + suffix
        if name not in self.tensors:
            if x.name in self.qtype:
                self.qtype[name] = self.qtype[x.name]
            self.tensors[name] = TensorInfo(name, tuple(int(d) for d in shape), x.scale, x.zero_point)
            self.ops.append(Op("reshape", name, [x.name], name, {}))
        return self.tensors[name]

    # -- main loop
    def run(self) -> Graph:
        import onnx
        from .ops import ONNX_RULES as rules
        gr = self.model.graph
        inputs = [i for i in gr.input if i.name not in self.consts]
        if len(inputs) != 1 or len(gr.output) != 1:
            raise ExportError("model must have exactly one input and one output (has %d inputs, %d outputs)"
                              % (len(inputs), len(gr.output)))
        gin = inputs[0]
        dims = [d.dim_value if d.dim_value > 0 else 1 for d in gin.type.tensor_type.shape.dim]
        if gin.type.tensor_type.elem_type in (onnx.TensorProto.INT32, onnx.TensorProto.INT64):   # token ids
            self._token_ids(gin, dims)
            return self._finish(rules)
        qs = [c for c in self.consumers.get(gin.name, []) if c.op_type == "QuantizeLinear"]
        if len(qs) != 1 or len(self.consumers[gin.name]) != 1:
            raise ExportError("model input %r must feed exactly one QuantizeLinear (it feeds %s): not an int8 QDQ model"
                              % (gin.name, ", ".join(c.op_type for c in self.consumers.get(gin.name, [])) or "nothing"))
        scale, zp = self.act_qparams(qs[0])
        self.input = qs[0].output[0]
        self.tensors[self.input] = TensorInfo(self.input, tuple([1] + dims[1:]), scale, zp)
        return self._finish(rules)

    def _token_ids(self, gin, dims):
        """An integer model input: token ids, which only Gathers from constant tables (embeddings) may read;
        int32 on the device, ids 0 .. (the smallest table's rows - 1)."""
        readers = self.consumers.get(gin.name, [])
        rows = [self.source(n, n.input[0]) for n in readers if n.op_type == "Gather" and n.input[1] == gin.name]
        if not readers or len(rows) != len(readers) or any(r[0] != "const" or r[1].ndim != 2 for r in rows):
            raise ExportError("model input %r holds integers: only Gathers from constant 2-D tables (embeddings) "
                              "may read it (it feeds %s)" % (gin.name, ", ".join(n.op_type for n in readers) or "nothing"))
        self.input = gin.name
        self.qtype[gin.name] = "int32"
        self.tensors[gin.name] = TensorInfo(gin.name, tuple([1] + dims[1:]), 1.0, 0, "int32",
                                            limit=min(int(r[1].shape[0]) for r in rows))

    def _finish(self, rules):
        gr = self.model.graph
        self.walk(rules)
        out = gr.output[0].name
        p = self.producer.get(out)
        if p is not None and p.op_type == "DequantizeLinear" and p.input[0] in self.tensors:
            self.output = p.input[0]
        elif p is not None and p.op_type == "ArgMax" and self.ops and self.ops[-1].kind == "argmax":
            self.output = self.ops[-1].output
        else:
            raise ExportError("model output %r is not an int8 tensor followed by DequantizeLinear" % out)
        if self.output == self.input:
            raise ExportError("model has no compute ops")
        used = {i for o in self.ops for i in o.inputs} | {self.output}
        self.ops = _prune(self.ops, used, self.output)
        g = Graph(self.tensors, self.ops, self.input, self.output)
        self.assign_dtypes(g)
        return g

    def walk(self, rules):
        """Every node through its op's rule. A node that cannot be compiled does not stop the walk: the nodes
        that depend on it are skipped, and all the refusals are raised together (compile_refusal)."""
        problems, poisoned = [], set()
        for node in self.model.graph.node:
            op = node.op_type
            if any(i in poisoned for i in node.input):
                poisoned.update(node.output)
            elif op in ("Constant", "DequantizeLinear"):
                continue
            elif op not in rules:
                problems.append("%s: no ESP32 rule for this op type" % label(node))
                poisoned.update(node.output)
            else:
                try:
                    rules[op](self, node)
                except ExportError as e:
                    problems.append(str(e))
                    poisoned.update(node.output)
        if problems:
            raise ExportError(compile_refusal(problems, rules))

    def assign_dtypes(self, g):
        """Give each tensor its quantized type; a graph with int16 activations becomes a 16x8 graph."""
        for name, t in g.tensors.items():
            t.dtype = self.qtype.get(name, "int8")       # argmax outputs and add constants: int8
        if any(t.dtype == "int16" for t in g.tensors.values()):
            from .int16_ref import to_16x8
            to_16x8(g)

    # -- compute ops
    def weights(self, node, i, out_channels):
        s = self.source(node, node.input[i])
        if s[0] != "const" or s[1].dtype != np.int8:
            raise ExportError("%s: weights must be a constant int8 tensor behind DequantizeLinear" % label(node))
        w, scale, zp = s[1], s[2].astype(np.float32).reshape(-1), s[3].reshape(-1)
        if np.any(zp != 0):
            raise ExportError("%s: weights must be symmetric (zero point 0)" % label(node))
        if scale.size == 1:
            scale = np.repeat(scale, out_channels)
        if scale.size != out_channels:
            raise ExportError("%s: weight scales must be per output channel (%d scales for %d channels)"
                              % (label(node), scale.size, out_channels))
        return w, scale

    def bias(self, node, i, n, s_in, s_w):
        if len(node.input) <= i or not node.input[i]:
            return np.zeros(n, np.int32)
        s = self.source(node, node.input[i])
        if s[0] != "const" or s[1].dtype != np.int32:
            raise ExportError("%s: bias must be a constant int32 tensor behind DequantizeLinear" % label(node))
        b = s[1].reshape(-1).astype(np.int32)
        want = (np.float32(s_in) * s_w).astype(np.float32)
        got = s[2].astype(np.float32).reshape(-1)
        if got.size not in (1, n) or not np.allclose(got, want, rtol=1e-5, atol=0):
            raise ExportError("%s: bias scale must equal input scale * weight scale" % label(node))
        return np.broadcast_to(b, (n,)).copy()

    def requant_params(self, s_in, s_w, out, act="none"):
        mult, shift = [], []
        for sw in s_w:
            m, s = R.quantize_multiplier(float(s_in) * float(sw) / float(out.scale))
            mult.append(m)
            shift.append(s)
        lo, hi = R.activation_range(act, out.scale, out.zero_point)
        return {"multiplier": np.array(mult, np.int32), "shift": np.array(shift, np.int32),
                "output_offset": out.zero_point, "activation_min": lo, "activation_max": hi}


def pads(node, hw, k, strides, dil):
    """(top, left, bottom, right) from a node's pads or auto_pad, for a kernel k over spatial size hw."""
    auto = attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p = list(attr(node, "pads", [0, 0, 0, 0]))
        return (p[0], p[1], p[2], p[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    out = []
    for i in range(2):
        o = math.ceil(hw[i] / strides[i])
        total = max((o - 1) * strides[i] + dil[i] * (k[i] - 1) + 1 - hw[i], 0)
        out.append((total // 2, total - total // 2) if auto == "SAME_UPPER" else (total - total // 2, total // 2))
    return (out[0][0], out[1][0], out[0][1], out[1][1])


def _prune(ops, used, output):
    """Drop ops whose outputs nobody reads (e.g. dangling branches)."""
    live, keep = {output}, []
    for op in reversed(ops):
        if op.output in live:
            keep.append(op)
            live.update(op.inputs)
    return keep[::-1]
