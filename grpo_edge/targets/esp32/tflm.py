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
import subprocess
import sys
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError

from . import callgrind as CG

INVOKE = "tflite::micro::MicroInterpreter::Invoke()"
INVOKE_GLOB = "*MicroInterpreter::Invoke*"
KERNEL_SIGNATURE = "(tflite::micro::TfLiteContext*, tflite::micro::TfLiteNode*)"   # every op kernel's Eval
TFLM_RUNTIME_FLASH = (10_000, 20_000)    # bytes: TFLM framework code, public figure (TFLM's documented core size)
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


def nhwc(shape):
    return (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else tuple(shape)


class _Builder:
    def __init__(self, graph):
        from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
        self.me, self.tfl, self.g = me, tfl, graph
        self.t = {}
        self.ops = []
        self.owners = []          # owners[k]: the index of the graph op that TFLite operator k computes
        self.current = None
        self.notes = []

    def act(self, name, shape=None, scale=None, zp=None, dtype=None):
        if name in self.t and shape is None:
            return self.t[name]
        info = self.g.tensors.get(name)
        shape = nhwc(info.shape) if shape is None else shape
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
        self.owners.append(self.current)

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

    def build(self) -> bytes:
        """Map every op of the graph to TFLite operators, then serialize the model."""
        from .ops import OPS
        g = self.g
        for i, op in enumerate(g.ops):
            if op.kind not in OPS:
                raise TargetError("no TFLM mapping for op %s" % op.kind)
            self.current = i
            OPS[op.kind].tflm(self, i, op)
        sg = self.me.Subgraph(operators=self.ops, inputs=[self.t[g.input]], outputs=[self.t[g.output]])
        return bytes(self.me.Model(subgraphs=[sg], description="grpo-edge esp32 baseline").build())

    def bias(self, i, op):
        """The int32 bias, quantized at input scale x weight scales (per channel)."""
        a = op.attrs
        s_in = self.g.tensors[op.inputs[0]].scale
        return self.const(a["bias"].astype(np.int32), "b%d" % i, self.tfl.TensorType.INT32,
                          (np.float32(s_in) * a["weight_scales"]).astype(np.float32), 0)

    def explicit_pad(self, i, x, pads):
        tfl = self.tfl
        pt, pl, pb, pr = pads
        info = self.g.tensors[x]
        _, H, W, C = nhwc(info.shape)
        p = self.const(np.array([[0, 0], [pt, pb], [pl, pr], [0, 0]], np.int32), "pads%d" % i, tfl.TensorType.INT32)
        o = self.act("pad%d" % i, (1, H + pt + pb, W + pl + pr, C), info.scale, info.zero_point)
        self.op(tfl.BuiltinOperator.PAD, [self.act(x), p], [o])
        self.notes.append("op %d: explicit PAD inserted (ONNX pads are neither SAME nor VALID)" % i)
        return o

def to_tflite(graph):
    """IR -> (.tflite bytes, notes). Raises TargetError when TFLM cannot express an op."""
    buf, notes, _ = to_tflite_owned(graph)
    return buf, notes


def to_tflite_owned(graph):
    """IR -> (.tflite bytes, notes, owners): owners[k] is the graph op that TFLite operator k belongs to."""
    b = _Builder(graph)
    return b.build(), b.notes, b.owners


def to_tflm_input(graph, x_int8):
    """(B, ONNX layout) -> (B, TFLite layout), in the model input's type (int8, or int16 for 16x8:
    TFLM's set_input wants the exact dtype; int8 values widen losslessly)."""
    x, dt = np.asarray(x_int8), graph.tensors[graph.input].np_dtype
    if x.dtype != dt and np.can_cast(x.dtype, dt):
        x = x.astype(dt)
    if graph.io_layout == "tflite":         # a graph read from a .tflite takes TFLite's layout already
        if graph.float_edges[0]:            # a float32 input: the values whose QUANTIZE gives these codes
            t = graph.tensors[graph.input]
            return ((x.astype(np.float32) - np.float32(t.zero_point)) * np.float32(t.scale)).astype(np.float32)
        return x
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


def tflm_callgrind(model_path, x_tflm, work, arena, n_calls) -> float:
    runner = _runner(work)
    xin, yout = Path(work) / "cg_in.npy", Path(work) / "cg_out.npy"
    np.save(xin, x_tflm[:n_calls])
    return CG.instructions([sys.executable, str(runner), str(model_path), str(arena), str(xin), "--out", str(yout)],
                           INVOKE_GLOB, n_calls)


def tflm_per_op(model_path, x_tflm, work, arena, n_calls, owners) -> dict:
    """Host (x86-64) instructions of TFLM's Invoke, op by op, under callgrind: {"per_op": {graph op index:
    mean instructions of its TFLite operators}, "entry": ..., "total": ...} (means over n_calls inputs).

    A first run finds the kernels that MicroInterpreterGraph::InvokeSubgraph calls (their Eval functions); a
    second one splits Invoke at the entry of each (callgrind.segments). Operator k's count runs from its
    kernel's entry to the next one's; the last operator's includes Invoke's return.
    """
    runner, xin, yout = _runner(work), Path(work) / "cgop_in.npy", Path(work) / "cgop_out.npy"
    n = min(n_calls, len(x_tflm))
    np.save(xin, x_tflm[:n])
    cmd = [sys.executable, str(runner), str(model_path), str(arena), str(xin), "--out", str(yout)]
    kernels = [f for f in CG.callees(CG.profile_text(cmd, INVOKE_GLOB), "*InvokeSubgraph*")
               if f.endswith(KERNEL_SIGNATURE)]
    segs = CG.segments(cmd, INVOKE_GLOB, [INVOKE] + kernels)
    T = len(owners)
    if len(segs) != n * (T + 1) + 1 or any(segs[c * (T + 1)][0] != INVOKE for c in range(n)):
        raise TargetError("TFLM's callgrind segments do not match its %d operators x %d calls" % (T, n))
    per_op, entry = {}, 0
    for c in range(n):
        base = c * (T + 1)
        entry += segs[base + 1][1]
        for k in range(T):                 # operator k ends where the next kernel (or the next Invoke) starts
            per_op[owners[k]] = per_op.get(owners[k], 0) + segs[base + k + 2][1]
    per_op = dict((i, v / float(n)) for i, v in per_op.items())
    return {"per_op": per_op, "entry": entry / float(n), "total": sum(per_op.values()) + entry / float(n),
            "calls": n}


def tflm_env_note() -> str:
    try:
        from importlib.metadata import version
        return "tflite-micro %s (pip)" % version("tflite-micro")
    except Exception:  # noqa: BLE001
        return "tflite-micro (pip)"


def dumps(obj) -> str:
    return json.dumps(obj, indent=1, default=str)


__all__ = ["available", "to_tflite", "to_tflm_input", "find_arena", "run", "tflm_callgrind", "tflm_per_op",
           "TFLM_RUNTIME_FLASH"]
