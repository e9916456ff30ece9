"""Parse an int8 QDQ ONNX model (onnxruntime quantize_static, QuantFormat.QDQ) into the IR.

Structure we read: every float activation edge is Q -> int8 tensor -> DQ; a compute node takes DQ
outputs (activations, or constant int8 weights / int32 biases) and its float output goes to exactly
one Q node. The IR keeps the int8 tensors and the compute nodes; Q(DQ(t)) with new parameters
becomes a requantize op. Everything else fails here, before any file is generated, naming op and node.
"""
import math

import numpy as np

from grpo_edge.errors import ExportError

from . import reference as R
from .ir import Graph, Op, TensorInfo, file_hash
from .prepare import add_params, float_table, requant_table

SUPPORTED = ("Gemm", "MatMul", "Conv", "Add", "Relu", "Clip", "Tanh", "Sigmoid", "MaxPool",
             "AveragePool", "GlobalAveragePool", "ReduceMean", "Flatten", "Reshape", "Squeeze",
             "Unsqueeze", "Identity", "Softmax", "ArgMax")


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


def _attr(node, name, default=None):
    import onnx
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _label(node):
    return "%s node %r" % (node.op_type, node.name or node.output[0])


class _Parser:
    def __init__(self, model):
        from onnx import numpy_helper
        self.model = model
        gr = model.graph
        self.consts = {i.name: numpy_helper.to_array(i) for i in gr.initializer}
        for n in gr.node:
            if n.op_type == "Constant":
                self.consts[n.output[0]] = numpy_helper.to_array(_attr(n, "value"))
        self.producer = {o: n for n in gr.node for o in n.output}
        self.consumers = {}
        for n in gr.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.tensors = {}
        self.ops = []
        self.qtype = {}          # quantized tensor name -> "int8" | "int16"

    # -- helpers
    def qparams(self, node):
        scale = self.consts.get(node.input[1])
        zp = self.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.uint8)
        if scale is None or zp is None:
            raise ExportError("%s: scale / zero point must be constants" % _label(node))
        return scale, zp

    def act_qparams(self, node):
        scale, zp = self.qparams(node)
        if scale.size != 1:
            raise ExportError("%s: per-channel activation quantization is not supported" % _label(node))
        if zp.dtype not in (np.int8, np.int16):
            raise ExportError("%s: activations must be int8 (QInt8) or int16 (QInt16), got %s" % (_label(node), zp.dtype))
        if zp.dtype == np.int16 and int(zp.reshape(())) != 0:
            raise ExportError("%s: int16 activations must be symmetric (zero point 0, TFLite 16x8 mode), got %d"
                              % (_label(node), int(zp.reshape(()))))
        self.qtype[node.output[0]] = zp.dtype.name
        return R.f32(scale.reshape(())), int(zp.reshape(()))

    def source(self, node, float_name):
        """A compute node's float input -> ('act', int8 tensor name) or ('const', array, scale, zp)."""
        p = self.producer.get(float_name)
        if p is None or p.op_type != "DequantizeLinear":
            if float_name in self.consts:
                return ("float_const", self.consts[float_name])
            raise ExportError("%s: input %r is not quantized (no DequantizeLinear before it)" % (_label(node), float_name))
        src = p.input[0]
        if src in self.consts:
            scale, zp = self.qparams(p)
            return ("const", self.consts[src], scale, zp, _attr(p, "axis", 1))
        if src not in self.tensors:
            raise ExportError("%s: input %r comes from an unsupported path" % (_label(node), float_name))
        return ("act", src)

    def act_input(self, node, i):
        s = self.source(node, node.input[i])
        if s[0] != "act":
            raise ExportError("%s: input %d must be an activation, got a constant" % (_label(node), i))
        return s[1]

    def output_q(self, node):
        """The single QuantizeLinear after a compute node -> (name of the int8 tensor, scale, zp)."""
        cons = self.consumers.get(node.output[0], [])
        if len(cons) != 1 or cons[0].op_type != "QuantizeLinear":
            raise ExportError("%s: output %r must feed exactly one QuantizeLinear (found %s)"
                              % (_label(node), node.output[0], [c.op_type for c in cons] or "none"))
        q = cons[0]
        scale, zp = self.act_qparams(q)
        return q.output[0], scale, zp

    def add_op(self, kind, node, inputs, shape, attrs):
        name, scale, zp = self.output_q(node)
        self.tensors[name] = TensorInfo(name, tuple(int(d) for d in shape), scale, zp)
        self.ops.append(Op(kind, node.name or node.output[0], list(inputs), name, attrs))
        return self.tensors[name]

    # -- main loop
    def run(self) -> Graph:
        gr = self.model.graph
        inputs = [i for i in gr.input if i.name not in self.consts]
        if len(inputs) != 1 or len(gr.output) != 1:
            raise ExportError("model must have exactly one input and one output (has %d inputs, %d outputs)"
                              % (len(inputs), len(gr.output)))
        gin = inputs[0]
        dims = [d.dim_value if d.dim_value > 0 else 1 for d in gin.type.tensor_type.shape.dim]
        qs = [c for c in self.consumers.get(gin.name, []) if c.op_type == "QuantizeLinear"]
        if len(qs) != 1 or len(self.consumers[gin.name]) != 1:
            raise ExportError("model input %r must feed exactly one QuantizeLinear (it feeds %s): not an int8 QDQ model"
                              % (gin.name, ", ".join(c.op_type for c in self.consumers.get(gin.name, [])) or "nothing"))
        scale, zp = self.act_qparams(qs[0])
        self.input = qs[0].output[0]
        self.tensors[self.input] = TensorInfo(self.input, tuple([1] + dims[1:]), scale, zp)

        for node in gr.node:
            op = node.op_type
            if op in ("Constant", "DequantizeLinear"):
                continue
            if op == "QuantizeLinear":
                self.quantize_node(node)
                continue
            if op not in SUPPORTED:
                raise ExportError("unsupported op %s at node %r: the ESP32 generator supports %s"
                                  % (op, node.name or node.output[0], ", ".join(SUPPORTED)))
            getattr(self, "op_" + op)(node)

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

    def assign_dtypes(self, g):
        """Give each tensor its quantized type; a graph with int16 activations becomes a 16x8 graph."""
        for name, t in g.tensors.items():
            t.dtype = self.qtype.get(name, "int8")       # argmax outputs and add constants: int8
        if any(t.dtype == "int16" for t in g.tensors.values()):
            from .int16_ref import to_16x8
            to_16x8(g)

    def quantize_node(self, node):
        src = node.input[0]
        p = self.producer.get(src)
        if p is None or p.op_type != "DequantizeLinear" or p.input[0] not in self.tensors:
            return  # the input Q, or the Q after a compute node: handled elsewhere
        t = self.tensors[p.input[0]]
        scale, zp = self.act_qparams(node)
        name = node.output[0]
        self.tensors[name] = TensorInfo(name, t.shape, scale, zp)
        if scale == t.scale and zp == t.zero_point:
            self.ops.append(Op("reshape", node.name or name, [t.name], name, {}))
        elif self.qtype.get(name) == "int16" or self.qtype.get(t.name) == "int16":
            raise ExportError("QuantizeLinear node %r: requantizing an int16 tensor is not supported" % (node.name or name))
        else:
            table = requant_table(t, self.tensors[name], -128, 127)
            self.ops.append(Op("lut", node.name or name, [t.name], name, {"table": table, "function": "requantize"}))

    # -- compute ops
    def _weights(self, node, i, out_channels):
        s = self.source(node, node.input[i])
        if s[0] != "const" or s[1].dtype != np.int8:
            raise ExportError("%s: weights must be a constant int8 tensor behind DequantizeLinear" % _label(node))
        w, scale, zp = s[1], s[2].astype(np.float32).reshape(-1), s[3].reshape(-1)
        if np.any(zp != 0):
            raise ExportError("%s: weights must be symmetric (zero point 0)" % _label(node))
        if scale.size == 1:
            scale = np.repeat(scale, out_channels)
        if scale.size != out_channels:
            raise ExportError("%s: weight scales must be per output channel (%d scales for %d channels)"
                              % (_label(node), scale.size, out_channels))
        return w, scale

    def _bias(self, node, i, n, s_in, s_w):
        if len(node.input) <= i or not node.input[i]:
            return np.zeros(n, np.int32)
        s = self.source(node, node.input[i])
        if s[0] != "const" or s[1].dtype != np.int32:
            raise ExportError("%s: bias must be a constant int32 tensor behind DequantizeLinear" % _label(node))
        b = s[1].reshape(-1).astype(np.int32)
        want = (np.float32(s_in) * s_w).astype(np.float32)
        got = s[2].astype(np.float32).reshape(-1)
        if got.size not in (1, n) or not np.allclose(got, want, rtol=1e-5, atol=0):
            raise ExportError("%s: bias scale must equal input scale * weight scale" % _label(node))
        return np.broadcast_to(b, (n,)).copy()

    def _requant_params(self, s_in, s_w, out, act="none"):
        mult, shift = [], []
        for sw in s_w:
            m, s = R.quantize_multiplier(float(s_in) * float(sw) / float(out.scale))
            mult.append(m)
            shift.append(s)
        lo, hi = R.activation_range(act, out.scale, out.zero_point)
        return {"multiplier": np.array(mult, np.int32), "shift": np.array(shift, np.int32),
                "output_offset": out.zero_point, "activation_min": lo, "activation_max": hi}

    def op_Gemm(self, node):
        x = self.tensors[self.act_input(node, 0)]
        if _attr(node, "transA", 0) or _attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0:
            raise ExportError("%s: only alpha=1, beta=1, transA=0 are supported" % _label(node))
        s = self.source(node, node.input[1])
        w = s[1] if s[0] == "const" else None
        if w is None or w.ndim != 2:
            raise ExportError("%s: weights must be a constant 2-D int8 tensor" % _label(node))
        trans_b = _attr(node, "transB", 0)
        out_f = w.shape[0] if trans_b else w.shape[1]
        w, s_w = self._weights(node, 1, out_f)
        w = w if trans_b else w.T
        self._fc(node, x, np.ascontiguousarray(w), s_w, 2)

    def op_MatMul(self, node):
        x = self.tensors[self.act_input(node, 0)]
        s = self.source(node, node.input[1])
        if s[0] != "const" or s[1].ndim != 2:
            raise ExportError("%s: only activation x constant 2-D weight MatMul is supported" % _label(node))
        w, s_w = self._weights(node, 1, s[1].shape[1])
        self._fc(node, x, np.ascontiguousarray(w.T), s_w, None)

    def _fc(self, node, x, w, s_w, bias_index):
        if len(x.shape) != 2 or x.shape[1] != w.shape[1]:
            raise ExportError("%s: input shape %s does not match weights %s (flatten first)"
                              % (_label(node), x.shape, w.shape))
        bias = self._bias(node, bias_index, w.shape[0], x.scale, s_w) if bias_index else np.zeros(w.shape[0], np.int32)
        name, scale, zp = self.output_q(node)
        out = TensorInfo(name, (1, w.shape[0]), scale, zp)
        attrs = {"weights": w.astype(np.int8), "bias": bias, "input_offset": -x.zero_point,
                 "weight_scales": s_w.astype(np.float32)}
        attrs.update(self._requant_params(x.scale, s_w, out))
        self.add_op("fc", node, [x.name], out.shape, attrs)

    def op_Conv(self, node):
        x = self.tensors[self.act_input(node, 0)]
        if len(x.shape) != 4:
            raise ExportError("%s: only 2-D convolution (NCHW input) is supported" % _label(node))
        s = self.source(node, node.input[1])
        if s[0] != "const" or s[1].ndim != 4:
            raise ExportError("%s: weights must be a constant 4-D int8 tensor" % _label(node))
        oc = s[1].shape[0]
        w, s_w = self._weights(node, 1, oc)
        group = int(_attr(node, "group", 1))
        C, H, W = x.shape[1:]
        if w.shape[1] * group != C or oc % group:
            raise ExportError("%s: weight shape %s does not fit %d input channels, group %d" % (_label(node), w.shape, C, group))
        kh, kw = w.shape[2:]
        strides = tuple(_attr(node, "strides", [1, 1]))
        dil = tuple(_attr(node, "dilations", [1, 1]))
        pads = _pads(node, (H, W), (kh, kw), strides, dil)
        oh = (H + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
        ow = (W + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
        if oh < 1 or ow < 1:
            raise ExportError("%s: output would be empty" % _label(node))
        bias = self._bias(node, 2, oc, x.scale, s_w)
        name, scale, zp = self.output_q(node)
        out = TensorInfo(name, (1, oc, oh, ow), scale, zp)
        attrs = {"weights": w.astype(np.int8), "bias": bias, "input_offset": -x.zero_point,
                 "strides": strides, "dilations": dil, "pads": pads, "group": group,
                 "weight_scales": s_w.astype(np.float32)}
        attrs.update(self._requant_params(x.scale, s_w, out))
        self.add_op("conv", node, [x.name], out.shape, attrs)

    def op_Add(self, node):
        srcs = [self.source(node, node.input[i]) for i in (0, 1)]
        if srcs[0][0] != "act":
            srcs = srcs[::-1]
        if srcs[0][0] != "act" or srcs[1][0] == "float_const":
            raise ExportError("%s: Add needs an int8 activation and an int8 activation or constant" % _label(node))
        a = self.tensors[srcs[0][1]]
        consts = {}
        if srcs[1][0] == "act":
            b = self.tensors[srcs[1][1]]
        else:
            arr, sc, zpb = srcs[1][1], srcs[1][2], srcs[1][3]
            if sc.size != 1 or arr.dtype != np.int8:
                raise ExportError("%s: a constant Add operand must be per-tensor int8" % _label(node))
            bname = node.name + "/const" if node.name else node.input[1] + "/const"
            b = TensorInfo(bname, arr.shape, R.f32(sc.reshape(())), int(zpb.reshape(())))
            try:
                np.broadcast_to(arr.reshape((1,) * (len(a.shape) - arr.ndim) + arr.shape), a.shape)
            except ValueError:
                raise ExportError("%s: constant of shape %s does not broadcast to %s" % (_label(node), arr.shape, a.shape))
            consts[bname] = arr.reshape((1,) * (len(a.shape) - arr.ndim) + arr.shape).astype(np.int8)
        if b.name not in consts and tuple(b.shape) != tuple(a.shape):
            raise ExportError("%s: Add of shapes %s and %s: only equal shapes or a constant operand" % (_label(node), a.shape, b.shape))
        name, scale, zp = self.output_q(node)
        out = TensorInfo(name, a.shape, scale, zp)
        attrs = add_params(a, b, out, consts)
        attrs["constant_quant"] = {n: (b.scale, b.zero_point) for n in consts}
        self.add_op("add", node, [a.name, b.name], a.shape, attrs)

    def _elementwise(self, node, function, lo=None, hi=None):
        x = self.tensors[self.act_input(node, 0)]
        name, scale, zp = self.output_q(node)
        out = TensorInfo(name, x.shape, scale, zp)
        if function in ("relu", "clip"):
            alo, ahi = R.activation_range("clip", out.scale, out.zero_point, lo, hi)
            table = requant_table(x, out, alo, ahi)
        else:
            table = float_table(x, out, function)
        self.add_op("lut", node, [x.name], x.shape, {"table": table, "function": function})

    def op_Relu(self, node):
        self._elementwise(node, "relu", 0.0, None)

    def op_Clip(self, node):
        lo = _attr(node, "min")
        hi = _attr(node, "max")
        for i, name in ((1, "lo"), (2, "hi")):
            if len(node.input) > i and node.input[i]:
                v = self.consts.get(node.input[i])
                if v is None:
                    raise ExportError("%s: Clip bounds must be constants" % _label(node))
                if name == "lo":
                    lo = float(v)
                else:
                    hi = float(v)
        self._elementwise(node, "clip", lo, hi)

    def op_Tanh(self, node):
        self._elementwise(node, "tanh")

    def op_Sigmoid(self, node):
        self._elementwise(node, "sigmoid")

    def _pool(self, node, kind, kernel, strides, pads, mode=None):
        x = self.tensors[self.act_input(node, 0)]
        if len(x.shape) != 4:
            raise ExportError("%s: pooling needs an NCHW input" % _label(node))
        name, scale, zp = self.output_q(node)
        C, H, W = x.shape[1:]
        oh = (H + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
        ow = (W + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
        out = TensorInfo(name, (1, C, oh, ow), scale, zp)
        attrs = {"kernel": tuple(kernel), "strides": tuple(strides), "pads": tuple(pads),
                 "activation_min": -128, "activation_max": 127}
        same = scale == x.scale and zp == x.zero_point
        if kind == "maxpool" and not same:
            raise ExportError("%s: MaxPool input and output quantization differ" % _label(node))
        if kind == "avgpool":
            if mode is None:
                mode = "round_div" if same else "mean"
            if mode == "mean" and any(pads):
                raise ExportError("%s: average pooling with padding needs equal input and output quantization"
                                  % _label(node))
            attrs["mode"] = mode
            count = int(kernel[0] * kernel[1])
            attrs["mean_multiplier"], attrs["mean_shift"] = R.mean_params(x.scale, scale, count)
            attrs["count"] = count
            attrs["input_zero_point"] = x.zero_point
            attrs["output_offset"] = zp
        return self.add_op(kind, node, [x.name], out.shape, attrs)

    def _pool_attrs(self, node):
        x = self.tensors[self.act_input(node, 0)]
        k = tuple(_attr(node, "kernel_shape"))
        st = tuple(_attr(node, "strides", [1, 1]))
        if _attr(node, "ceil_mode", 0) or tuple(_attr(node, "dilations", [1, 1])) != (1, 1):
            raise ExportError("%s: ceil_mode and dilations are not supported" % _label(node))
        return k, st, _pads(node, x.shape[2:], k, st, (1, 1))

    def op_MaxPool(self, node):
        if len(node.output) > 1 and node.output[1]:
            raise ExportError("%s: MaxPool indices output is not supported" % _label(node))
        self._pool(node, "maxpool", *self._pool_attrs(node))

    def op_AveragePool(self, node):
        k, st, pads = self._pool_attrs(node)
        if _attr(node, "count_include_pad", 0) and any(pads):
            raise ExportError("%s: count_include_pad=1 with padding is not supported" % _label(node))
        self._pool(node, "avgpool", k, st, pads)

    def op_GlobalAveragePool(self, node):
        x = self.tensors[self.act_input(node, 0)]
        self._pool(node, "avgpool", x.shape[2:], (1, 1), (0, 0, 0, 0), mode="mean")

    def op_ReduceMean(self, node):
        x = self.tensors[self.act_input(node, 0)]
        axes = _attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = self.consts.get(node.input[1])
        axes = sorted(int(a) % len(x.shape) for a in (axes if axes is not None else []))
        if len(x.shape) != 4 or axes != [2, 3]:
            raise ExportError("%s: ReduceMean only over the spatial axes (2, 3) of an NCHW tensor" % _label(node))
        t = self._pool(node, "avgpool", x.shape[2:], (1, 1), (0, 0, 0, 0), mode="mean")
        if not _attr(node, "keepdims", 1):
            t.shape = t.shape[:2]

    def _alias(self, node, shape):
        x = self.tensors[self.act_input(node, 0)]
        name, scale, zp = self.output_q(node)
        if int(np.prod(shape)) != x.size:
            raise ExportError("%s: reshape from %s to %s changes the size" % (_label(node), x.shape, shape))
        if scale != x.scale or zp != x.zero_point:
            raise ExportError("%s: input and output quantization differ" % _label(node))
        self.add_op("reshape", node, [x.name], shape, {})

    def op_Flatten(self, node):
        x = self.tensors[self.act_input(node, 0)]
        axis = _attr(node, "axis", 1) % max(len(x.shape), 1)
        if axis != 1:
            raise ExportError("%s: Flatten only with axis=1" % _label(node))
        self._alias(node, (1, x.size))

    def op_Reshape(self, node):
        x = self.tensors[self.act_input(node, 0)]
        shape = self.consts.get(node.input[1])
        if shape is None:
            raise ExportError("%s: the target shape must be a constant" % _label(node))
        shape = [int(d) for d in shape]
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1]))
            shape[shape.index(-1)] = x.size // max(known, 1)
        if shape[0] != 1:
            raise ExportError("%s: reshape must keep the batch dimension" % _label(node))
        self._alias(node, tuple(shape))

    def op_Squeeze(self, node):
        x = self.tensors[self.act_input(node, 0)]
        self._alias(node, (1,) + tuple(d for d in x.shape[1:] if d != 1))

    def op_Unsqueeze(self, node):
        raise ExportError("%s: Unsqueeze is not supported" % _label(node))

    def op_Identity(self, node):
        x = self.tensors[self.act_input(node, 0)]
        self._alias(node, x.shape)

    def op_Softmax(self, node):
        from .softmax_ref import softmax_params
        x = self.tensors[self.act_input(node, 0)]
        axis = _attr(node, "axis", -1) % len(x.shape)
        if axis != len(x.shape) - 1:
            raise ExportError("%s: Softmax only over the last axis" % _label(node))
        name, scale, zp = self.output_q(node)
        out = TensorInfo(name, x.shape, scale, zp)
        self.add_op("softmax", node, [x.name], x.shape, softmax_params(x, out, node_label=_label(node)))

    def op_ArgMax(self, node):
        x = self.tensors[self.act_input(node, 0)]
        axis = _attr(node, "axis", 0) % len(x.shape)
        if axis != len(x.shape) - 1 or len(x.shape) != 2:
            raise ExportError("%s: ArgMax only over the last axis of a (1, N) tensor" % _label(node))
        if x.shape[1] > 127:
            raise ExportError("%s: ArgMax over %d classes does not fit an int8 output" % (_label(node), x.shape[1]))
        name = node.output[0]
        self.tensors[name] = TensorInfo(name, (1, 1), 1.0, 0)
        self.ops.append(Op("argmax", node.name or name, [x.name], name, {}))


def _pads(node, hw, k, strides, dil):
    auto = _attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p = list(_attr(node, "pads", [0, 0, 0, 0]))
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
