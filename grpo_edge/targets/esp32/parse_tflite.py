"""The TFLite front end: an int8 .tflite flatbuffer (TensorFlow's full-integer converter, or any writer that
follows the schema) -> the IR, keeping TFLite's numbers exactly.

    graph = tflite2ir("kws.tflite")         # ExportError (one line, naming the tensor or operator) when it cannot

The flatbuffer is read with the schema that ships inside the tflite-micro package (every field, no
TensorFlow). Each operator's kernel parameters are computed as TFLite Micro's Prepare computes them from the
file's scales (kernels/*_common.cc), so the generated C is bit-exact with TFLM on the same file:
  CONV_2D, DEPTHWISE_CONV_2D  per-channel QuantizeMultiplier(double(s_in) * double(s_w[c]) / double(s_out))
                              (a per-tensor filter scale repeated for every channel: the same formula)
  FULLY_CONNECTED             per-channel as above; per-tensor (one filter scale) GetQuantizedConvolutionMultipler:
                              double(float(s_in * s_w)) / double(s_out), the float product first
  fused activations           CalculateActivationRangeQuantized (zp + round(f / s_out), clamped)
  SAME padding                ComputePaddingHeightWidth: total = max((out - 1) * stride + (k - 1) * dil + 1 - in, 0),
                              before = total // 2
  AVERAGE_POOL_2D, MAX_POOL_2D  no rescale (TFLM requires equal input and output scales), the fused clamp
  ADD                         add_common.cc (ops/add.py: add_params), the fused clamp
  SOFTMAX                     PreprocessSoftmaxScaling(beta, s_in) (softmax_ref.softmax_params)

Layout: TFLite is NHWC, the IR NCHW (its kernels and planner work there). A 4-D activation is held NCHW in
the IR; where the order of the bytes matters (the graph's input and output, a RESHAPE of an image whose
channels and pixels are both more than one) a transpose op moves them, elsewhere (C == 1 or H * W == 1) a
reshape names the same bytes. The graph's input and output keep TFLite's shapes, byte order and types, so the
generated API takes and returns exactly what TFLM's set_input / get_output do.

`owners[k]`: the IR op that TFLite operator k computes (the per-op profile puts TFLM's instructions for
operator k beside ours).
"""
import math
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError

from . import reference as R
from .ir import Graph, Op, TensorInfo, file_hash

NHWC2NCHW, NCHW2NHWC = (0, 3, 1, 2), (0, 2, 3, 1)
ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}    # ActivationFunctionType
QUANTIZE_HINT = ("quantize it to int8 with TensorFlow Lite's converter (converter.optimizations = [tf.lite."
                 "Optimize.DEFAULT], a representative_dataset, target_spec.supported_ops = [tf.lite.OpsSet."
                 "TFLITE_BUILTINS_INT8], inference_input_type = inference_output_type = tf.int8)")


def _schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
    return tfl


def op_names() -> dict:
    """{builtin code: name} of TFLite's schema (BuiltinOperator)."""
    tfl = _schema()
    return {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}


def type_names() -> dict:
    tfl = _schema()
    return {v: k for k, v in vars(tfl.TensorType).items() if not k.startswith("_")}


def load_tflite(path):
    """The file's ModelT (object API: every field unpacked), or a one-line ExportError for a file that is not a
    TFLite flatbuffer, or a truncated / corrupt one."""
    path = Path(str(path))
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ExportError("cannot read %s: %s" % (path, e.strerror or e))
    if len(raw) < 8 or raw[4:8] != b"TFL3":
        raise ExportError("%s is not a TFLite model (no TFL3 flatbuffer identifier in its first 8 bytes)" % path.name)
    tfl = _schema()
    try:
        model = tfl.ModelT.InitFromPackedBuf(raw, 0)
    except Exception as e:  # noqa: BLE001 - flatbuffers raises IndexError, struct.error, ... on bad offsets
        raise ExportError("%s is truncated or corrupt: its flatbuffer cannot be read (%s)" % (path.name, type(e).__name__))
    return model, raw


def tflite2ir(path, layout="nchw") -> Graph:
    """A .tflite file -> the IR (Graph), with graph.owners (TFLite operator -> IR op index). Raises ExportError
    (one line) for anything that cannot be compiled, before any file is written.

    layout "nchw": images held NCHW (the compiler's own kernels, fastest on the C3 and the ESP32); "nhwc": held
    as TFLite holds them, conv and pool ops marked layout "nhwc" (the layout ESP-NN's kernels take, on the S3)."""
    if layout not in ("nchw", "nhwc"):
        raise ValueError("layout must be nchw or nhwc, got %r" % layout)
    model, raw = load_tflite(path)
    fallback = None
    if layout == "nhwc" and _holds_int16(model):     # ESP-NN has no 16x8 kernels: the NCHW ones take the model
        layout, fallback = "nchw", "a 16x8 model (int16 activations): ESP-NN has no 16x8 kernels, so the plain C " \
                                   "kernels (NCHW) compute it"
    reader = _Reader(model, raw, Path(str(path)).name, layout)
    g = reader.run()
    g.layout_fallback = fallback
    g.model_hash = file_hash(path)
    g.source = str(path)
    return g


def _holds_int16(model) -> bool:
    """Whether the model's (first) subgraph has an int16 tensor that is not a constant."""
    sg = (model.subgraphs or [None])[0]
    tfl = _schema()
    return sg is not None and any(t.type == tfl.TensorType.INT16 and not (t.buffer and t.buffer < len(model.buffers or [])
                                                                          and model.buffers[t.buffer].data is not None)
                                  for t in (sg.tensors or []))


def _fmt_shape(s):
    return "x".join(str(int(d)) for d in s)


class _Reader:
    def __init__(self, model, raw, fname, layout="nchw"):
        self.m, self.raw, self.fname, self.layout = model, raw, fname, layout
        self.names, self.types = op_names(), type_names()
        subgraphs = model.subgraphs or []
        if len(subgraphs) != 1:
            raise ExportError("%s has %d subgraphs: the compiler takes exactly one (control flow, WHILE / IF / "
                              "CALL_ONCE, is not supported)" % (fname, len(subgraphs)))
        self.sg = subgraphs[0]
        self.tt = self.sg.tensors or []
        self.tensors = {}          # IR name -> TensorInfo
        self.ops = []              # IR ops
        self.ir = {}               # TFLite tensor index -> IR tensor name (4-D: NCHW in the IR)
        self.owner_ops = []        # per TFLite operator: the IR Op that computes it (or None)
        self.used_names = set()

    # -- tensors
    def tname(self, i):
        t = self.tt[i]
        n = t.name.decode("utf-8", "replace") if isinstance(t.name, bytes) else str(t.name or "")
        return n or "tensor%d" % i

    def tlabel(self, i):
        return "tensor %r (index %d)" % (self.tname(i), i)

    def check_index(self, i, what):
        if not isinstance(i, (int, np.integer)) or i < 0 or i >= len(self.tt):
            raise ExportError("%s refers to tensor index %s, the subgraph has %d tensors" % (what, i, len(self.tt)))

    def shape(self, i):
        s = self.tt[i].shape
        return tuple(int(d) for d in (s if s is not None else ()))

    def dtype(self, i):
        return self.types.get(self.tt[i].type, str(self.tt[i].type))

    def quant(self, i, per_channel=False):
        """(scales float32 array, zero points int64 array, quantized dimension) of tensor i; checked finite, > 0."""
        q = self.tt[i].quantization
        scale = None if q is None or q.scale is None else np.asarray(q.scale, np.float32).reshape(-1)
        if scale is None or scale.size == 0:
            raise ExportError("%s has no quantization scale: the model is not quantized (%s)" % (self.tlabel(i), QUANTIZE_HINT))
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            bad = scale[~(np.isfinite(scale) & (scale > 0))][0]
            raise ExportError("%s has a zero, negative or non-finite scale (%r)" % (self.tlabel(i), float(bad)))
        zp = np.zeros(scale.size, np.int64) if q.zeroPoint is None else np.asarray(q.zeroPoint, np.int64).reshape(-1)
        if zp.size != scale.size:
            raise ExportError("%s has %d scales but %d zero points" % (self.tlabel(i), scale.size, zp.size))
        if scale.size > 1 and not per_channel:
            raise ExportError("%s is quantized per channel (%d scales): activations take one scale"
                              % (self.tlabel(i), scale.size))
        return scale, zp, int(q.quantizedDimension or 0)

    def const(self, i, what):
        """Constant tensor i as a NumPy array of its shape, from its buffer."""
        t = self.tt[i]
        nb = len(self.m.buffers or [])
        if t.buffer is None or t.buffer <= 0 or t.buffer >= nb:
            raise ExportError("%s (%s) must be a constant, but its buffer %s is %s (the file has %d buffers)"
                              % (self.tlabel(i), what, t.buffer, "missing" if t.buffer and t.buffer >= nb else "empty",
                                 nb))
        b = self.m.buffers[t.buffer]
        if b.offset and b.offset > 1:                      # data after the flatbuffer (models over 2 GB)
            data = self.raw[int(b.offset):int(b.offset) + int(b.size)]
        else:
            data = b.data
        np_type = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FLOAT32": np.float32,
                   "UINT8": np.uint8}.get(self.dtype(i))
        if np_type is None:
            raise ExportError("%s (%s) has type %s: not supported" % (self.tlabel(i), what, self.dtype(i)))
        arr = np.frombuffer(bytes(bytearray(data)) if data is not None else b"", dtype=np_type)
        shape = self.shape(i)
        if arr.size != int(np.prod(shape)):
            raise ExportError("%s (%s): its buffer holds %d values, its shape %s needs %d"
                              % (self.tlabel(i), what, arr.size, list(shape), int(np.prod(shape))))
        return arr.reshape(shape)

    def is_const(self, i):
        t = self.tt[i]
        if t.buffer is None or t.buffer <= 0 or t.buffer >= len(self.m.buffers or []):
            return False
        b = self.m.buffers[t.buffer]
        return (b.data is not None and len(b.data) > 0) or bool(b.offset and b.offset > 1)

    def new_tensor(self, name, shape, scale, zp, dtype="int8"):
        base, k = name, 1
        while name in self.tensors:
            k += 1
            name = "%s#%d" % (base, k)
        self.tensors[name] = TensorInfo(name, tuple(int(d) for d in shape), scale, zp, dtype)
        return self.tensors[name]

    def act_info(self, i):
        """(scale, zero point, IR dtype) of activation tensor i: int8 (any zero point) or int16 (zero point 0)."""
        dt = self.dtype(i)
        if dt == "FLOAT32":
            raise ExportError("%s is float32: %s is a float model; %s" % (self.tlabel(i), self.fname, QUANTIZE_HINT))
        if dt not in ("INT8", "INT16"):
            raise ExportError("%s has type %s: activations must be int8 (or int16, 16x8 mode)" % (self.tlabel(i), dt))
        scale, zp, _ = self.quant(i)
        if dt == "INT16" and int(zp[0]) != 0:
            raise ExportError("%s is int16 with zero point %d: 16x8 activations are symmetric" % (self.tlabel(i), zp[0]))
        return R.f32(scale[0]), int(zp[0]), dt.lower()

    def act(self, i, what):
        """The IR tensor that holds activation i (4-D: NCHW)."""
        if i not in self.ir:
            if self.is_const(i):
                raise ExportError("%s (%s) is a constant: an activation is expected there" % (self.tlabel(i), what))
            raise ExportError("%s (%s) is not computed by any earlier operator" % (self.tlabel(i), what))
        return self.tensors[self.ir[i]]

    def out_tensor(self, i, ir_shape):
        """Create the IR tensor for TFLite output tensor i with the IR shape (NCHW for 4-D), checked against the
        file's shape."""
        want = self.shape(i)
        tfl_shape = (tuple(ir_shape[k] for k in NCHW2NHWC) if len(ir_shape) == 4 and self.layout == "nchw"
                     else tuple(ir_shape))
        if want and tuple(want) != tuple(tfl_shape):
            raise ExportError("%s has shape %s, but the operator computes %s" % (self.tlabel(i), list(want), list(tfl_shape)))
        scale, zp, dt = self.act_info(i)
        t = self.new_tensor(self.tname(i), ir_shape, scale, zp, dt)
        self.ir[i] = t.name
        return t

    def add(self, kind, label, inputs, out, attrs):
        op = Op(kind, label, [t.name for t in inputs], out.name, attrs)
        self.ops.append(op)
        return op

    # -- layout: TFLite's byte order (NHWC) <-> the IR's (NCHW, or NHWC itself)
    def chw(self, x):
        """(C, H, W) of a 4-D IR tensor."""
        if self.layout == "nhwc":
            return x.shape[3], x.shape[1], x.shape[2]
        return tuple(x.shape[1:])

    def img(self, c, h, w):
        """The IR shape of a (c, h, w) image."""
        return (1, h, w, c) if self.layout == "nhwc" else (1, c, h, w)

    def nhwc_bytes(self, x, label):
        """An IR tensor whose bytes are in TFLite's order, of TFLite's shape: x itself (rank < 4, or the NHWC
        layout), a reshape (C == 1 or H * W == 1) or a transpose of x (4-D)."""
        if len(x.shape) != 4 or self.layout == "nhwc":
            return x
        _, C, H, W = x.shape
        shape = (1, H, W, C)
        t = self.new_tensor(x.name + "/nhwc", shape, x.scale, x.zero_point, x.dtype)
        if C == 1 or H * W == 1:
            self.add("reshape", label + "/view", [x], t, {})
        else:
            self.add("transpose", label + "/to_nhwc", [x], t, {"perm": NCHW2NHWC})
        return t

    def from_nhwc_bytes(self, t, name, label):
        """The IR tensor (NCHW) for bytes t in TFLite's order and 4-D NHWC shape."""
        _, H, W, C = t.shape
        x = self.new_tensor(name, (1, C, H, W), t.scale, t.zero_point, t.dtype)
        if C == 1 or H * W == 1:
            self.add("reshape", label + "/view", [t], x, {})
        else:
            self.add("transpose", label + "/to_nchw", [t], x, {"perm": NHWC2NCHW})
        return x

    # -- the walk
    def run(self) -> Graph:
        from .parse import compile_refusal  # noqa: F401  (the ONNX front end's wording, kept alike)
        sg = self.sg
        ins, outs = list(sg.inputs if sg.inputs is not None else []), list(sg.outputs if sg.outputs is not None else [])
        if len(ins) != 1 or len(outs) != 1:
            raise ExportError("%s has %d inputs and %d outputs: the compiler takes models with one input and one output"
                              % (self.fname, len(ins), len(outs)))
        self.check_index(ins[0], "the subgraph's input")
        self.check_index(outs[0], "the subgraph's output")
        edges = self._float_edges(ins[0], outs[0])        # QUANTIZE in / DEQUANTIZE out: the generated C's edges
        self._input(ins[0] if edges[0] is None else edges[0][1])
        problems, poisoned = [], set()
        codes = self.m.operatorCodes or []
        rules = RULES
        skip = {e[0] for e in edges if e is not None}
        for k, op in enumerate(sg.operators or []):
            if k in skip:
                self.owner_ops.append(None)
                continue
            if op.opcodeIndex is None or op.opcodeIndex >= len(codes):
                raise ExportError("operator %d refers to operator code %s, the file has %d" % (k, op.opcodeIndex, len(codes)))
            oc = codes[op.opcodeIndex]
            code = max(int(oc.builtinCode or 0), int(oc.deprecatedBuiltinCode or 0))
            name = self.names.get(code, "CUSTOM" if code == 32 else "builtin %d" % code)
            if name == "CUSTOM":
                cc = oc.customCode.decode("utf-8", "replace") if isinstance(oc.customCode, bytes) else oc.customCode
                name = "CUSTOM %s" % cc
            label = "operator %d (%s)" % (k, name)
            ins_k = [int(i) for i in (op.inputs if op.inputs is not None else [])]
            outs_k = [int(i) for i in (op.outputs if op.outputs is not None else [])]
            for i in ins_k + outs_k:
                if i != -1:
                    self.check_index(i, label)
            self.owner_ops.append(None)
            if name not in rules:                        # listed even behind another refusal: the user sees all
                problems.append("%d %s" % (k, name))
                poisoned.update(outs_k)
                continue
            if any(i in poisoned for i in ins_k):
                poisoned.update(outs_k)
                continue
            if len(outs_k) != 1:
                raise ExportError("%s has %d outputs, 1 expected" % (label, len(outs_k)))
            n_before = len(self.ops)
            try:
                rules[name](self, label, op, ins_k, outs_k[0])
            except ExportError as e:
                if "is a float model" in str(e):
                    raise
                problems.append("%d %s (%s)" % (k, name, e))
                poisoned.update(outs_k)
                continue
            self.owner_ops[-1] = self.ops[-1] if len(self.ops) > n_before else None
        if problems:
            raise ExportError("%d operator%s of %s cannot be compiled for the ESP32: %s (it compiles %s)"
                              % (len(problems), "" if len(problems) == 1 else "s", self.fname, "; ".join(problems),
                                 ", ".join(sorted(rules))))
        self.float_edges = edges
        return self._finish(outs[0] if edges[1] is None else edges[1][1])

    def _float_edges(self, i, o):
        """A float32 model input read only by one QUANTIZE, a float32 output written by a DEQUANTIZE of an int8
        tensor: ((operator index, int8 tensor) or None) for each. The generated C then takes and returns the int8
        codes (its header gives the scale and zero point); TFLM's float edges are compared through them."""
        ops = list(self.sg.operators or [])
        codes = self.m.operatorCodes or []

        def name(op):
            oc = codes[op.opcodeIndex] if op.opcodeIndex is not None and op.opcodeIndex < len(codes) else None
            return self.names.get(max(int(oc.builtinCode or 0), int(oc.deprecatedBuiltinCode or 0))) if oc else None
        edge_in = edge_out = None
        if self.dtype(i) == "FLOAT32":
            readers = [(k, op) for k, op in enumerate(ops) if i in list(op.inputs if op.inputs is not None else [])]
            if len(readers) == 1 and name(readers[0][1]) == "QUANTIZE" and readers[0][1].outputs is not None \
                    and self.dtype(int(readers[0][1].outputs[0])) in ("INT8", "INT16"):
                edge_in = (readers[0][0], int(readers[0][1].outputs[0]))
        if self.dtype(o) == "FLOAT32":
            writers = [(k, op) for k, op in enumerate(ops) if o in list(op.outputs if op.outputs is not None else [])]
            if len(writers) == 1 and name(writers[0][1]) == "DEQUANTIZE" and writers[0][1].inputs is not None \
                    and self.dtype(int(writers[0][1].inputs[0])) in ("INT8", "INT16"):
                edge_out = (writers[0][0], int(writers[0][1].inputs[0]))
        return edge_in, edge_out

    def _input(self, i):
        scale, zp, dt = self.act_info(i)
        shape = self.shape(i)
        if not shape or any(d <= 0 for d in shape):
            raise ExportError("the input %s has shape %s: fixed sizes are needed" % (self.tlabel(i), list(shape)))
        shape = (1,) + shape[1:]
        self.input = self.new_tensor(self.tname(i), shape, scale, zp, dt).name
        self.input_nchw = None
        if len(shape) == 4 and self.layout == "nchw":
            self.ir[i] = self.from_nhwc_bytes(self.tensors[self.input], self.tname(i) + "/nchw", "input").name
            if self.ops and self.ops[-1].kind == "transpose":
                self.input_nchw = self.ir[i]          # a conv may read the NHWC input instead (_conv)
        else:
            self.ir[i] = self.input

    def _finish(self, o):
        if o not in self.ir:
            raise ExportError("the output %s is not computed by any operator" % self.tlabel(o))
        out = self.nhwc_bytes(self.tensors[self.ir[o]], "output")
        if out.name == self.input:
            raise ExportError("%s has no compute operators" % self.fname)
        from .parse import _prune
        ops = _prune(self.ops, {out.name}, out.name)
        g = Graph(self.tensors, ops, self.input, out.name)
        index = {id(op): k for k, op in enumerate(ops)}
        g.owners = [index.get(id(op)) if op is not None else None for op in self.owner_ops]
        g.io_layout = "tflite"
        g.layout = self.layout
        g.float_edges = tuple(e is not None for e in self.float_edges)   # (float input, float output) in the .tflite
        if any(t.dtype == "int16" for t in g.tensors.values()):
            from .tflite16 import lower_16x8
            lower_16x8(g, self.fname)
        return g

    # -- shared pieces of the op rules
    def options(self, op, label, cls):
        o = op.builtinOptions
        if o is None:
            return cls()
        if not isinstance(o, cls):
            raise ExportError("its options are %s, %s expected" % (type(o).__name__, cls.__name__))
        return o

    def activation_range(self, code, out):
        kind = ACTIVATIONS.get(int(code or 0))
        if kind is None:
            raise ExportError("fused activation %d is not supported (NONE, RELU, RELU_N1_TO_1, RELU6)" % code)
        if kind == "relu_n1_to_1":
            return R.activation_range("clip", out.scale, out.zero_point, -1.0, 1.0, out.qmin, out.qmax)
        return R.activation_range(kind, out.scale, out.zero_point, qmin=out.qmin, qmax=out.qmax)

    def weights(self, i, what, channels, axis):
        """int8 weights (zero point 0) and their scales, one per output channel (a per-tensor scale repeated);
        per_channel tells which TFLM formula applies."""
        if self.dtype(i) == "FLOAT32":
            raise ExportError("%s is float32: %s is a float model; %s" % (self.tlabel(i), self.fname, QUANTIZE_HINT))
        if self.dtype(i) != "INT8":
            raise ExportError("%s (%s) has type %s: int8 weights expected" % (self.tlabel(i), what, self.dtype(i)))
        w = self.const(i, what)
        scale, zp, qdim = self.quant(i, per_channel=True)
        if np.any(zp != 0):
            raise ExportError("%s (%s) has a non-zero zero point: weights must be symmetric" % (self.tlabel(i), what))
        if scale.size > 1 and (scale.size != channels or qdim != axis):
            raise ExportError("%s (%s) has %d scales on dimension %d: one per output channel (%d) on dimension %d expected"
                              % (self.tlabel(i), what, scale.size, qdim, channels, axis))
        return w, (scale if scale.size > 1 else np.repeat(scale, channels)), scale.size > 1

    def bias(self, ins, k, n, what, x):
        """The bias and whether it is int64: int8 models take an int32 bias, 16x8 ones (int16 input x) an int64 bias
        (TFLM's int64 requantization, tflite16.py)."""
        if len(ins) <= k or ins[k] == -1:
            return np.zeros(n, np.int32), False
        i = ins[k]
        want = "INT64" if x.dtype == "int16" else "INT32"
        if self.dtype(i) != want:
            raise ExportError("%s (%s) has type %s: an %s bias expected%s" % (
                self.tlabel(i), what, self.dtype(i), want.lower(),
                " in a 16x8 model (TensorFlow's converter writes int64; TFLM's int16 kernels gave other numbers "
                "than TFLite's int32-bias rule on such files here)" if want == "INT64" else ""))
        b = self.const(i, what).reshape(-1)
        if b.size != n:
            raise ExportError("%s (%s) has %d values for %d output channels" % (self.tlabel(i), what, b.size, n))
        wide = self.dtype(i) == "INT64"
        return b.astype(np.int64 if wide else np.int32), wide

    def per_channel_multipliers(self, s_in, s_w, s_out):
        """PopulateConvolutionQuantizationParams / per-channel FC: double(s_in) * double(s_w[c]) / double(s_out)."""
        pairs = [R.quantize_multiplier(float(np.float32(s_in)) * float(sw) / float(np.float32(s_out))) for sw in s_w]
        return np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32)

    def padding(self, code, hw, k, strides, dil, label):
        """(top, left, bottom, right) and the output (OH, OW) for TFLite's SAME / VALID."""
        pads, out = [], []
        for d in range(2):
            dk = (k[d] - 1) * dil[d] + 1
            if code == 0:                                    # SAME
                o = -(-hw[d] // strides[d])
                total = max((o - 1) * strides[d] + dk - hw[d], 0)
                pads.append((total // 2, total - total // 2))
            elif code == 1:                                  # VALID
                o = (hw[d] - dk) // strides[d] + 1
                pads.append((0, 0))
            else:
                raise ExportError("padding %r is neither SAME nor VALID" % code)
            if o < 1:
                raise ExportError("a %dx%d window over a %dx%d input leaves no output" % (k[0], k[1], hw[0], hw[1]))
            out.append(o)
        return (pads[0][0], pads[1][0], pads[0][1], pads[1][1]), tuple(out)

    def positive(self, v, what):
        if v is None or int(v) < 1:
            raise ExportError("%s must be at least 1, got %r" % (what, v))
        return int(v)


# ----------------------------------------------------------------------------- the op rules

def fully_connected(r, label, op, ins, o):
    tfl = _schema()
    opt = r.options(op, label, tfl.FullyConnectedOptionsT)
    if int(opt.weightsFormat or 0) != 0:
        raise ExportError("shuffled weights (weightsFormat %d) are not supported" % opt.weightsFormat)
    if opt.asymmetricQuantizeInputs:
        raise ExportError("hybrid quantization (float inputs, int8 weights): %s" % QUANTIZE_HINT)
    x = r.act(ins[0], "input")
    ws = r.shape(ins[1])
    if len(ws) != 2:
        raise ExportError("weights %s have shape %s, (out, in) expected" % (r.tlabel(ins[1]), list(ws)))
    n_out, n_in = ws
    x = r.nhwc_bytes(x, label)                         # TFLite flattens in its own byte order
    if x.size % n_in:
        raise ExportError("input of %d values does not split into rows of %d (weights %s)" % (x.size, n_in, list(ws)))
    rows = x.size // n_in
    if len(x.shape) != 2 or x.shape[1] != n_in:
        v = r.new_tensor(x.name + "/rows", (1, n_in) if rows == 1 else (1, rows, n_in), x.scale, x.zero_point, x.dtype)
        r.add("reshape", label + "/rows", [x], v, {})
        x = v
    w, s_w, per_channel = r.weights(ins[1], "weights", n_out, 0)
    bias, bias64 = r.bias(ins, 2, n_out, "bias", x)
    ir_shape = (1, n_out) if rows == 1 else (1, rows, n_out)
    want = r.shape(o)
    if opt.keepNumDims or (want and len(want) != len(ir_shape) and int(np.prod(want)) == int(np.prod(ir_shape))):
        ir_shape = tuple(want) if want else ir_shape
    s_out, zp_out, _ = r.act_info(o)
    if per_channel:
        mult, shift = r.per_channel_multipliers(x.scale, s_w, s_out)
    else:
        m, s = R.quantize_multiplier(float(np.float32(np.float32(x.scale) * s_w[0])) / float(np.float32(s_out)))
        mult, shift = np.full(n_out, m, np.int32), np.full(n_out, s, np.int32)
    out = r.out_tensor(o, ir_shape if len(ir_shape) != 4 else (1, ir_shape[3], ir_shape[1], ir_shape[2]))
    if len(out.shape) == 4:
        raise ExportError("a 4-D output is not supported")
    lo, hi = r.activation_range(opt.fusedActivationFunction, out)
    r.add("fc", label, [x], out, {"weights": w.astype(np.int8), "bias": bias, "bias64": bias64,
                                  "input_offset": -x.zero_point,
                                  "weight_scales": s_w.astype(np.float32), "multiplier": mult, "shift": shift,
                                  "output_offset": out.zero_point, "activation_min": lo, "activation_max": hi})


def _conv(r, label, op, ins, o, depthwise):
    tfl = _schema()
    opt = r.options(op, label, tfl.DepthwiseConv2DOptionsT if depthwise else tfl.Conv2DOptionsT)
    x = r.act(ins[0], "input")
    if len(x.shape) != 4:
        raise ExportError("input %s has rank %d: NHWC (4-D) expected" % (r.tlabel(ins[0]), len(x.shape)))
    C, H, W = r.chw(x)
    nhwc_input = None                 # a conv of the model input reads its NHWC bytes (no transpose, no copy)
    if r.layout == "nchw" and not depthwise and x.name == r.input_nchw and x.dtype == "int8":
        nhwc_input = r.tensors[r.input]
    ws = r.shape(ins[1])
    if len(ws) != 4:
        raise ExportError("filter %s has shape %s: 4-D expected" % (r.tlabel(ins[1]), list(ws)))
    if depthwise:
        _, KH, KW, OC = ws
        if ws[0] != 1 or OC % C:
            raise ExportError("depthwise filter shape %s does not fit %d input channels" % (list(ws), C))
        mult = int(opt.depthMultiplier or 0) or OC // C
        if OC != C * mult:
            raise ExportError("depthwise filter has %d channels, input %d x depth multiplier %d" % (OC, C, mult))
        w, s_w, _ = r.weights(ins[1], "filter", OC, 3)
        w = w[0].transpose(2, 0, 1)[:, None]               # (1, KH, KW, C*M) -> (C*M, 1, KH, KW)
        group = C
    else:
        OC, KH, KW, IC = ws
        if IC < 1 or C % IC or OC % (C // IC):
            raise ExportError("filter shape %s does not fit %d input channels" % (list(ws), C))
        w, s_w, _ = r.weights(ins[1], "filter", OC, 0)
        w = w.transpose(0, 3, 1, 2)                        # OHWI -> OIHW
        group = C // IC
    strides = (r.positive(opt.strideH, "strideH"), r.positive(opt.strideW, "strideW"))
    dil = (r.positive(opt.dilationHFactor or 1, "dilationHFactor"), r.positive(opt.dilationWFactor or 1, "dilationWFactor"))
    pads, (oh, ow) = r.padding(opt.padding, (H, W), (KH, KW), strides, dil, label)
    bias, bias64 = r.bias(ins, 2, OC, "bias", x)
    out = r.out_tensor(o, r.img(OC, oh, ow))
    m, s = r.per_channel_multipliers(x.scale, s_w, out.scale)
    lo, hi = r.activation_range(opt.fusedActivationFunction, out)
    if nhwc_input is not None and group != 1:
        nhwc_input = None
    r.add("conv", label, [x if nhwc_input is None else nhwc_input], out, {
        "weights": np.ascontiguousarray(w, np.int8), "bias": bias, "bias64": bias64,
                                    "input_nhwc": nhwc_input is not None,
                                    "input_offset": -x.zero_point, "strides": strides, "dilations": dil, "pads": pads,
                                    "group": group, "weight_scales": s_w.astype(np.float32), "multiplier": m,
                                    "shift": s, "output_offset": out.zero_point, "activation_min": lo,
                                    "activation_max": hi, "layout": r.layout, "in_plane": H * W,
                                    "out_plane": oh * ow})


def conv_2d(r, label, op, ins, o):
    _conv(r, label, op, ins, o, False)


def depthwise_conv_2d(r, label, op, ins, o):
    _conv(r, label, op, ins, o, True)


def _pool(r, label, op, ins, o, kind):
    tfl = _schema()
    opt = r.options(op, label, tfl.Pool2DOptionsT)
    x = r.act(ins[0], "input")
    if len(x.shape) != 4:
        raise ExportError("input %s has rank %d: NHWC (4-D) expected" % (r.tlabel(ins[0]), len(x.shape)))
    C, H, W = r.chw(x)
    k = (r.positive(opt.filterHeight, "filterHeight"), r.positive(opt.filterWidth, "filterWidth"))
    strides = (r.positive(opt.strideH, "strideH"), r.positive(opt.strideW, "strideW"))
    pads, (oh, ow) = r.padding(opt.padding, (H, W), k, strides, (1, 1), label)
    s_out, zp_out, _ = r.act_info(o)
    if abs(float(s_out) - float(x.scale)) > 1e-6 or zp_out != x.zero_point:   # TFLM's pooling Prepare
        raise ExportError("input and output quantization differ (%g / %d vs %g / %d): TFLite pools do not rescale"
                          % (x.scale, x.zero_point, s_out, zp_out))
    out = r.out_tensor(o, r.img(C, oh, ow))
    lo, hi = r.activation_range(opt.fusedActivationFunction, out)
    attrs = {"kernel": k, "strides": strides, "pads": pads, "activation_min": lo, "activation_max": hi,
             "layout": r.layout}
    if kind == "avgpool":
        count = k[0] * k[1]
        attrs["mean_multiplier"], attrs["mean_shift"] = R.mean_params(x.scale, out.scale, count)
        attrs.update({"mode": "round_div", "count": count, "input_zero_point": x.zero_point,
                      "output_offset": out.zero_point})
    r.add(kind, label, [x], out, attrs)


def average_pool_2d(r, label, op, ins, o):
    _pool(r, label, op, ins, o, "avgpool")


def max_pool_2d(r, label, op, ins, o):
    _pool(r, label, op, ins, o, "maxpool")


def _constant_operand(r, i, x, what):
    """A constant int8 operand of an elementwise op with activation x: (its TensorInfo, its codes broadcastable to
    x in the IR's layout)."""
    if r.dtype(i) != "INT8":
        raise ExportError("%s %s has type %s: an int8 constant expected" % (what, r.tlabel(i), r.dtype(i)))
    arr = r.const(i, what)
    scale, zp, _ = r.quant(i)
    rank = len(x.shape)
    if arr.ndim > rank:
        raise ExportError("%s %s of shape %s does not broadcast to %s" % (what, r.tlabel(i), list(arr.shape), rank))
    arr = arr.reshape((1,) * (rank - arr.ndim) + arr.shape)
    if rank == 4 and r.layout == "nchw":
        arr = arr.transpose(NHWC2NCHW)
    try:
        np.broadcast_to(arr, x.shape)
    except ValueError:
        raise ExportError("%s %s of shape %s does not broadcast to %s" % (what, r.tlabel(i), list(r.shape(i)),
                                                                          list(r.shape(i))))
    name = r.tname(i) + "/const"
    return TensorInfo(name, arr.shape, R.f32(scale[0]), int(zp[0]), "int8"), np.ascontiguousarray(arr, np.int8)


def _add_or_sub(r, label, op, ins, o, sub):
    """ADD (add_common.cc: double arithmetic) and SUB (sub_common.cc: the same rule computed in float, the second
    term subtracted: ADD with its multiplier negated, mbqm being odd)."""
    from .ops.add import add_params
    tfl = _schema()
    opt = r.options(op, label, tfl.SubOptionsT if sub else tfl.AddOptionsT)
    if len(ins) != 2:
        raise ExportError("%d inputs, 2 expected" % len(ins))
    consts = {}
    if r.is_const(ins[0]) and not sub:
        ins = [ins[1], ins[0]]
    a = r.act(ins[0], "input 0")
    if a.dtype != "int8" and (sub or r.is_const(ins[1])):
        raise ExportError("int16 %s is not supported from TFLite yet" % ("SUB" if sub else "ADD of a constant"))
    if r.is_const(ins[1]):
        b, arr = _constant_operand(r, ins[1], a, "input 1")
        consts[b.name] = arr
    else:
        b = r.act(ins[1], "input 1")
        if tuple(a.shape) != tuple(b.shape):
            raise ExportError("inputs of shapes %s and %s: only equal shapes or a constant operand"
                              % (_fmt_shape(r.shape(ins[0])), _fmt_shape(r.shape(ins[1]))))
    out = r.out_tensor(o, a.shape)
    attrs = add_params(a, b, out, consts)
    if sub:
        twice = np.float32(2.0) * max(np.float32(a.scale), np.float32(b.scale))
        m1, s1 = R.quantize_multiplier(float(np.float32(np.float32(a.scale) / twice)))
        m2, s2 = R.quantize_multiplier(float(np.float32(np.float32(b.scale) / twice)))
        mo, so = R.quantize_multiplier(float(np.float32(twice / np.float32(np.float32(1 << 20) * np.float32(out.scale)))))
        attrs.update(input1_multiplier=m1, input1_shift=s1, input2_multiplier=-m2, input2_shift=s2,
                     output_multiplier=mo, output_shift=so, subtract=True)
    attrs["constant_quant"] = {n: (b.scale, b.zero_point) for n in consts}
    attrs["activation_min"], attrs["activation_max"] = r.activation_range(opt.fusedActivationFunction, out)
    r.add("add", label, [a, b], out, attrs)


def add(r, label, op, ins, o):
    _add_or_sub(r, label, op, ins, o, False)


def sub(r, label, op, ins, o):
    _add_or_sub(r, label, op, ins, o, True)


def mul(r, label, op, ins, o):
    """MUL (mul_common.cc): (a - za)(b - zb) times double(sa) * double(sb) / double(sy), + zy, clamped. By a scalar
    constant: a 256-entry table of that arithmetic."""
    from .ops.mul import reference as mul_ref
    tfl = _schema()
    opt = r.options(op, label, tfl.MulOptionsT)
    if len(ins) != 2:
        raise ExportError("%d inputs, 2 expected" % len(ins))
    if r.is_const(ins[0]):
        ins = [ins[1], ins[0]]
    a = r.act(ins[0], "input 0")
    if a.dtype != "int8":
        raise ExportError("int16 MUL is not supported from TFLite yet")
    s_out, zp_out, _ = r.act_info(o)
    if r.is_const(ins[1]):
        b, arr = _constant_operand(r, ins[1], a, "input 1")
    else:
        b, arr = r.act(ins[1], "input 1"), None
    m, sh = R.quantize_multiplier(float(np.float32(a.scale)) * float(np.float32(b.scale)) / float(np.float32(s_out)))
    if arr is None:
        try:
            shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        except ValueError:
            raise ExportError("inputs of shapes %s and %s do not broadcast" % (list(r.shape(ins[0])), list(r.shape(ins[1]))))
        if len(a.shape) != len(b.shape) or shape[0] != 1 or len(shape) > 4:
            raise ExportError("inputs of shapes %s and %s: equal ranks (4 at most) expected" % (
                list(r.shape(ins[0])), list(r.shape(ins[1]))))
    else:
        shape = a.shape
    out = r.out_tensor(o, shape)
    lo, hi = r.activation_range(opt.fusedActivationFunction, out)
    attrs = {"a_offset": -a.zero_point, "b_offset": -b.zero_point, "multiplier": m, "shift": sh,
             "output_offset": out.zero_point, "activation_min": lo, "activation_max": hi}
    if arr is None:
        r.add("mul", label, [a, b], out, attrs)
    elif arr.size == 1:                                # x times one constant: the table of TFLM's arithmetic
        from .tflite_luts import CODES
        table = mul_ref(CODES, np.full(256, int(arr.reshape(-1)[0]), np.int64), attrs).astype(np.int8)
        r.add("lut", label, [a], out, {"table": table, "function": "mul"})
    else:
        raise ExportError("a MUL by a constant tensor of %d values (only by a scalar constant)" % arr.size)


def concatenation(r, label, op, ins, o):
    """CONCATENATION: TFLM takes int8 inputs with the output's scale and zero point (no rescale)."""
    tfl = _schema()
    opt = r.options(op, label, tfl.ConcatenationOptionsT)
    if int(opt.fusedActivationFunction or 0):
        raise ExportError("a fused activation on CONCATENATION is not supported")
    xs = [r.act(i, "input %d" % k) for k, i in enumerate(ins)]
    s_out, zp_out, _ = r.act_info(o)
    for k, x in enumerate(xs):
        if np.float32(x.scale) != np.float32(s_out) or x.zero_point != zp_out or x.dtype != "int8":
            raise ExportError("input %d's quantization (%g / %d) differs from the output's (%g / %d): TFLM's int8 "
                              "concatenation does not rescale" % (k, x.scale, x.zero_point, s_out, zp_out))
    rank = len(xs[0].shape)
    axis = int(opt.axis or 0) % rank
    if rank == 4 and r.layout == "nchw":
        axis = NHWC2NCHW.index(axis)                   # TFLite's axis among the IR's NCHW axes
    if axis == 0 or any(len(x.shape) != rank or tuple(np.delete(x.shape, axis)) != tuple(np.delete(xs[0].shape, axis))
                        for x in xs):
        raise ExportError("inputs of shapes %s do not concatenate on axis %d" % ([list(r.shape(i)) for i in ins], opt.axis))
    shape = list(xs[0].shape)
    shape[axis] = int(sum(x.shape[axis] for x in xs))
    out = r.out_tensor(o, tuple(shape))
    r.add("concat", label, xs, out, {"axis": axis, "tables": [None] * len(xs), "constants": {}})


def transpose(r, label, op, ins, o):
    """TRANSPOSE with a constant permutation, in TFLite's own axes (the bytes moved to TFLite's order first)."""
    x = r.nhwc_bytes(r.act(ins[0], "input"), label)
    perm = [int(v) for v in np.asarray(r.const(ins[1], "perm")).reshape(-1)]
    rank = len(x.shape)
    if sorted(perm) != list(range(rank)) or perm[0] != 0 or rank > 4:
        raise ExportError("permutation %s of a rank-%d tensor (the batch axis first, rank 4 at most)" % (perm, rank))
    s_out, zp_out, _ = r.act_info(o)
    if np.float32(s_out) != np.float32(x.scale) or zp_out != x.zero_point:
        raise ExportError("input and output quantization differ")
    shape = tuple(x.shape[k] for k in perm)
    if rank == 4 and r.layout == "nchw":
        t = r.new_tensor(r.tname(o) + "/nhwc", shape, x.scale, x.zero_point, x.dtype)
        r.add("transpose", label, [x], t, {"perm": tuple(perm)})
        r.ir[o] = r.from_nhwc_bytes(t, r.tname(o), label).name
        return
    out = r.out_tensor(o, shape)
    r.add("transpose", label, [x], out, {"perm": tuple(perm)})


def strided_slice(r, label, op, ins, o):
    """STRIDED_SLICE with constant begin / end / strides and TFLite's begin, end and shrink masks (no ellipsis, no
    new axes: TFLM has neither), as TFLite resolves them (strided_slice_common.cc)."""
    tfl = _schema()
    opt = r.options(op, label, tfl.StridedSliceOptionsT)
    if int(opt.ellipsisMask or 0) or int(opt.newAxisMask or 0):
        raise ExportError("ellipsis and new-axis masks are not supported (TFLM has neither)")
    x = r.act(ins[0], "input")
    tshape = (1,) + tuple(r.shape(ins[0])[1:])
    rank = len(tshape)
    begin, end, step = (np.asarray(r.const(i, w), np.int64).reshape(-1) for i, w in
                        zip(ins[1:4], ("begin", "end", "strides")))
    if not (len(begin) == len(end) == len(step) == rank) or np.any(step == 0):
        raise ExportError("begin / end / strides of lengths %d / %d / %d for a rank-%d input (strides non-zero)"
                          % (len(begin), len(end), len(step), rank))
    starts, sizes, steps, shrink = [], [], [], []
    for k in range(rank):
        n, st = tshape[k], int(step[k])
        b = 0 if st > 0 else n - 1
        if not (int(opt.beginMask or 0) >> k) & 1:
            b = int(begin[k]) + (n if begin[k] < 0 else 0)
            b = min(max(b, 0), n) if st > 0 else min(max(b, -1), n - 1)
        if (int(opt.shrinkAxisMask or 0) >> k) & 1:
            if k == 0:
                raise ExportError("shrinking the batch axis is not supported")
            e, shrink = b + 1, shrink + [k]
            st = 1
        elif (int(opt.endMask or 0) >> k) & 1:
            e = n if st > 0 else -1
        else:
            e = int(end[k]) + (n if end[k] < 0 else 0)
            e = min(max(e, 0), n) if st > 0 else min(max(e, -1), n - 1)
        size = max(0, -(-(e - b) // st)) if st > 0 else max(0, -(-(b - e) // -st))
        starts.append(b)
        sizes.append(size)
        steps.append(st)
    if any(n == 0 for n in sizes) or sizes[0] != 1:
        raise ExportError("the slice is empty or cuts the batch axis: sizes %s" % sizes)
    s_out, zp_out, _ = r.act_info(o)
    if np.float32(s_out) != np.float32(x.scale) or zp_out != x.zero_point:
        raise ExportError("input and output quantization differ")
    if rank == 4 and r.layout == "nchw":               # the slice on the IR's NCHW axes
        order = list(NHWC2NCHW)
        starts, sizes, steps = ([v[k] for k in order] for v in (starts, sizes, steps))
    full = tuple(sizes)
    kept_rank = rank - len(shrink)
    if not shrink:
        out = r.out_tensor(o, full)
        r.add("strided_slice", label, [x], out, {"begin": starts, "size": sizes, "step": steps})
        return
    t = r.new_tensor(r.tname(o) + "/unshrunk", full, x.scale, x.zero_point, x.dtype)
    r.add("strided_slice", label, [x], t, {"begin": starts, "size": sizes, "step": steps})
    t = r.nhwc_bytes(t, label) if rank == 4 else t
    shape = (1,) + tuple(r.shape(o)[1:]) if kept_rank > 1 or r.shape(o) else (1,)
    if len(shape) == 4 and r.layout == "nchw":
        v = r.new_tensor(r.tname(o) + "/nhwc", shape, x.scale, x.zero_point, x.dtype)
        r.add("reshape", label + "/shrink", [t], v, {})
        r.ir[o] = r.from_nhwc_bytes(v, r.tname(o), label).name
        return
    out = r.out_tensor(o, shape)
    r.add("reshape", label + "/shrink", [t], out, {})


def reshape(r, label, op, ins, o):
    """RESHAPE / SQUEEZE / EXPAND_DIMS: the same bytes in TFLite's order under the output's shape."""
    x = r.act(ins[0], "input")
    want = r.shape(o)
    if not want:
        raise ExportError("output %s has no shape" % r.tlabel(o))
    s_out, zp_out, _ = r.act_info(o)
    if np.float32(s_out) != np.float32(x.scale) or zp_out != x.zero_point:
        raise ExportError("input and output quantization differ")
    if int(np.prod(want)) != x.size:
        raise ExportError("output shape %s has %d values, the input %d" % (list(want), int(np.prod(want)), x.size))
    t = r.nhwc_bytes(x, label)
    want = (1,) + tuple(want[1:])
    if len(want) == 4 and r.layout == "nchw":
        v = r.new_tensor(r.tname(o) + "/nhwc", want, x.scale, x.zero_point, x.dtype)
        r.add("reshape", label, [t], v, {})
        y = r.from_nhwc_bytes(v, r.tname(o), label)
        r.ir[o] = y.name
    else:
        y = r.out_tensor(o, want)
        r.add("reshape", label, [t], y, {})


def softmax(r, label, op, ins, o):
    from .softmax_ref import softmax_params
    tfl = _schema()
    opt = r.options(op, label, tfl.SoftmaxOptionsT)
    x = r.act(ins[0], "input")
    if len(x.shape) == 4:
        raise ExportError("softmax of a 4-D tensor (over its channels) is not supported yet")
    out = r.out_tensor(o, x.shape)
    beta = float(np.float32(opt.beta if opt.beta is not None else 1.0))
    scaled = TensorInfo(x.name, x.shape, beta * float(np.float32(x.scale)), x.zero_point)   # double(beta) * s_in
    if x.dtype == "int16":                              # SoftmaxInt16 (tflite16.py lowers it)
        if not (np.float32(out.scale) == np.float32(1.0 / 32768) and out.zero_point == 0):
            raise ExportError("output scale %g / zero point %d: TFLite's int16 softmax writes 1/32768 and 0"
                              % (out.scale, out.zero_point))
        r.add("softmax", label, [x], out, {"beta_scale": scaled.scale})
        return
    if not (np.float32(out.scale) == np.float32(1.0 / 256) and out.zero_point == -128):
        raise ExportError("output scale %g / zero point %d: TFLite's int8 softmax writes 1/256 and -128"
                          % (out.scale, out.zero_point))
    attrs = softmax_params(scaled, out, label)
    r.add("softmax", label, [x], out, attrs)


def pad(r, label, op, ins, o):
    """PAD / PADV2 (constant mode): the output's zero point, or PADV2's constant, in the new cells."""
    x = r.act(ins[0], "input")
    widths = np.asarray(r.const(ins[1], "paddings"), np.int64)
    rank = len(x.shape)
    if widths.shape != (rank, 2) or widths.min(initial=0) < 0 or tuple(widths[0]) != (0, 0):
        raise ExportError("paddings %s do not fit a rank-%d input (none on the batch axis, no cropping)"
                          % (widths.tolist(), rank))
    s_out, zp_out, _ = r.act_info(o)
    if np.float32(s_out) != np.float32(x.scale) or zp_out != x.zero_point:
        raise ExportError("input and output quantization differ")
    if rank == 4 and r.layout == "nchw":               # NHWC paddings -> NCHW
        widths = widths[list(NHWC2NCHW)]
    value = zp_out
    if len(ins) > 2 and ins[2] != -1:
        v = r.const(ins[2], "constant value").reshape(-1)
        if v.size != 1:
            raise ExportError("the constant value must be a scalar")
        value = int(v[0])
    shape = tuple(int(d + w0 + w1) for d, (w0, w1) in zip(x.shape, widths))
    out = r.out_tensor(o, shape)
    r.add("pad", label, [x], out, {"widths": tuple((int(a), int(b)) for a, b in widths), "value": value,
                                   "table": None, "real_value": float((value - zp_out) * float(s_out))})


def mean(r, label, op, ins, o):
    """MEAN over the spatial axes (1, 2) of an NHWC tensor: QuantizedMeanOrSum (reference.mean_params)."""
    tfl = _schema()
    opt = r.options(op, label, tfl.ReducerOptionsT)
    x = r.act(ins[0], "input")
    axes = sorted(int(a) % max(len(x.shape), 1) for a in np.asarray(r.const(ins[1], "axis")).reshape(-1))
    if len(x.shape) != 4 or axes != [1, 2]:
        raise ExportError("MEAN over axes %s of a rank-%d tensor: only over the spatial axes (1, 2) of an NHWC one"
                          % (axes, len(x.shape)))
    C, H, W = r.chw(x)
    s_out, zp_out, _ = r.act_info(o)
    keep = bool(opt.keepDims)
    out = r.out_tensor(o, r.img(C, 1, 1) if keep else (1, C))
    attrs = {"kernel": (H, W), "strides": (1, 1), "pads": (0, 0, 0, 0), "activation_min": -128, "activation_max": 127,
             "mode": "mean", "count": H * W, "input_zero_point": x.zero_point, "output_offset": zp_out,
             "layout": r.layout}
    attrs["mean_multiplier"], attrs["mean_shift"] = R.mean_params(x.scale, s_out, H * W)
    if keep:
        r.add("avgpool", label, [x], out, attrs)
    else:
        inner = r.new_tensor(out.name + "/4d", r.img(C, 1, 1), out.scale, out.zero_point, out.dtype)
        r.add("avgpool", label + "/pool", [x], inner, attrs)
        r.add("reshape", label, [inner], out, {})


def _table_rule(name):
    """An int8 elementwise operator as the 256-entry table of TFLM's own arithmetic (tflite_luts.py)."""
    def rule(r, label, op, ins, o):
        from .tflite_luts import tflite_table
        x = r.act(ins[0], "input")
        if x.dtype == "int16" and r.dtype(o) == "INT16" and name in ("TANH", "LOGISTIC"):
            out = r.out_tensor(o, x.shape)          # TFLM's int16 kernels (tflite16.py lowers it)
            r.add("lut", label, [x], out, {"function": name.lower()})
            return
        if x.dtype != "int8" or r.dtype(o) != "INT8":
            raise ExportError("%s from %s to %s: int8 to int8 only (int16: TANH and LOGISTIC)"
                              % (name, x.dtype, r.dtype(o).lower()))
        out = r.out_tensor(o, x.shape)
        if name == "LOGISTIC" and out.zero_point != -128:
            raise ExportError("output zero point %d: TFLite's int8 LOGISTIC writes -128" % out.zero_point)
        table = tflite_table(name, x.scale, x.zero_point, out.scale, out.zero_point)
        r.add("lut", label, [x], out, {"table": table, "function": name.lower()})
    return rule


RULES = {"FULLY_CONNECTED": fully_connected, "CONV_2D": conv_2d, "DEPTHWISE_CONV_2D": depthwise_conv_2d,
         "AVERAGE_POOL_2D": average_pool_2d, "MAX_POOL_2D": max_pool_2d, "ADD": add, "RESHAPE": reshape,
         "SQUEEZE": reshape, "EXPAND_DIMS": reshape, "SOFTMAX": softmax, "PAD": pad, "PADV2": pad,
         "MEAN": mean, "SUB": sub, "MUL": mul, "CONCATENATION": concatenation, "TRANSPOSE": transpose,
         "STRIDED_SLICE": strided_slice}
RULES.update({name: _table_rule(name) for name in ("RELU", "RELU6", "TANH", "LOGISTIC", "HARD_SWISH", "QUANTIZE")})
