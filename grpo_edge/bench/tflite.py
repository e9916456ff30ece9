"""TFLite baselines without TensorFlow: write .tflite files from OUR ONNX graphs, run them with LiteRT.

    info = onnx2tflite("model.onnx", "model.tflite")             # fp32
    info = onnx2tflite("model.int8.onnx", "model.int8.tflite")   # int8, the SAME parameters as our QDQ model
    y = run_tflite("model.int8.tflite", x)

Route (see notes/toolchain-findings.md): the flatbuffer is written with tflite-micro's bundled
model_editor (3 MB, no TensorFlow, no torch changes) and run with the ai-edge-litert interpreter
(OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, so the real builtin kernels run, not XNNPACK). The
int8 file carries the scales / zero points that onnx2int8 chose, so TFLite and our ORT int8 differ only
by kernel arithmetic (up to 1 LSB), not by a second calibration. Converters that re-quantize
(litert-torch, tensorflow) pull 1.1-1.5 GB and downgrade typing_extensions/pydantic: not used.

Supported ONNX ops: Gemm / MatMul (constant weights) -> FULLY_CONNECTED, Relu, Tanh, Sigmoid, Flatten
(no-op on 2-D). Anything else raises ExportError naming the op and node (e.g. Conv of lite-resnet).
Install: pip install "grpo-edge[tflite]" (ai-edge-litert, tflite-micro).
"""
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError
from grpo_edge.report import atomic_write_bytes

_ACT = {"Relu": "RELU", "Tanh": "TANH", "Sigmoid": "LOGISTIC"}


def tflite_available():
    """(True, "") if the converter and interpreter import, else (False, reason)."""
    try:
        import ai_edge_litert.interpreter  # noqa: F401
        from tflite_micro.tensorflow.lite.micro.compression import model_editor  # noqa: F401
    except ImportError as e:
        return False, "TFLite extra not installed (%s): pip install ai-edge-litert tflite-micro" % e
    return True, ""


def onnx2tflite(onnx_path, out_path) -> dict:
    """Write a .tflite equivalent of an fp32 or QDQ-int8 ONNX model (MLP-type graphs); returns info."""
    from onnx import numpy_helper
    from grpo_edge.export.onnx_utils import io_specs, load_onnx
    ok, why = tflite_available()
    if not ok:
        raise ExportError(why)
    from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

    onnx_path = Path(onnx_path)
    m = load_onnx(onnx_path)
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:   # onnxslim / ORT may keep small constants as Constant nodes
        if n.op_type == "Constant":
            init[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    nodes = [n for n in m.graph.node if n.op_type != "Constant"]
    int8 = any(n.op_type == "QuantizeLinear" for n in nodes)
    (inp,), outs = io_specs(m, "input"), io_specs(m, "output")
    if len(outs) != 1:
        raise ExportError("%s: %d outputs; the TFLite baseline handles one" % (onnx_path, len(outs)))

    # QDQ bookkeeping: DequantizeLinear output -> (quantized source, scale, zero point)
    dq = {}
    for n in nodes:
        if n.op_type == "DequantizeLinear":
            dq[n.output[0]] = (n.input[0], init.get(n.input[1]), init.get(n.input[2]) if len(n.input) > 2 else None)
    q_of = {n.input[0]: n for n in nodes if n.op_type == "QuantizeLinear"}    # float tensor -> its Q node
    q_out = {n.output[0]: n for n in nodes if n.op_type == "QuantizeLinear"}   # int8 tensor -> its Q node

    sg = me.Subgraph()
    model = me.Model(subgraphs=[sg], description="grpo-edge onnx2tflite from %s" % onnx_path.name)
    tensors = {}

    def act_tensor(name, shape):
        """The TFLite tensor for an ONNX activation (int8 models: a Q output, with that Q's params)."""
        if name in tensors:
            return tensors[name]
        if int8:
            qn = q_out.get(name)
            if qn is None:
                raise ExportError("%s: tensor %r has no QuantizeLinear: not a fully quantized QDQ model"
                                  % (onnx_path, name))
            s, z = init[qn.input[1]], init[qn.input[2]]
            t = me.Tensor(shape=shape, dtype=tfl.TensorType.INT8, name=name,
                          quantization=me.Quantization(scales=float(s), zero_points=int(z)))
        else:
            t = me.Tensor(shape=shape, dtype=tfl.TensorType.FLOAT32, name=name)
        sg.tensors.append(t)
        tensors[name] = t
        return t

    def source(name):
        """ONNX value feeding an op -> (float activation name, or weight array + quant params)."""
        if name in dq:
            src, s, z = dq[name]
            return src, s, z
        return name, None, None

    width = int(inp["shape"][-1])
    x_name = inp["name"]
    x_float = me.Tensor(shape=(1, width), dtype=tfl.TensorType.FLOAT32, name=x_name)
    sg.tensors.append(x_float)
    sg.inputs = [x_float]
    if int8:   # float input -> QUANTIZE -> int8 (the model's first Q node holds the params)
        if x_name not in q_of:
            raise ExportError("%s: input %r is not quantized: not a QDQ int8 model" % (onnx_path, x_name))
        xq = act_tensor(q_of[x_name].output[0], (1, width))
        sg.operators.append(me.Operator(opcode=tfl.BuiltinOperator.QUANTIZE, inputs=[x_float], outputs=[xq]))
    else:
        tensors[x_name] = x_float

    ops = []
    for n in nodes:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        a_name, _, _ = source(n.input[0])
        a = tensors.get(a_name)
        if a is None:
            raise ExportError("%s: node %s (%s) reads %r, which the TFLite converter did not produce"
                              % (onnx_path, n.name, n.op_type, a_name))
        if int8 and n.output[0] not in q_of:
            raise ExportError("%s: output of %s node %s is not quantized: not a fully quantized QDQ model"
                              % (onnx_path, n.op_type, n.name))
        out_name = q_of[n.output[0]].output[0] if int8 else n.output[0]
        if n.op_type in ("Gemm", "MatMul"):
            w_name, w_s, _ = source(n.input[1])
            if w_name not in init:
                raise ExportError("%s: %s node %s has a non-constant weight" % (onnx_path, n.op_type, n.name))
            w = init[w_name]
            attrs = {at.name: (at.i if at.type == 2 else at.f) for at in n.attribute}
            if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
                raise ExportError("%s: Gemm node %s uses transA/alpha/beta" % (onnx_path, n.name))
            if not (n.op_type == "Gemm" and attrs.get("transB", 0)):
                w = w.T                                   # FULLY_CONNECTED wants (out, in)
            w = np.ascontiguousarray(w)
            units = w.shape[0]
            wt = _const(me, tfl, w, w_name, "INT8" if int8 else "FLOAT32", w_s if int8 else None)
            bt = None
            if len(n.input) > 2 and n.input[2]:
                b_name, b_s, _ = source(n.input[2])
                b = init[b_name].reshape(-1)
                bt = _const(me, tfl, b, b_name, "INT32" if int8 else "FLOAT32", b_s if int8 else None)
            y = act_tensor(out_name, (1, units))
            op = me.Operator(opcode=tfl.BuiltinOperator.FULLY_CONNECTED, inputs=[a, wt, bt], outputs=[y])
            op._fb.builtinOptionsType = tfl.BuiltinOptions.FullyConnectedOptions
            op._fb.builtinOptions = tfl.FullyConnectedOptionsT()
            sg.tensors += [t for t in (wt, bt) if t is not None]
        elif n.op_type in _ACT:
            y = act_tensor(out_name, tuple(a.shape))
            op = me.Operator(opcode=getattr(tfl.BuiltinOperator, _ACT[n.op_type]), inputs=[a], outputs=[y])
        elif n.op_type == "Flatten" and len(a.shape) == 2:
            tensors[out_name] = a
            continue
        else:
            raise ExportError("%s: op %s (node %s) has no TFLite mapping in grpo-edge's converter "
                              "(supported: Gemm, MatMul, Relu, Tanh, Sigmoid)" % (onnx_path, n.op_type, n.name))
        sg.operators.append(op)
        ops.append(n.op_type)

    last = _last_int8(tensors, dq, outs[0]["name"]) if int8 else tensors.get(outs[0]["name"])
    if last is None:
        raise ExportError("%s: graph output %r is not produced by a converted op" % (onnx_path, outs[0]["name"]))
    if int8:   # int8 -> DEQUANTIZE -> float output, like a LiteRT int8 model with float I/O
        yf = me.Tensor(shape=tuple(last.shape), dtype=tfl.TensorType.FLOAT32, name=outs[0]["name"])
        sg.tensors.append(yf)
        sg.operators.append(me.Operator(opcode=tfl.BuiltinOperator.DEQUANTIZE, inputs=[last], outputs=[yf]))
        last = yf
    sg.outputs = [last]
    data = bytes(model.build())
    atomic_write_bytes(out_path, data)
    return {"path": str(out_path), "size_bytes": len(data), "dtype": "int8" if int8 else "fp32", "ops": ops,
            "converter": "tflite-micro model_editor (no TensorFlow), params copied from %s" % onnx_path.name}


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
        x = np.ascontiguousarray(x, dtype=np.float32)
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
    from grpo_edge.bench.runtime import ArrayPolicy
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
        if q.ndim == 4:
            q = q.transpose(0, 2, 3, 1)
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

