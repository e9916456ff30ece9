"""Host simulation: compile the generated C with gcc, run it on test vectors, compare with the
NumPy reference (bit for bit) and with onnxruntime's QDQ run (within 1 LSB per op).

onnxruntime is run with graph optimizations DISABLED: its fused int8 kernels lose accuracy on CPUs
without VNNI, and unfused QDQ is the model's own definition.
"""
import subprocess
import tempfile
from pathlib import Path
from typing import List, Sequence

import numpy as np

from grpo_edge.errors import TargetError

from . import reference as R
from .cc import CFLAGS, SANITIZE, gcc  # noqa: F401  (simulate.gcc / CFLAGS: the deploy report and the tests use them)

OPT_LEVELS = {"O2": ["-O2"], "O0-novec": ["-O0", "-fno-tree-vectorize"],
              "O1-sanitize": ["-O1"] + SANITIZE}     # AddressSanitizer + UBSan: any out-of-bounds read or UB aborts


def harness_c(models: Sequence) -> str:
    """A host main(): for each model in order read int32 n, then n inputs; write n outputs to stdout."""
    inc = "".join('#include "%s_model.h"\n' % g.prefix for g in models)
    body = []
    for g in models:
        P_ = g.prefix.upper()
        body.append(
            "    if (fread(&n, sizeof n, 1, stdin) != 1) return 2;\n"
            "    for (i = 0; i < n; ++i) {\n"
            "        static %(p)s_input_t x[%(P)s_INPUT_SIZE];\n"
            "        static %(p)s_output_t y[%(P)s_OUTPUT_SIZE];\n"
            "        if (fread(x, 1, sizeof x, stdin) != sizeof x) return 3;\n"
            "        %(p)s_invoke(x, y);\n"
            "        if (fwrite(y, 1, sizeof y, stdout) != sizeof y) return 4;\n"
            "    }\n" % {"P": P_, "p": g.prefix})
    return ("#include <stdio.h>\n#include <stdint.h>\n%s\nint main(void)\n{\n    int32_t n, i;\n%s    return 0;\n}\n"
            % (inc, "".join(body)))


def build_host(models: Sequence, workdir, opt="O2", extra=()) -> Path:
    """Write sources for `models` (codegen.Generated) + harness into workdir, compile, return the binary."""
    from .codegen import write
    work = Path(workdir)
    srcs = []
    for g in models:
        srcs.append(str(write(g, work)["source"]))
    (work / "harness.c").write_text(harness_c(models))
    exe = work / ("sim_" + opt)
    cmd = [gcc()] + CFLAGS + OPT_LEVELS[opt] + list(extra) + ["-I", str(work), "-o", str(exe),
                                                              str(work / "harness.c")] + srcs
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise TargetError("gcc failed on the generated C (%s): %s" % (opt, (r.stderr.strip().splitlines() or ["?"])[0]))
    return exe


def run_host(exe, models: Sequence, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Run a harness binary; inputs[j] is (B, ...) of models[j]'s input type (int8 or int16).
    Returns outputs (B, out_size) of each model's output type."""
    blob = b""
    for g, x in zip(models, inputs):
        x = np.ascontiguousarray(x, dtype=g.input_dtype).reshape(len(x), -1)
        blob += np.int32(len(x)).tobytes() + x.tobytes()
    r = subprocess.run([str(exe)], input=blob, capture_output=True, timeout=300)
    if r.returncode != 0:
        raise TargetError("simulated model exited with code %d" % r.returncode)
    outs, pos = [], 0
    for g, x in zip(models, inputs):
        n = len(x) * _out_size(g) * np.dtype(g.output_dtype).itemsize
        outs.append(np.frombuffer(r.stdout[pos:pos + n], dtype=g.output_dtype).reshape(len(x), -1))
        pos += n
    return outs


def _out_size(gen) -> int:
    import re
    m = re.search(r"_OUTPUT_SIZE (\d+)", gen.header)
    return int(m.group(1))


def host_check(graph, gen, x_q: np.ndarray, opts=("O2", "O0-novec")) -> dict:
    """Compile at each optimisation level, run on x_q (B, ...) of the graph's input type (int8, or
    int16 for a 16x8 graph), compare with the reference."""
    ref = R.run(graph, x_q).reshape(len(x_q), -1)
    result = {"n_inputs": int(len(x_q)), "builds": {}}
    with tempfile.TemporaryDirectory(prefix="esp32sim_") as d:
        for opt in opts:
            exe = build_host([gen], d, opt)
            y = run_host(exe, [gen], [x_q])[0]
            diff = int(np.abs(y.astype(np.int64) - ref).max()) if y.size else 0
            result["builds"][opt] = {"bit_exact": bool(np.array_equal(y, ref)), "max_lsb": diff,
                                     "mismatches": int((y != ref).sum())}
    result["bit_exact"] = all(b["bit_exact"] for b in result["builds"].values())
    return result


# ----------------------------------------------------------------------------- onnxruntime

def ort_session(onnx_path_or_bytes, extra_outputs=()):
    import onnx
    import onnxruntime as ort
    m = onnx.load(str(onnx_path_or_bytes)) if not isinstance(onnx_path_or_bytes, bytes) else onnx.load_from_string(onnx_path_or_bytes)
    have = {o.name for o in m.graph.output}
    for n in extra_outputs:
        if n not in have:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))   # int8 or int16: ORT infers
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


ORT_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


def feed(sess, x) -> dict:
    """{input name: x} in the session's input type (token ids stay integers; anything else float32)."""
    i = sess.get_inputs()[0]
    return {i.name: np.asarray(x, dtype=ORT_TYPES.get(i.type, np.float32))}


def _per_op_vs_ort(graph, vals, B) -> list:
    """Each op's reference fed with ORT's own inputs vs ORT's output. A tensor the ONNX model lacks (a 4-D
    view "<name>/4d" of a rank-3 tensor: parse.as_4d, add_op's onnx_shape) is computed here from ORT's
    values; an op writing one is compared at <name>, and the views themselves get no row."""
    from .ops import OPS
    from .parse import VIEW
    ort = set(vals)
    per_op = []
    for op in graph.ops:
        args = [vals[n] if n in vals else op.attrs["constants"][n] for n in op.inputs]
        y = OPS[op.kind].reference(*args, op.attrs)
        target = op.output
        if op.output not in ort:
            target = op.output[:-len(VIEW)] if op.output.endswith(VIEW) else None
            # the next op reads ORT's values through the view, not ours
            src = vals[target] if target in ort else y
            vals[op.output] = src.reshape((B,) + tuple(graph.tensors[op.output].shape[1:]))
        if target not in ort or (op.kind == "reshape" and not ({op.output} | set(op.inputs)) <= ort):
            continue
        d = np.abs(y.reshape(vals[target].shape).astype(np.int64) - vals[target].astype(np.int64))
        per_op.append({"op": op.kind, "node": op.name, "max_lsb": int(d.max()), "frac_diff": float((d > 0).mean()),
                       "bound_lsb": OPS[op.kind].bound_lsb(op, graph.tensors)})
    return per_op


def ort_check(graph, onnx_path, x_float: np.ndarray) -> dict:
    """Per op: our reference fed with ORT's own int8 inputs vs ORT's int8 output (max LSB).
    End to end: reference on the quantized input vs ORT's quantized output."""
    import onnx
    m = onnx.load(str(onnx_path))
    in_model = {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input}
    names = [t for t in graph.tensors if t in in_model and not any(t in op.attrs.get("constants", {})
                                                                   for op in graph.ops)]
    sess = ort_session(onnx_path, names)
    B = len(x_float)
    runs = [sess.run(names, feed(sess, x_float[i:i + 1])) for i in range(B)]
    vals = {n: np.concatenate([r[j] for r in runs]) for j, n in enumerate(names)}
    per_op = _per_op_vs_ort(graph, vals, B)
    tin = graph.tensors[graph.input]
    ref = R.run(graph, vals[graph.input].astype(tin.np_dtype))
    ort_out = vals[graph.output]
    d = np.abs(ref.astype(np.int64) - ort_out.reshape(ref.shape).astype(np.int64))
    out = {"per_op": per_op, "per_op_max_lsb": max(p["max_lsb"] for p in per_op),
           "ops_over_bound": sum(p["max_lsb"] > p["bound_lsb"] for p in per_op),
           "end_to_end_max_lsb": int(d.max()), "end_to_end_frac_diff": float((d > 0).mean()),
           "input_quantization_matches": bool(np.array_equal(vals[graph.input], R.input_codes(tin, x_float)))}
    if ref.shape[-1] > 1 and graph.ops[-1].kind != "argmax":
        out["decision_agreement"] = float((ref.reshape(B, -1).argmax(1) == ort_out.reshape(B, -1).argmax(1)).mean())
    return out


def host_callgrind(gen, x_q: np.ndarray, n_calls: int = 20) -> float:
    """Host (x86-64, gcc -O2) instructions per <prefix>_invoke, inclusive, under valgrind callgrind;
    x_q of the model's input type."""
    from .callgrind import instructions
    x = np.ascontiguousarray(x_q[:n_calls], dtype=gen.input_dtype).reshape(min(n_calls, len(x_q)), -1)
    with tempfile.TemporaryDirectory(prefix="esp32cg_") as d:
        exe = build_host([gen], d, "O2", extra=["-g"])
        inp = Path(d) / "in.bin"
        inp.write_bytes(np.int32(len(x)).tobytes() + x.tobytes())
        return instructions([str(exe)], "%s_invoke" % gen.prefix, len(x), stdin_path=inp)
