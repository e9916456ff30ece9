"""TFLite Micro baseline: the SAME int8 (or 16x8) parameters written as a .tflite (tflite-micro's bundled
model_editor, no TensorFlow), run in TFLM's MicroInterpreter (pip `tflite-micro`).

16x8 graphs (int16 activations, zero point 0; int8 per-channel weights) map to FULLY_CONNECTED int16
with an INT32 bias (TFLM then uses the same int32 accumulator + double rounding as our C) and TANH
int16 (output scale 2^-15). TFLM's ARG_MAX has no int16 kernel, so a 16x8 graph ending in argmax
cannot run there (TargetError).

Compared with our C: outputs (bit-exact or the largest LSB difference with the reason), host
instructions per inference (valgrind callgrind: MicroInterpreter::Invoke vs <prefix>_invoke), RAM
(TFLM's arena size, found by bisection in subprocesses because too small an arena can crash it) and
flash (.tflite bytes + an estimate of the TFLM runtime's code).

Layout: TFLite is NHWC. Inputs are transposed NCHW -> NHWC before set_input, weights to OHWI /
1HWO; a flatten of a spatial map becomes TRANSPOSE (to NCHW order) + RESHAPE.
"""
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError

TFLM_RUNTIME_FLASH = (10_000, 20_000)    # bytes: TFLM framework code, public figure (notes/anchors.md)
REASON_ARGMAX16 = ("TFLM's ARG_MAX takes float32/int8 only (arg_min_max.cc fails at Invoke on INT16), "
                   "so a 16x8 graph ending in argmax has no TFLM equivalent")
REASON_TANH = ("TFLM computes int8 TANH/LOGISTIC with gemmlowp fixed-point at fixed output scales "
               "(1/128, 1/256) then a QUANTIZE to the model's scale; we use a 256-entry table of "
               "quantize(f(dequantize(q))), which matches onnxruntime exactly")


def available() -> bool:
    try:
        import tflite_micro  # noqa: F401
    except ImportError:
        return False
    return True


def _nhwc(shape):
    return (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else tuple(shape)


class _Builder:
    def __init__(self, graph):
        from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
        self.me, self.tfl, self.g = me, tfl, graph
        self.t = {}
        self.ops = []
        self.notes = []

    def act(self, name, shape=None, scale=None, zp=None, dtype=None):
        if name in self.t and shape is None:
            return self.t[name]
        info = self.g.tensors.get(name)
        shape = _nhwc(info.shape) if shape is None else shape
        q = self.me.Quantization(scales=[float(info.scale if scale is None else scale)],
                                 zero_points=[int(info.zero_point if zp is None else zp)])
        if dtype is None:             # the graph's type; helper tensors (pads, transposes) take the activations'
            dtype = self._type(info.dtype if info is not None else self.g.activation_dtype)
        t = self.me.Tensor(shape=shape, dtype=dtype, quantization=q, name=name)
        self.t[name] = t
        return t

    def _type(self, dtype):
        return {"int8": self.tfl.TensorType.INT8, "int16": self.tfl.TensorType.INT16}[dtype]

    def const(self, arr, name, dtype, scales=None, axis=None):
        q = None
        if scales is not None:
            q = self.me.Quantization(scales=[float(s) for s in scales], zero_points=[0] * len(scales), axis=axis)
        return self.me.Tensor(shape=arr.shape, dtype=dtype, data=np.ascontiguousarray(arr), quantization=q, name=name)

    def op(self, code, inputs, outputs, opt_type=None, opts=None):
        o = self.me.Operator(opcode=code, inputs=inputs, outputs=outputs)
        if opt_type is not None:
            o._fb.builtinOptionsType = opt_type
            o._fb.builtinOptions = opts
        self.ops.append(o)

    def padding(self, a, hw, out_hw, k, label):
        """TFLite SAME/VALID for ONNX explicit pads, or None if neither matches."""
        pt, pl, pb, pr = a["pads"]
        if not any(a["pads"]):
            return self.tfl.Padding.VALID
        dil = a.get("dilations", (1, 1))
        for i, (p0, p1) in enumerate(((pt, pb), (pl, pr))):
            o = math.ceil(hw[i] / a["strides"][i])
            total = max((o - 1) * a["strides"][i] + dil[i] * (k[i] - 1) + 1 - hw[i], 0)
            if o != out_hw[i] or (p0, p1) != (total // 2, total - total // 2):
                return None
        return self.tfl.Padding.SAME

    # op kind -> the method that maps it to TFLite operators
    MAPPERS = {"fc": "_fc", "fc16": "_fc", "conv": "_conv", "add": "_add", "tanh16": "_tanh16", "lut": "_lut",
               "maxpool": "_pool", "avgpool": "_pool", "reshape": "_reshape", "argmax": "_argmax",
               "softmax": "_softmax"}

    def build(self) -> bytes:
        """Map every op of the graph to TFLite operators, then serialize the model."""
        g = self.g
        for i, op in enumerate(g.ops):
            if op.kind not in self.MAPPERS:
                raise TargetError("no TFLM mapping for op %s" % op.kind)
            getattr(self, self.MAPPERS[op.kind])(i, op)
        sg = self.me.Subgraph(operators=self.ops, inputs=[self.t[g.input]], outputs=[self.t[g.output]])
        return bytes(self.me.Model(subgraphs=[sg], description="grpo-edge esp32 baseline").build())

    def _bias(self, i, op):
        """The int32 bias, quantized at input scale x weight scales (per channel)."""
        a = op.attrs
        s_in = self.g.tensors[op.inputs[0]].scale
        return self.const(a["bias"].astype(np.int32), "b%d" % i, self.tfl.TensorType.INT32,
                          (np.float32(s_in) * a["weight_scales"]).astype(np.float32), 0)

    def _fc(self, i, op):
        """FULLY_CONNECTED; fc16: int16 in/out via act(); the INT32 bias picks TFLM's int32 accumulator."""
        tfl, a = self.tfl, op.attrs
        wt = self.const(a["weights"], "w%d" % i, tfl.TensorType.INT8, a["weight_scales"], 0)
        bt = self._bias(i, op)
        self.op(tfl.BuiltinOperator.FULLY_CONNECTED, [self.act(op.inputs[0]), wt, bt], [self.act(op.output)],
                tfl.BuiltinOptions.FullyConnectedOptions, tfl.FullyConnectedOptionsT())

    def _conv(self, i, op):
        """CONV_2D or DEPTHWISE_CONV_2D (weights to TFLite layout), with an explicit PAD when needed."""
        tfl, B, I8, a = self.tfl, self.tfl.BuiltinOperator, self.tfl.TensorType.INT8, op.attrs
        x = op.inputs[0]
        w = a["weights"]
        OC, CG, KH, KW = w.shape
        C, H, W = self.g.tensors[x].shape[1:]
        pad = self.padding(a, (H, W), self.g.tensors[op.output].shape[2:], (KH, KW), op.name)
        xin = self.act(x)
        if pad is None:
            xin = self._pad(i, x, a["pads"])
            pad = tfl.Padding.VALID
        bt = self._bias(i, op)
        sh, sw = a["strides"]
        dh, dw = a["dilations"]
        if a["group"] == 1:
            wt = self.const(w.transpose(0, 2, 3, 1), "w%d" % i, I8, a["weight_scales"], 0)
            self.op(B.CONV_2D, [xin, wt, bt], [self.act(op.output)], tfl.BuiltinOptions.Conv2DOptions,
                    tfl.Conv2DOptionsT(padding=pad, strideW=sw, strideH=sh, dilationWFactor=dw, dilationHFactor=dh))
        elif a["group"] == C and CG == 1:
            wt = self.const(w.transpose(1, 2, 3, 0), "w%d" % i, I8, a["weight_scales"], 3)
            self.op(B.DEPTHWISE_CONV_2D, [xin, wt, bt], [self.act(op.output)],
                    tfl.BuiltinOptions.DepthwiseConv2DOptions,
                    tfl.DepthwiseConv2DOptionsT(padding=pad, strideW=sw, strideH=sh, depthMultiplier=OC // C,
                                                dilationWFactor=dw, dilationHFactor=dh))
        else:
            raise TargetError("TFLM has no grouped convolution (node %r, group %d)" % (op.name, a["group"]))

    def _add(self, i, op):
        """ADD; a constant operand becomes a full-shape int8 tensor in TFLite layout."""
        tfl, a, out = self.tfl, op.attrs, self.g.tensors[op.output]
        ins = []
        for t in op.inputs:
            if t in a["constants"]:
                full = np.broadcast_to(a["constants"][t], out.shape)
                full = full.transpose(0, 2, 3, 1) if full.ndim == 4 else full
                sc, zp = a["constant_quant"][t]
                tt = self.const(np.ascontiguousarray(full).astype(np.int8), t, tfl.TensorType.INT8)
                tt.quantization = self.me.Quantization(scales=[float(sc)], zero_points=[int(zp)])
                ins.append(tt)
            else:
                ins.append(self.act(t))
        self.op(tfl.BuiltinOperator.ADD, ins, [self.act(op.output)], tfl.BuiltinOptions.AddOptions, tfl.AddOptionsT())

    def _tanh16(self, i, op):
        """TANH, int16 in/out, zero point 0, output scale 2^-15 (checked by the parser)."""
        self.op(self.tfl.BuiltinOperator.TANH, [self.act(op.inputs[0])], [self.act(op.output)])

    def _argmax(self, i, op):
        """ARG_MAX over the last axis (int8 inputs only: TFLM has no int16 ARG_MAX)."""
        tfl, g, x = self.tfl, self.g, op.inputs[0]
        I32 = tfl.TensorType.INT32
        if g.tensors[x].dtype != "int8":
            raise TargetError("no TFLM baseline for this 16x8 model: %s (node %r)" % (REASON_ARGMAX16, op.name))
        axis = self.const(np.array([len(g.tensors[x].shape) - 1], np.int32), "axis%d" % i, I32)
        o = self.me.Tensor(shape=(1,), dtype=I32, name=op.output)
        self.t[op.output] = o
        self.op(tfl.BuiltinOperator.ARG_MAX, [self.act(x), axis], [o], tfl.BuiltinOptions.ArgMaxOptions,
                tfl.ArgMaxOptionsT(outputType=I32))

    def _softmax(self, i, op):
        """SOFTMAX; TFLite fixes its outputs at 1/256, -128, so another output scale needs a QUANTIZE after."""
        tfl, B, out = self.tfl, self.tfl.BuiltinOperator, self.g.tensors[op.output]
        y = self.act(op.output)
        if not op.attrs["tflite_output"]:
            y = self.act("softmax_fixed%d" % i, _nhwc(out.shape), 1.0 / 256, -128)
            self.notes.append("op %d (softmax): TFLM needs output scale 1/256 then a QUANTIZE to the model's "
                              "scale %g (two roundings); we requantize from 16 fractional bits once" % (i, out.scale))
        self.op(B.SOFTMAX, [self.act(op.inputs[0])], [y], tfl.BuiltinOptions.SoftmaxOptions,
                tfl.SoftmaxOptionsT(beta=1.0))
        if not op.attrs["tflite_output"]:
            self.op(B.QUANTIZE, [y], [self.act(op.output)])

    def _pad(self, i, x, pads):
        tfl = self.tfl
        pt, pl, pb, pr = pads
        info = self.g.tensors[x]
        _, H, W, C = _nhwc(info.shape)
        p = self.const(np.array([[0, 0], [pt, pb], [pl, pr], [0, 0]], np.int32), "pads%d" % i, tfl.TensorType.INT32)
        o = self.act("pad%d" % i, (1, H + pt + pb, W + pl + pr, C), info.scale, info.zero_point)
        self.op(tfl.BuiltinOperator.PAD, [self.act(x), p], [o])
        self.notes.append("op %d: explicit PAD inserted (ONNX pads are neither SAME nor VALID)" % i)
        return o

    def _lut(self, i, op):
        B = self.tfl.BuiltinOperator
        f = op.attrs["function"]
        x, y = self.act(op.inputs[0]), op.output
        if f in ("tanh", "sigmoid"):
            scale, zp = (1.0 / 128, 0) if f == "tanh" else (1.0 / 256, -128)
            mid = self.act("%s_fixed%d" % (f, i), _nhwc(self.g.tensors[y].shape), scale, zp)
            self.op(B.TANH if f == "tanh" else B.LOGISTIC, [x], [mid])
            self.op(B.QUANTIZE, [mid], [self.act(y)])
            self.notes.append("op %d (%s): %s" % (i, f, REASON_TANH))
        elif f == "relu":
            self.op(B.RELU, [x], [self.act(y)])
        elif f == "requantize":
            self.op(B.QUANTIZE, [x], [self.act(y)])
        else:
            raise TargetError("no TFLM mapping for elementwise %s (node %r)" % (f, op.name))

    def _pool(self, i, op):
        tfl, B, g, a = self.tfl, self.tfl.BuiltinOperator, self.g, op.attrs
        x, out = op.inputs[0], g.tensors[op.output]
        C, H, W = g.tensors[x].shape[1:]
        if op.kind == "avgpool" and a["mode"] == "mean":
            if tuple(a["kernel"]) != (H, W) or any(a["pads"]):
                raise TargetError("TFLM has no requantizing average pool (node %r)" % op.name)
            axis = self.const(np.array([1, 2], np.int32), "axis%d" % i, tfl.TensorType.INT32)
            keep = len(out.shape) == 4
            self.op(B.MEAN, [self.act(x), axis], [self.act(op.output, _nhwc(out.shape) if keep else out.shape)],
                    tfl.BuiltinOptions.ReducerOptions, tfl.ReducerOptionsT(keepDims=keep))
            return
        pad = self.padding(a, (H, W), out.shape[2:], a["kernel"], op.name)
        if pad is None:
            raise TargetError("TFLM pooling needs SAME or VALID padding (node %r)" % op.name)
        kh, kw = a["kernel"]
        self.op(B.MAX_POOL_2D if op.kind == "maxpool" else B.AVERAGE_POOL_2D, [self.act(x)], [self.act(op.output)],
                tfl.BuiltinOptions.Pool2DOptions,
                tfl.Pool2DOptionsT(padding=pad, strideW=a["strides"][1], strideH=a["strides"][0],
                                   filterWidth=kw, filterHeight=kh))

    def _reshape(self, i, op):
        tfl, B, g = self.tfl, self.tfl.BuiltinOperator, self.g
        src, out = g.tensors[op.inputs[0]], g.tensors[op.output]
        if len(out.shape) == 4 and tuple(out.shape) != tuple(src.shape):
            raise TargetError("no TFLM mapping for a reshape to 4-D (node %r)" % op.name)
        x = self.act(op.inputs[0])
        if len(src.shape) == 4 and src.shape[1] > 1 and src.shape[2] * src.shape[3] > 1 and len(out.shape) != 4:
            perm = self.const(np.array([0, 3, 1, 2], np.int32), "perm%d" % i, tfl.TensorType.INT32)
            t = self.act("nchw%d" % i, tuple(src.shape), src.scale, src.zero_point)
            self.op(B.TRANSPOSE, [x, perm], [t])
            x = t
        shape = self.const(np.array(_nhwc(out.shape), np.int32), "shape%d" % i, tfl.TensorType.INT32)
        self.op(B.RESHAPE, [x, shape], [self.act(op.output)], tfl.BuiltinOptions.ReshapeOptions,
                tfl.ReshapeOptionsT(newShape=list(_nhwc(out.shape))))


def to_tflite(graph):
    """IR -> (.tflite bytes, notes). Raises TargetError when TFLM cannot express an op."""
    b = _Builder(graph)
    return b.build(), b.notes


def to_tflm_input(graph, x_int8):
    """(B, ONNX layout) -> (B, TFLite layout), in the model input's type (int8, or int16 for 16x8:
    TFLM's set_input wants the exact dtype; int8 values widen losslessly)."""
    x, dt = np.asarray(x_int8), graph.tensors[graph.input].np_dtype
    if x.dtype != dt and np.can_cast(x.dtype, dt):
        x = x.astype(dt)
    return x.transpose(0, 2, 3, 1) if x.ndim == 4 else x


RUNNER = Path(__file__).resolve().parent / "tflm_run.py"      # the one TFLM runner (a script: own process)


def _runner(work):
    return RUNNER


def _try_arena(model_path, runner, arena) -> (bool, str):
    r = subprocess.run([sys.executable, str(runner), str(model_path), str(arena)], capture_output=True, text=True,
                       timeout=120)
    return r.returncode == 0, r.stderr


def find_arena(model_path, work, hi: int = 1 << 20, step: int = 16) -> dict:
    """Smallest arena (to `step` bytes) TFLM runs in, by bisection in subprocesses (a too-small arena
    can crash the interpreter). Also returns TFLM's own 'Arena allocation total' report."""
    import re
    runner = _runner(work)
    ok, err = _try_arena(model_path, runner, hi)
    if not ok:
        raise TargetError("TFLM cannot run the model even with a %d-byte arena: %s"
                          % (hi, (err.strip().splitlines() or ["?"])[-1]))
    m = re.search(r"Arena allocation total (\d+) bytes", err)
    reported = int(m.group(1)) if m else None
    lo, tries = 0, 1
    if reported:                      # bracket just above TFLM's own report: few runs needed
        lo, probe = 0, reported
        while probe < hi:
            ok2, _ = _try_arena(model_path, runner, probe)
            tries += 1
            if ok2:
                hi = probe
                break
            lo, probe = probe, probe + max(reported // 4, 256)
    while hi - lo > step:
        mid = (lo + hi) // 2
        ok, _ = _try_arena(model_path, runner, mid)
        tries += 1
        if ok:
            hi = mid
        else:
            lo = mid
    return {"arena_bytes": hi, "reported_total": reported, "subprocess_runs": tries}


def run(model_path, x_tflm, work, arena) -> np.ndarray:
    runner = _runner(work)
    xin, yout = Path(work) / "tflm_in.npy", Path(work) / "tflm_out.npy"
    np.save(xin, x_tflm)
    r = subprocess.run([sys.executable, str(runner), str(model_path), str(arena), str(xin), "--out", str(yout)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise TargetError("TFLM run failed: %s" % ((r.stderr.strip().splitlines() or ["?"])[-1]))
    return np.load(yout)


def callgrind_instructions(cmd, function_glob, n_calls, stdin_path=None) -> float:
    """Instructions executed inside function_glob (inclusive), per call, under valgrind callgrind."""
    if shutil.which("valgrind") is None:
        raise TargetError("valgrind not found (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="cg_") as d:
        out = Path(d) / "callgrind.out"
        full = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s" % out,
                "--toggle-collect=%s" % function_glob] + list(cmd)
        if stdin_path is not None:
            with open(stdin_path, "rb") as fin:
                r = subprocess.run(full, stdin=fin, capture_output=True, timeout=900)
        else:
            r = subprocess.run(full, capture_output=True, timeout=900)
        if r.returncode != 0 or not out.exists():
            raise TargetError("callgrind failed: %s" % ((r.stderr.decode(errors="replace").strip().splitlines()
                                                         or ["?"])[-1]))
        total = None
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
        if total is None:
            raise TargetError("callgrind wrote no totals")
        return total / float(n_calls)


def tflm_callgrind(model_path, x_tflm, work, arena, n_calls) -> float:
    runner = _runner(work)
    xin, yout = Path(work) / "cg_in.npy", Path(work) / "cg_out.npy"
    np.save(xin, x_tflm[:n_calls])
    return callgrind_instructions([sys.executable, str(runner), str(model_path), str(arena), str(xin), "--out",
                                   str(yout)], "*MicroInterpreter::Invoke*", n_calls)


def tflm_env_note() -> str:
    try:
        from importlib.metadata import version
        return "tflite-micro %s (pip)" % version("tflite-micro")
    except Exception:  # noqa: BLE001
        return "tflite-micro (pip)"


def dumps(obj) -> str:
    return json.dumps(obj, indent=1, default=str)


__all__ = ["available", "to_tflite", "to_tflm_input", "find_arena", "run", "tflm_callgrind",
           "callgrind_instructions", "TFLM_RUNTIME_FLASH"]
