"""TFLite baselines without TensorFlow: write .tflite files from OUR ONNX graphs, run them with LiteRT.

    info = onnx2tflite("model.onnx", "model.tflite")             # fp32
    info = onnx2tflite("model.int8.onnx", "model.int8.tflite")   # int8, the SAME parameters as our QDQ model
    y = run_tflite("model.int8.tflite", x)

Route: the flatbuffer is written with tflite-micro's bundled
model_editor (3 MB, no TensorFlow, no torch changes) and run with the ai-edge-litert interpreter
(OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, so the real builtin kernels run, not XNNPACK). The
int8 file carries the scales / zero points that onnx2int8 chose, so TFLite and our ORT int8 differ only
by kernel arithmetic (up to 1 LSB), not by a second calibration. Converters that re-quantize
(litert-torch, tensorflow) pull 1.1-1.5 GB and downgrade typing_extensions/pydantic: not used.

Supported ONNX ops: Gemm / MatMul (constant weights) -> FULLY_CONNECTED, Relu, Tanh, Sigmoid, Flatten
(no-op on 2-D). fp32 graphs also take the small-CNN ops of lite-resnet and similar: Conv (CONV_2D, grouped
too, or DEPTHWISE_CONV_2D when group == channels), Add, Clip (RELU / RELU6 / MAXIMUM+MINIMUM), MaxPool,
AveragePool (count_include_pad=0 with non-SAME pads: PAD + pool + MUL by window / valid cells),
GlobalAveragePool / ReduceMean over H, W (MEAN), Flatten / Reshape of a spatial map.
Anything else raises ExportError naming the op and node.

Layout (as in targets/esp32/tflm.py): TFLite is NHWC. Image inputs (B, C, H, W) are transposed to
(B, H, W, C) by the runners, conv weights are written OHWI / 1HWO, ONNX pads become SAME / VALID or an
explicit PAD, and a flatten of a spatial map is TRANSPOSE (back to NCHW order) + RESHAPE, so the
FULLY_CONNECTED weights stay as ONNX wrote them. A 4-D graph output is transposed back to NCHW.
Install: pip install "grpo-edge[tflite]" (ai-edge-litert, tflite-micro).
"""
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError
from grpo_edge.report import atomic_write_bytes
from grpo_edge.targets.esp32.tflm import nhwc

_ACT = {"Relu": "RELU", "Tanh": "TANH", "Sigmoid": "LOGISTIC"}
_SPATIAL = ("Conv", "Add", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean", "Flatten",
            "Reshape")


def tflite_available():
    """(True, "") if the converter and interpreter import, else (False, reason)."""
    try:
        import ai_edge_litert.interpreter  # noqa: F401
        from tflite_micro.tensorflow.lite.micro.compression import model_editor  # noqa: F401
    except ImportError as e:
        return False, "TFLite extra not installed (%s): pip install ai-edge-litert tflite-micro" % e
    return True, ""


def onnx2tflite(onnx_path, out_path) -> dict:
    """Write a .tflite equivalent of an fp32 model (MLPs and small CNNs) or a QDQ-int8 MLP; returns info."""
    ok, why = tflite_available()
    if not ok:
        raise ExportError(why)
    onnx_path = Path(onnx_path)
    conv = _Converter(onnx_path)
    conv.add_input()
    ops = [conv.add_node(n) for n in conv.nodes if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    conv.add_output()
    data = bytes(conv.model.build())
    atomic_write_bytes(out_path, data)
    return {"path": str(out_path), "size_bytes": len(data), "dtype": "int8" if conv.int8 else "fp32",
            "ops": [op for op in ops if op is not None],
            "converter": "tflite-micro model_editor (no TensorFlow), params copied from %s" % onnx_path.name}


def _constants(m) -> dict:
    """{name: array} of the graph's initializers and Constant nodes (onnxslim / ORT may keep small constants
    as Constant nodes)."""
    from onnx import numpy_helper
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant":
            init[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return init


class _Converter(object):
    """One onnx2tflite run: the ONNX graph read (with its QDQ bookkeeping) and the TFLite subgraph built."""

    def __init__(self, onnx_path):
        from grpo_edge.export.onnx_utils import io_specs, load_onnx
        from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
        self.me, self.tfl, self.path = me, tfl, onnx_path
        m = load_onnx(onnx_path)
        self.init = _constants(m)
        self.nodes = [n for n in m.graph.node if n.op_type != "Constant"]
        self.int8 = any(n.op_type == "QuantizeLinear" for n in self.nodes)
        (self.inp,), self.outs = io_specs(m, "input"), io_specs(m, "output")
        if len(self.outs) != 1:
            raise ExportError("%s: %d outputs; the TFLite baseline handles one" % (onnx_path, len(self.outs)))
        # QDQ bookkeeping: DequantizeLinear output -> (quantized source, scale, zero point)
        self.dq = {n.output[0]: (n.input[0], self.init.get(n.input[1]),
                                 self.init.get(n.input[2]) if len(n.input) > 2 else None)
                   for n in self.nodes if n.op_type == "DequantizeLinear"}
        self.q_of = {n.input[0]: n for n in self.nodes if n.op_type == "QuantizeLinear"}   # float -> its Q node
        self.q_out = {n.output[0]: n for n in self.nodes if n.op_type == "QuantizeLinear"}  # int8 -> its Q node
        self.sg = me.Subgraph()
        self.model = me.Model(subgraphs=[self.sg], description="grpo-edge onnx2tflite from %s" % onnx_path.name)
        self.tensors = {}
        self.fp32 = _Fp32Ops(me, tfl, self.sg, self.init, self.tensors, onnx_path)

    def act_tensor(self, name, shape):
        """The TFLite tensor for an ONNX activation (int8 models: a Q output, with that Q's params)."""
        if name in self.tensors:
            return self.tensors[name]
        me, tfl = self.me, self.tfl
        if self.int8:
            qn = self.q_out.get(name)
            if qn is None:
                raise ExportError("%s: tensor %r has no QuantizeLinear: not a fully quantized QDQ model"
                                  % (self.path, name))
            s, z = self.init[qn.input[1]], self.init[qn.input[2]]
            t = me.Tensor(shape=shape, dtype=tfl.TensorType.INT8, name=name,
                          quantization=me.Quantization(scales=float(s), zero_points=int(z)))
        else:
            t = me.Tensor(shape=shape, dtype=tfl.TensorType.FLOAT32, name=name)
        self.sg.tensors.append(t)
        self.tensors[name] = t
        return t

    def source(self, name):
        """ONNX value feeding an op -> (float activation name, or weight array + quant params)."""
        if name in self.dq:
            return self.dq[name]
        return name, None, None

    def add_input(self):
        """The float input (NHWC for images); int8 models QUANTIZE it with the first Q node's params."""
        me, tfl, inp, path = self.me, self.tfl, self.inp, self.path
        width = int(inp["shape"][-1])
        x_name = inp["name"]
        in_shape = (1, width)
        if len(inp["shape"]) == 4 and not self.int8:
            if not all(isinstance(d, int) and d > 0 for d in inp["shape"][1:]):
                raise ExportError("%s: input %r has a non-fixed image shape %s" % (path, x_name, inp["shape"]))
            in_shape = nhwc([1] + list(inp["shape"][1:]))
        x_float = me.Tensor(shape=in_shape, dtype=tfl.TensorType.FLOAT32, name=x_name)
        self.sg.tensors.append(x_float)
        self.sg.inputs = [x_float]
        if self.int8:
            if x_name not in self.q_of:
                raise ExportError("%s: input %r is not quantized: not a QDQ int8 model" % (path, x_name))
            xq = self.act_tensor(self.q_of[x_name].output[0], (1, width))
            self.sg.operators.append(me.Operator(opcode=tfl.BuiltinOperator.QUANTIZE, inputs=[x_float], outputs=[xq]))
        else:
            self.tensors[x_name] = x_float

    def add_node(self, n):
        """Append the TFLite operators of ONNX node n; -> its op type (None for a Flatten of a 2-D tensor)."""
        me, tfl, path = self.me, self.tfl, self.path
        a_name, _, _ = self.source(n.input[0])
        a = self.tensors.get(a_name)
        if a is None:
            raise ExportError("%s: node %s (%s) reads %r, which the TFLite converter did not produce"
                              % (path, n.name, n.op_type, a_name))
        if self.int8 and n.output[0] not in self.q_of:
            raise ExportError("%s: output of %s node %s is not quantized: not a fully quantized QDQ model"
                              % (path, n.op_type, n.name))
        out_name = self.q_of[n.output[0]].output[0] if self.int8 else n.output[0]
        if n.op_type in ("Gemm", "MatMul"):
            op = self._fully_connected(n, a, out_name)
        elif n.op_type in _ACT:
            y = self.act_tensor(out_name, tuple(a.shape))
            op = me.Operator(opcode=getattr(tfl.BuiltinOperator, _ACT[n.op_type]), inputs=[a], outputs=[y])
        elif n.op_type == "Flatten" and len(a.shape) == 2:
            self.tensors[out_name] = a
            return None
        elif not self.int8 and n.op_type in _SPATIAL:
            self.fp32.convert(n, a)
            return n.op_type
        else:
            raise ExportError("%s: op %s (node %s) has no TFLite mapping in grpo-edge's converter "
                              "(supported: Gemm, MatMul, Relu, Tanh, Sigmoid%s)"
                              % (path, n.op_type, n.name, "" if self.int8 else ", " + ", ".join(_SPATIAL)))
        self.sg.operators.append(op)
        return n.op_type

    def _fully_connected(self, n, a, out_name):
        """Gemm / MatMul with a constant weight -> FULLY_CONNECTED (weights (out, in), int8: the QDQ params)."""
        me, tfl, path, int8 = self.me, self.tfl, self.path, self.int8
        w_name, w_s, _ = self.source(n.input[1])
        if w_name not in self.init:
            raise ExportError("%s: %s node %s has a non-constant weight" % (path, n.op_type, n.name))
        w = self.init[w_name]
        if len(a.shape) != 2:
            raise ExportError("%s: %s node %s reads a %d-D tensor; the TFLite converter takes 2-D"
                              % (path, n.op_type, n.name, len(a.shape)))
        attrs = {at.name: (at.i if at.type == 2 else at.f) for at in n.attribute}
        if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
            raise ExportError("%s: Gemm node %s uses transA/alpha/beta" % (path, n.name))
        if not (n.op_type == "Gemm" and attrs.get("transB", 0)):
            w = w.T                                   # FULLY_CONNECTED wants (out, in)
        w = np.ascontiguousarray(w)
        wt = _const(me, tfl, w, w_name, "INT8" if int8 else "FLOAT32", w_s if int8 else None)
        bt = None
        if len(n.input) > 2 and n.input[2]:
            b_name, b_s, _ = self.source(n.input[2])
            b = self.init[b_name].reshape(-1)
            bt = _const(me, tfl, b, b_name, "INT32" if int8 else "FLOAT32", b_s if int8 else None)
        y = self.act_tensor(out_name, (1, w.shape[0]))
        op = me.Operator(opcode=tfl.BuiltinOperator.FULLY_CONNECTED, inputs=[a, wt, bt], outputs=[y])
        op._fb.builtinOptionsType = tfl.BuiltinOptions.FullyConnectedOptions
        op._fb.builtinOptions = tfl.FullyConnectedOptionsT()
        self.sg.tensors += [t for t in (wt, bt) if t is not None]
        return op

    def add_output(self):
        """The graph output as float: NHWC maps back to NCHW; int8 models DEQUANTIZE (float I/O, like LiteRT's)."""
        me, tfl, name = self.me, self.tfl, self.outs[0]["name"]
        last = _last_int8(self.tensors, self.dq, name) if self.int8 else self.tensors.get(name)
        if last is None:
            raise ExportError("%s: graph output %r is not produced by a converted op" % (self.path, name))
        if not self.int8 and len(last.shape) == 4:
            last = self.fp32.to_nchw(last, name)
        if self.int8:
            yf = me.Tensor(shape=tuple(last.shape), dtype=tfl.TensorType.FLOAT32, name=name)
            self.sg.tensors.append(yf)
            self.sg.operators.append(me.Operator(opcode=tfl.BuiltinOperator.DEQUANTIZE, inputs=[last], outputs=[yf]))
            last = yf
        self.sg.outputs = [last]


class _Fp32Ops(object):
    """fp32 NHWC TFLite operators for the small-CNN ONNX ops (_SPATIAL) of onnx2tflite."""

    def __init__(self, me, tfl, sg, init, tensors, onnx_path):
        self.me, self.tfl, self.sg, self.init, self.tensors, self.path = me, tfl, sg, init, tensors, onnx_path
        self.B = tfl.BuiltinOperator

    def fail(self, n, why):
        raise ExportError("%s: op %s (node %s): %s" % (self.path, n.op_type, n.name, why))

    def tensor(self, name, shape):
        t = self.me.Tensor(shape=tuple(int(d) for d in shape), dtype=self.tfl.TensorType.FLOAT32, name=name)
        self.sg.tensors.append(t)
        return t

    def const(self, arr, name, dtype="FLOAT32"):
        return _const(self.me, self.tfl, np.ascontiguousarray(arr), name, dtype)

    def op(self, code, inputs, outputs, opt_type=None, opts=None):
        o = self.me.Operator(opcode=code, inputs=inputs, outputs=outputs)
        if opt_type is not None:
            o._fb.builtinOptionsType = getattr(self.tfl.BuiltinOptions, opt_type)
            o._fb.builtinOptions = opts
        self.sg.operators.append(o)
        return outputs[0]

    def convert(self, n, a):
        """Append the TFLite operators of ONNX node n (first input: TFLite tensor a), register its output."""
        from onnx import helper
        at = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        if n.op_type != "Add" and len(a.shape) != 4 and n.op_type not in ("Clip", "Flatten"):
            self.fail(n, "expects a 4-D (N, C, H, W) input, got %d-D" % len(a.shape))
        y = getattr(self, "_" + n.op_type.lower())(n, a, at)
        self.tensors[n.output[0]] = y

    def _pads(self, n, at, k, hw):
        """ONNX (top, left, bottom, right) pads, strides, dilations and output H, W of a Conv / pool."""
        strides = tuple(at.get("strides", (1, 1)))
        dil = tuple(at.get("dilations", (1, 1)))
        auto = at.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto == "VALID":
            pads = (0, 0, 0, 0)
        elif auto == "NOTSET":
            pads = tuple(at.get("pads", (0, 0, 0, 0)))
        else:
            self.fail(n, "auto_pad %s is not supported" % auto)
        ceil = at.get("ceil_mode", 0)
        out = []
        for i in range(2):
            span = hw[i] + pads[i] + pads[i + 2] - dil[i] * (k[i] - 1) - 1
            out.append((-(-span // strides[i]) if ceil else span // strides[i]) + 1)
        return pads, strides, dil, tuple(out)

    def _padding(self, pads, strides, dil, k, hw, out):
        """TFLite's padding ("VALID" or "SAME") when it equals the ONNX pads, else None."""
        if not any(pads) and all(out[i] == (hw[i] - dil[i] * (k[i] - 1) - 1) // strides[i] + 1 for i in range(2)):
            return "VALID"
        for i in range(2):
            o = -(-hw[i] // strides[i])
            total = max((o - 1) * strides[i] + dil[i] * (k[i] - 1) + 1 - hw[i], 0)
            if o != out[i] or (pads[i], pads[i + 2]) != (total // 2, total - total // 2):
                return None
        return "SAME"

    def _pad(self, n, a, pads, value=None):
        """An explicit PAD (zeros) or PADV2 (`value`) of the H, W axes by ONNX pads (t, l, b, r)."""
        pt, pl, pb, pr = pads
        _, H, W, C = a.shape
        p = self.const(np.array([[0, 0], [pt, pb], [pl, pr], [0, 0]], np.int32), n.name + "/pads", "INT32")
        y = self.tensor(n.name + "/padded", (1, H + pt + pb, W + pl + pr, C))
        if value is None:
            return self.op(self.B.PAD, [a, p], [y])
        return self.op(self.B.PADV2, [a, p, self.const(np.array([value], np.float32), n.name + "/pad_value")], [y])

    def _conv(self, n, a, at):
        if n.input[1] not in self.init:
            self.fail(n, "non-constant weight")
        w = self.init[n.input[1]].astype(np.float32)
        OC, CG, KH, KW = w.shape
        _, H, W, C = a.shape
        group = at.get("group", 1)
        pads, (sh, sw), (dh, dw), out = self._pads(n, at, (KH, KW), (H, W))
        pad = self._padding(pads, (sh, sw), (dh, dw), (KH, KW), (H, W), out)
        if pad is None:
            a, pad = self._pad(n, a, pads), "VALID"
        b = self.init.get(n.input[2]) if len(n.input) > 2 and n.input[2] else np.zeros(OC, np.float32)
        if b is None:
            self.fail(n, "non-constant bias")
        bt = self.const(b.astype(np.float32).reshape(-1), n.name + "/bias")
        y = self.tensor(n.output[0], (1, out[0], out[1], OC))
        padding = getattr(self.tfl.Padding, pad)
        if group == C and CG == 1 and group > 1:      # depthwise: 1HWO, output channel c * m + j reads channel c
            wt = self.const(w.transpose(1, 2, 3, 0), n.input[1])
            return self.op(self.B.DEPTHWISE_CONV_2D, [a, wt, bt], [y], "DepthwiseConv2DOptions",
                           self.tfl.DepthwiseConv2DOptionsT(padding=padding, strideW=sw, strideH=sh,
                                                            depthMultiplier=OC // C, dilationWFactor=dw,
                                                            dilationHFactor=dh))
        wt = self.const(w.transpose(0, 2, 3, 1), n.input[1])     # OHWI; I = C / group (LiteRT's grouped CONV_2D)
        return self.op(self.B.CONV_2D, [a, wt, bt], [y], "Conv2DOptions",
                       self.tfl.Conv2DOptionsT(padding=padding, strideW=sw, strideH=sh, dilationWFactor=dw,
                                               dilationHFactor=dh))

    def _pool(self, n, a, at, code, count_pad):
        k = tuple(at["kernel_shape"])
        _, H, W, C = a.shape
        if len(k) != 2 or tuple(at.get("dilations", (1, 1))) != (1, 1):
            self.fail(n, "only 2-D pooling without dilation")
        pads, (sh, sw), _, out = self._pads(n, at, k, (H, W))
        if at.get("ceil_mode", 0) and out != self._pads(n, dict(at, ceil_mode=0), k, (H, W))[3]:
            self.fail(n, "ceil_mode=1 changes the output size, which TFLite pooling cannot")
        pad = None if (count_pad and any(pads)) else self._padding(pads, (sh, sw), (1, 1), k, (H, W), out)
        rescale = None
        if pad is None:           # explicit PAD, then a VALID pool
            if code == self.B.MAX_POOL_2D:
                a = self._pad(n, a, pads, float(np.finfo(np.float32).min))
            else:                 # zeros that count (count_include_pad=1); else rescale by window / valid count
                a = self._pad(n, a, pads)
                if not count_pad:
                    counts = np.outer(_valid_counts(H, pads[0], k[0], sh, out[0]),
                                      _valid_counts(W, pads[1], k[1], sw, out[1]))
                    rescale = k[0] * k[1] / counts
            pad = "VALID"
        y = self.tensor(n.output[0] + ("/sum" if rescale is not None else ""), (1, out[0], out[1], C))
        y = self.op(code, [a], [y], "Pool2DOptions",
                    self.tfl.Pool2DOptionsT(padding=getattr(self.tfl.Padding, pad), strideW=sw, strideH=sh,
                                            filterWidth=k[1], filterHeight=k[0]))
        if rescale is None:
            return y
        r = self.const(rescale.reshape(1, out[0], out[1], 1).astype(np.float32), n.name + "/rescale")
        return self.op(self.B.MUL, [y, r], [self.tensor(n.output[0], y.shape)], "MulOptions", self.tfl.MulOptionsT())

    def _maxpool(self, n, a, at):
        if len(n.output) > 1 and n.output[1]:
            self.fail(n, "the Indices output is not supported")
        return self._pool(n, a, at, self.B.MAX_POOL_2D, False)

    def _averagepool(self, n, a, at):
        return self._pool(n, a, at, self.B.AVERAGE_POOL_2D, at.get("count_include_pad", 0))

    def _mean(self, n, a, keep):
        axis = self.const(np.array([1, 2], np.int32), n.name + "/axes", "INT32")
        y = self.tensor(n.output[0], (1, 1, 1, a.shape[3]) if keep else (1, a.shape[3]))
        return self.op(self.B.MEAN, [a, axis], [y], "ReducerOptions", self.tfl.ReducerOptionsT(keepDims=bool(keep)))

    def _globalaveragepool(self, n, a, at):
        return self._mean(n, a, True)

    def _reducemean(self, n, a, at):
        axes = at.get("axes")
        if axes is None and len(n.input) > 1 and n.input[1]:
            axes = self.init.get(n.input[1])
        if axes is None or sorted(int(x) % 4 for x in np.ravel(axes)) != [2, 3]:
            self.fail(n, "only a mean over H, W (axes 2, 3) is supported, got axes %s" % (axes,))
        return self._mean(n, a, at.get("keepdims", 1))

    def _add(self, n, a, at):
        ins = []
        for name in n.input:
            if name in self.tensors:
                ins.append(self.tensors[name])
            elif name in self.init:      # a constant, broadcast the ONNX way, then in NHWC order
                c = self.init[name].astype(np.float32)
                if len(a.shape) == 4:
                    c = c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(0, 2, 3, 1)
                ins.append(self.const(c, name))
            else:
                self.fail(n, "input %r is not produced by a converted op" % name)
        shape = np.broadcast_shapes(*[tuple(t.shape) for t in ins])
        y = self.tensor(n.output[0], shape)
        return self.op(self.B.ADD, ins, [y], "AddOptions", self.tfl.AddOptionsT())

    def _clip(self, n, a, at):
        lo, hi = at.get("min"), at.get("max")
        for i, name in ((1, "min"), (2, "max")):
            if len(n.input) > i and n.input[i]:
                if n.input[i] not in self.init:
                    self.fail(n, "non-constant %s" % name)
                v = float(self.init[n.input[i]])
                lo, hi = (v, hi) if i == 1 else (lo, v)
        named = {(0.0, 6.0): "RELU6", (0.0, None): "RELU", (-1.0, 1.0): "RELU_N1_TO_1"}.get((lo, hi))
        if named:
            return self.op(getattr(self.B, named), [a], [self.tensor(n.output[0], a.shape)])
        for v, code, tag in ((lo, self.B.MAXIMUM, "min"), (hi, self.B.MINIMUM, "max")):
            if v is not None:
                c = self.const(np.array([v], np.float32), "%s/%s" % (n.name, tag))
                a = self.op(code, [a, c], [self.tensor("%s/%s_out" % (n.name, tag), a.shape)])
        return a

    def _flatten(self, n, a, at):
        if len(a.shape) == 2:
            return a
        if at.get("axis", 1) != 1:
            self.fail(n, "only axis 1 is supported")
        return self.flat(n, a)

    def _reshape(self, n, a, at):
        shape = self.init.get(n.input[1])
        size = int(np.prod(a.shape[1:]))
        if shape is None or len(shape) != 2 or int(shape[0]) not in (0, -1, 1) or int(shape[1]) not in (-1, size):
            self.fail(n, "only a constant reshape to (batch, %d) (a flatten) is supported, got %s" % (size, shape))
        return self.flat(n, a)

    def flat(self, n, a):
        """(1, H, W, C) -> (batch, C*H*W) in ONNX (C, H, W) order: TRANSPOSE when H*W > 1 and C > 1, RESHAPE."""
        _, H, W, C = a.shape
        if H * W > 1 and C > 1:
            a = self.to_nchw(a, n.name + "/nchw")
        shape = self.const(np.array([-1, C * H * W], np.int32), n.name + "/shape", "INT32")
        y = self.tensor(n.output[0], (1, C * H * W))
        return self.op(self.B.RESHAPE, [a, shape], [y], "ReshapeOptions",
                       self.tfl.ReshapeOptionsT(newShape=[-1, C * H * W]))

    def to_nchw(self, a, name):
        _, H, W, C = a.shape
        perm = self.const(np.array([0, 3, 1, 2], np.int32), name + "/perm", "INT32")
        return self.op(self.B.TRANSPOSE, [a, perm], [self.tensor(name, (1, C, H, W))])


def _valid_counts(size, pad0, k, stride, out):
    """Per output position along one axis: how many of the k window cells are inside the unpadded input."""
    start = np.arange(out) * stride - pad0
    return np.minimum(start + k, size) - np.maximum(start, 0)


def _const(me, tfl, arr, name, dtype, scales=None):
    """A constant TFLite tensor; with `scales`, symmetric (zero point 0) per-tensor or per-axis-0 quantized."""
    np_dtype = {"INT8": np.int8, "INT32": np.int32, "FLOAT32": np.float32}[dtype]
    quant = None
    if scales is not None:
        s = np.atleast_1d(scales)
        quant = me.Quantization(scales=[float(v) for v in s], zero_points=[0] * s.size,
                                axis=0 if s.size > 1 else None)
    return me.Tensor(shape=arr.shape, dtype=getattr(tfl.TensorType, dtype), data=arr.astype(np_dtype), name=name,
                     quantization=quant)


def _last_int8(tensors, dq, out_name):
    src = dq.get(out_name, (out_name,))[0]
    if src not in tensors:
        raise ExportError("graph output %r is not produced by a quantized op" % out_name)
    return tensors[src]


def _to_nhwc(x):
    """A batch in ONNX layout -> TFLite layout: images (B, C, H, W) -> (B, H, W, C); other ranks as they are."""
    return x.transpose(0, 2, 3, 1) if x.ndim == 4 else x


class _Runner(object):
    def __init__(self, path):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
        try:
            self.it = Interpreter(model_path=str(path),
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        except Exception as e:
            raise ExportError("LiteRT cannot load %s (%s)" % (path, str(e).strip().splitlines()[0][:200]))
        self.i = self.it.get_input_details()[0]["index"]
        self.o = self.it.get_output_details()[0]["index"]
        self.batch = None

    def __call__(self, x):
        x = np.ascontiguousarray(_to_nhwc(np.asarray(x, dtype=np.float32)))
        if self.batch != len(x):
            self.it.resize_tensor_input(self.i, list(x.shape))
            self.it.allocate_tensors()
            self.batch = len(x)
        self.it.set_tensor(self.i, x)
        self.it.invoke()
        return self.it.get_tensor(self.o).copy()


def run_tflite(path, x) -> np.ndarray:
    """Run a .tflite file on a float32 batch with LiteRT's builtin kernels (no delegate)."""
    return _Runner(path)(x)


def tflite_policy(path):
    """An ArrayPolicy over a .tflite file, so a task scores it with its own metric."""
    from grpo_edge.export.evaluate import ArrayPolicy
    return ArrayPolicy(_Runner(path), name=str(path))


class _Int8IORunner(object):
    """LiteRT over an int8-in / int8-out .tflite (NHWC): float batch in ONNX layout -> float logits.

    Quantizes the input with the model's input scale / zero point (TFLite rounding), transposes NCHW ->
    NHWC, runs, dequantizes the output."""

    def __init__(self, path, in_q, out_q):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
        self.it = Interpreter(model_path=str(path),
                              experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        self.it.allocate_tensors()
        self.i = self.it.get_input_details()[0]["index"]
        self.o = self.it.get_output_details()[0]["index"]
        self.in_q, self.out_q = in_q, out_q

    def __call__(self, x):
        x = np.asarray(x, dtype=np.float32)
        s, zp = self.in_q
        q = np.clip(np.sign(x / s) * np.floor(np.abs(x / s) + 0.5) + zp, -128, 127).astype(np.int8)
        q = _to_nhwc(q)
        outs = []
        for i in range(len(q)):                 # the graph was built for batch 1
            self.it.set_tensor(self.i, np.ascontiguousarray(q[i:i + 1]))
            self.it.invoke()
            outs.append(self.it.get_tensor(self.o).astype(np.float32).reshape(1, -1))
        s, zp = self.out_q
        return (np.concatenate(outs) - zp) * s


def qdq2tflite_int8(int8_onnx_path, out_path):
    """The int8 QDQ model's exact parameters as an int8 .tflite, via the ESP32 IR (covers Conv, Add, pools,
    which onnx2tflite does not). Returns a runner callable on float batches."""
    from grpo_edge.report import atomic_write_bytes
    from grpo_edge.targets.esp32 import parse
    from grpo_edge.targets.esp32.tflm import to_tflite
    graph = parse.parse(str(int8_onnx_path))
    data, _notes = to_tflite(graph)
    atomic_write_bytes(out_path, data)
    ti, to = graph.tensors[graph.input], graph.tensors[graph.output]
    return _Int8IORunner(out_path, (float(ti.scale), int(ti.zero_point)), (float(to.scale), int(to.zero_point)))

