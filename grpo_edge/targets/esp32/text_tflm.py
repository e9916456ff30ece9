"""TFLite Micro baseline for the text path: what TFLM (pip tflite-micro) can run of a decode step, measured.

1. Op support, measured: each op a decode step needs is written as a one-op .tflite (16x8 / int16) with
   tflite-micro's model_editor and run in TFLM's interpreter in a subprocess: runs, or the error.
2. Bit-exactness of the ops TFLM has: FULLY_CONNECTED 16x8 (the model's own layer-0 q projection) and
   SOFTMAX int16 (the TFLite tables) in TFLM vs text_ref on the same parameters and inputs.
3. Cost of the expressible part of one decode step (every FULLY_CONNECTED 16x8 of the step, one
   SOFTMAX int16 per head over the full context, the residual ADDs) as a TFLM graph vs the same calls to
   gx_text_kernels.h, host instructions under valgrind callgrind (MicroInterpreter::Invoke vs our
   function), and TFLM's arena vs ours.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError

from . import callgrind as CG
from . import tflm as TF

OPS = ("FULLY_CONNECTED", "SOFTMAX", "ADD", "GATHER", "BATCH_MATMUL", "GELU", "RSQRT", "MEAN", "SQUARED_DIFFERENCE",
       "ARG_MAX")


def available() -> bool:
    return TF.available()


def _me():
    from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
    return me, tfl


def _t16(me, tfl, shape, scale, name):
    return me.Tensor(shape=tuple(shape), dtype=tfl.TensorType.INT16, name=name,
                     quantization=me.Quantization(scales=[float(scale)], zero_points=[0]))


def _fc(me, tfl, x, p, s_in, s_out, name, ops):
    """Append FULLY_CONNECTED 16x8 (int8 per-channel weights, int32 bias) to ops; returns the output tensor."""
    I8, I32 = tfl.TensorType.INT8, tfl.TensorType.INT32
    sw = np.asarray(p["s_w"], np.float32)
    w = me.Tensor(shape=p["w"].shape, dtype=I8, data=np.ascontiguousarray(p["w"]), name=name + "_w",
                  quantization=me.Quantization(scales=[float(s) for s in sw], zero_points=[0] * len(sw), axis=0))
    b = me.Tensor(shape=(p["w"].shape[0],), dtype=I32, data=np.ascontiguousarray(p["b"].astype(np.int32)),
                  name=name + "_b", quantization=me.Quantization(scales=[float(np.float32(s_in) * s) for s in sw],
                                                                 zero_points=[0] * len(sw), axis=0))
    y = _t16(me, tfl, (1, p["w"].shape[0]), s_out, name + "_y")
    o = me.Operator(opcode=tfl.BuiltinOperator.FULLY_CONNECTED, inputs=[x, w, b], outputs=[y])
    o._fb.builtinOptionsType = tfl.BuiltinOptions.FullyConnectedOptions
    o._fb.builtinOptions = tfl.FullyConnectedOptionsT()
    ops.append(o)
    return y


def _softmax(me, tfl, x, shape, name, ops):
    y = _t16(me, tfl, shape, 1.0 / 32768, name)
    o = me.Operator(opcode=tfl.BuiltinOperator.SOFTMAX, inputs=[x], outputs=[y])
    o._fb.builtinOptionsType = tfl.BuiltinOptions.SoftmaxOptions
    o._fb.builtinOptions = tfl.SoftmaxOptionsT(beta=1.0)
    ops.append(o)
    return y


def _model(me, inputs, outputs, ops) -> bytes:
    sg = me.Subgraph(operators=ops, inputs=inputs, outputs=outputs)
    return bytes(me.Model(subgraphs=[sg], description="grpo-edge esp32 text baseline").build())


def _single_op(code, n=8):
    """A one-op int16 model of `code` (shapes of a decode step's use of it)."""
    me, tfl = _me()
    B, I16, I32 = tfl.BuiltinOperator, tfl.TensorType.INT16, tfl.TensorType.INT32
    x = _t16(me, tfl, (1, n), 0.01, "x")
    ops = []
    if code == "FULLY_CONNECTED":
        p = {"w": np.ones((n, n), np.int8), "b": np.zeros(n, np.int32), "s_w": np.full(n, 0.01, np.float32)}
        return _model(me, [x], [_fc(me, tfl, x, p, 0.01, 0.01, "fc", ops)], ops)
    if code == "SOFTMAX":
        return _model(me, [x], [_softmax(me, tfl, x, (1, n), "p", ops)], ops)
    y = _t16(me, tfl, (1, n), 0.01, "y")
    if code in ("ADD", "SQUARED_DIFFERENCE"):
        x2 = _t16(me, tfl, (1, n), 0.01, "x2")
        ops.append(me.Operator(opcode=getattr(B, code), inputs=[x, x2], outputs=[y]))
        return _model(me, [x, x2], [y], ops)
    if code in ("GELU", "RSQRT"):
        ops.append(me.Operator(opcode=getattr(B, code), inputs=[x], outputs=[y]))
        return _model(me, [x], [y], ops)
    if code == "GATHER":
        table = me.Tensor(shape=(4, n), dtype=I16, data=np.ones((4, n), np.int16), name="table",
                          quantization=me.Quantization(scales=[0.01], zero_points=[0]))
        idx = me.Tensor(shape=(1,), dtype=I32, name="idx")
        ops.append(me.Operator(opcode=B.GATHER, inputs=[table, idx], outputs=[y]))
        return _model(me, [idx], [y], ops)
    if code == "BATCH_MATMUL":
        a = _t16(me, tfl, (1, 1, n), 0.01, "a")
        bm = _t16(me, tfl, (1, n, 4), 0.01, "b")
        o = _t16(me, tfl, (1, 1, 4), 0.01, "o")
        ops.append(me.Operator(opcode=B.BATCH_MATMUL, inputs=[a, bm], outputs=[o]))
        return _model(me, [a, bm], [o], ops)
    if code == "MEAN":
        axis = me.Tensor(shape=(1,), dtype=I32, data=np.array([1], np.int32), name="axis")
        o = _t16(me, tfl, (1, 1), 0.01, "m")
        op = me.Operator(opcode=B.MEAN, inputs=[x, axis], outputs=[o])
        op._fb.builtinOptionsType = tfl.BuiltinOptions.ReducerOptions
        op._fb.builtinOptions = tfl.ReducerOptionsT(keepDims=True)
        ops.append(op)
        return _model(me, [x], [o], ops)
    if code == "ARG_MAX":
        axis = me.Tensor(shape=(1,), dtype=I32, data=np.array([1], np.int32), name="axis")
        o = me.Tensor(shape=(1,), dtype=I32, name="am")
        op = me.Operator(opcode=B.ARG_MAX, inputs=[x, axis], outputs=[o])
        op._fb.builtinOptionsType = tfl.BuiltinOptions.ArgMaxOptions
        op._fb.builtinOptions = tfl.ArgMaxOptionsT(outputType=I32)
        ops.append(op)
        return _model(me, [x], [o], ops)
    raise TargetError("no probe for op %s" % code)


def op_support(work) -> dict:
    """{op: "runs" | "fails: <TFLM's message>"} for int16 (16x8) versions of the ops a decode step needs."""
    work = Path(work)
    res = {}
    n_in = {"ADD": 2, "SQUARED_DIFFERENCE": 2, "BATCH_MATMUL": 2}
    for code in OPS:
        path = work / ("op_%s.tflite" % code.lower())
        path.write_bytes(_single_op(code))
        r = subprocess.run([sys.executable, str(TF.RUNNER), str(path), str(1 << 16), "--zeros",
                            str(n_in.get(code, 1))], capture_output=True, text=True, timeout=120)
        if r.returncode == 0 and "OK" in r.stdout:
            res[code] = "runs"
        else:
            lines = [x for x in (r.stderr + r.stdout).strip().splitlines() if x.strip()]
            msg = next((x for x in lines if "not supported" in x.lower() or "type" in x.lower()), lines[-1] if lines
                       else "exit %d" % r.returncode)
            res[code] = "fails: %s" % msg.strip()[:200]
    return res


def _run(model: bytes, x, work, name, arena=1 << 18):
    work = Path(work)
    mp, xp, yp = work / (name + ".tflite"), work / (name + "_x.npy"), work / (name + "_y.npy")
    mp.write_bytes(model)
    np.save(xp, x)
    r = subprocess.run([sys.executable, str(TF.RUNNER), str(mp), str(arena), str(xp), "--out", str(yp)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise TargetError("TFLM run of %s failed: %s" % (name, (r.stderr.strip().splitlines() or ["?"])[-1]))
    return np.load(yp)


def bit_exact_checks(q, work, n=64, seed=0) -> dict:
    """TFLM's FULLY_CONNECTED 16x8 and SOFTMAX int16 vs text_ref on the model's own parameters."""
    from . import text_ref as T
    me, tfl = _me()
    rng = np.random.default_rng(seed)
    L0 = q["p"]["layers"][0]
    s_ln1, s_q = q["scales"]["0.ln1"], q["scales"]["0.q"]
    x = _t16(me, tfl, (1, L0["q"]["w"].shape[1]), s_ln1, "h")
    ops = []
    m = _model(me, [x], [_fc(me, tfl, x, L0["q"], s_ln1, s_q, "q", ops)], ops)
    xs = rng.integers(-32768, 32768, size=(n, L0["q"]["w"].shape[1])).astype(np.int16)
    y_tflm = _run(m, xs, work, "fc16")
    y_ref = T.fc16(xs, L0["q"])
    out = {"fully_connected_16x8": {"n_inputs": n, "max_lsb": int(np.abs(y_tflm.astype(np.int64) - y_ref).max())}}
    ctx = q["cfg"]["ctx"]
    s_sc = q["scales"]["0.sc"]
    xin = _t16(me, tfl, (1, ctx), s_sc, "s")
    ops = []
    m = _model(me, [xin], [_softmax(me, tfl, xin, (1, ctx), "p", ops)], ops)
    ss = rng.integers(-20000, 20000, size=(n, ctx)).astype(np.int16)
    p_tflm = _run(m, ss, work, "softmax16")
    p_ref = T.softmax16(ss, L0["att"]["sm_m"], L0["att"]["sm_s"], q["const"]["exp_lut"], q["const"]["recip_lut"])
    out["softmax_int16"] = {"n_inputs": n, "max_lsb": int(np.abs(p_tflm.astype(np.int64) - p_ref).max())}
    for v in out.values():
        v["bit_exact"] = v["max_lsb"] == 0
    return out


def chain_model(q) -> bytes:
    """The expressible part of one decode step: per layer q, k, v FCs, a SOFTMAX per head over the whole
    context, proj, ADD, fc, out, ADD; then the head FC. Tensors are chained for cost, not for meaning."""
    me, tfl = _me()
    c, S = q["cfg"], q["scales"]
    D, H, T = c["d"], c["n_head"], c["ctx"]
    ops = []
    h = _t16(me, tfl, (1, D), S["0.ln1"], "h_in")
    sc = _t16(me, tfl, (H, T), S["0.sc"], "scores_in")
    x = h
    for i, L in enumerate(q["p"]["layers"]):
        pre = str(i)
        _fc(me, tfl, x, L["q"], S[pre + ".ln1"], S[pre + ".q"], "q%d" % i, ops)
        _fc(me, tfl, x, L["k"], S[pre + ".ln1"], S[pre + ".k"], "k%d" % i, ops)
        v = _fc(me, tfl, x, L["v"], S[pre + ".ln1"], S[pre + ".v"], "v%d" % i, ops)
        _softmax(me, tfl, sc, (H, T), "p%d" % i, ops)          # one row of T per head
        a = _fc(me, tfl, v, L["proj"], S[pre + ".y"], S["x"], "proj%d" % i, ops)
        r = _t16(me, tfl, (1, D), S["x"], "r%d" % i)
        ops.append(me.Operator(opcode=tfl.BuiltinOperator.ADD, inputs=[x, a], outputs=[r]))
        f = _fc(me, tfl, r, L["fc"], S[pre + ".ln2"], S[pre + ".f"], "fc%d" % i, ops)
        o = _fc(me, tfl, f, L["out"], S[pre + ".g"], S["x"], "out%d" % i, ops)
        x = _t16(me, tfl, (1, D), S["x"], "x%d" % i)
        ops.append(me.Operator(opcode=tfl.BuiltinOperator.ADD, inputs=[r, o], outputs=[x]))
    lo = _fc(me, tfl, x, q["p"]["head"], S["lnf"], S["lo"], "head", ops)
    return _model(me, [h, sc], [lo], ops)


def chain_c(q) -> str:
    """The same calls with gx_text_kernels.h (our FC, softmax over H rows of T, saturating ADD)."""
    from .textgen_c import COMMON_TYPES, fc_data, fc_ref
    c = q["cfg"]
    D, H, T, F, V = c["d"], c["n_head"], c["ctx"], c["ff"], c["vocab"]
    src = ["#include <stdint.h>\n#include <stdio.h>\n#include \"gx_text_kernels.h\"\n", COMMON_TYPES]
    src.append("#include \"tables.h\"\n")
    body = []
    for i, L in enumerate(q["p"]["layers"]):
        for a in ("q", "k", "v", "proj", "fc", "out"):
            src.append(fc_data("l%d_%s" % (i, a), L[a]))
            src.append("static const gxt_fc_t l%d_%s_fc = %s;\n" % (i, a, fc_ref("l%d_%s" % (i, a), L[a])))
        at = L["att"]
        body.append("    fc(&l%(i)d_q_fc, x, q); fc(&l%(i)d_k_fc, x, k); fc(&l%(i)d_v_fc, x, v);\n"
                    "    for (hh = 0; hh < %(H)d; ++hh) gxt_softmax16(sc + hh * %(T)d, %(T)d, %(m)d, %(s)d, exp_lut, recip_lut, p + hh * %(T)d);\n"
                    "    fc(&l%(i)d_proj_fc, v, a); gxt_add16(x, a, %(D)d);\n"
                    "    fc(&l%(i)d_fc_fc, x, f); fc(&l%(i)d_out_fc, f, a); gxt_add16(x, a, %(D)d);\n"
                    % {"i": i, "H": H, "T": T, "m": at["sm_m"], "s": at["sm_s"], "D": D})
    src.append(fc_data("head", q["p"]["head"]) + "static const gxt_fc_t head_fc = %s;\n" % fc_ref("head", q["p"]["head"]))
    src.append("static int16_t x[%d], q[%d], k[%d], v[%d], a[%d], f[%d], sc[%d], p[%d], lo[%d];\n"
               % (D, D, D, D, D, F, H * T, H * T, V))
    src.append("__attribute__((noinline)) void chain_step(void)\n{\n    int hh;\n%s    fc(&head_fc, x, lo);\n}\n\n"
               % "".join(body))
    src.append("int main(int argc, char **argv)\n{\n    int i, n = argc > 1 ? 20 : 20;\n    (void)argv;\n"
               "    for (i = 0; i < %d; ++i) sc[i] = (int16_t)(i * 37 %% 2000);\n"
               "    for (i = 0; i < n; ++i) chain_step();\n    printf(\"%%d\\n\", lo[0]);\n    return 0;\n}\n" % (H * T))
    return "".join(src)


def baseline(q, out_dir) -> dict:
    """Op support, bit-exactness of the shared ops, and the expressible step's cost in TFLM vs ours."""
    import shutil
    from .cc import TEXT_HEADERS, write_headers
    from .textgen_c import c_array
    from .cc import CFLAGS, gcc
    res = {"tflm": TF.tflm_env_note()}
    with tempfile.TemporaryDirectory(prefix="gxtflm_") as d:
        res["op_support_int16"] = op_support(d)
        res["bit_exact"] = bit_exact_checks(q, d)
        model = chain_model(q)
        (Path(out_dir) / "tflm_step_chain.tflite").write_bytes(model)
        mp = Path(d) / "chain.tflite"
        mp.write_bytes(model)
        ar = TF.find_arena(mp, d)
        res["chain"] = {"tflite_bytes": len(model), "tflm_arena_bytes": ar["arena_bytes"],
                        "what": "every FULLY_CONNECTED 16x8 of one decode step, one SOFTMAX int16 per layer over "
                                "(heads, context), the residual ADDs, the head FC"}
        if shutil.which("valgrind"):
            c = q["cfg"]
            H, T = c["n_head"], c["ctx"]
            x = np.zeros((20, c["d"]), np.int16)
            sc = (np.arange(H * T) * 37 % 2000).astype(np.int16)
            xin = [x, np.tile(sc.reshape(1, H, T), (20, 1, 1))]
            np.save(Path(d) / "h.npy", xin[0])
            np.save(Path(d) / "s.npy", xin[1])
            tflm_i = CG.instructions([sys.executable, str(TF.RUNNER), str(mp), str(ar["arena_bytes"]),
                                      str(Path(d) / "h.npy"), str(Path(d) / "s.npy")], TF.INVOKE_GLOB, 20)
            write_headers(d, TEXT_HEADERS)
            (Path(d) / "tables.h").write_text(c_array("int16_t", "exp_lut", q["const"]["exp_lut"])
                                              + c_array("int16_t", "recip_lut", q["const"]["recip_lut"]))
            (Path(d) / "chain.c").write_text(chain_c(q))
            exe = Path(d) / "chain"
            r = subprocess.run([gcc()] + CFLAGS + ["-O2", "-g", "-Wno-unused-function", "-I", d, "-o", str(exe),
                                                   str(Path(d) / "chain.c")], capture_output=True, text=True)
            if r.returncode != 0:
                raise TargetError("gcc failed on the TFLM comparison chain: %s" % r.stderr.strip().splitlines()[0])
            ours = CG.instructions([str(exe)], "chain_step", 20)
            res["chain"].update({"host_instructions_tflm": tflm_i, "host_instructions_ours": ours,
                                 "ratio_ours_over_tflm": ours / tflm_i,
                                 "how": "valgrind callgrind, x86-64 host, inclusive instructions per call of "
                                        "MicroInterpreter::Invoke (pip tflite-micro) vs chain_step (the same calls to "
                                        "gx_text_kernels.h, gcc -O2), mean of 20 calls"})
    cannot = [k for k, v in res["op_support_int16"].items() if v != "runs"]
    res["cannot_express"] = (
        "int16 ops that fail in this TFLM build: %s. Besides those, the decode step needs a KV cache written at a "
        "runtime position and attention over a growing length (TFLM graphs have static shapes), and a layer norm, "
        "which has no builtin: it could be composed of MEAN, SQUARED_DIFFERENCE, ADD, RSQRT and MUL (int16 runs "
        "in this build), rounding to int16 between each op, i.e. other arithmetic than our fused integer one." % (", ".join(cannot) or "none"))
    return res

