"""ESP32 kernels: rv32 instructions per MAC for each op, and the whole model vs TFLite Micro (issue 14, row 5).

    .venv/bin/python benchmarks/esp32_kernels.py --digits-default          # lite-resnet at its defaults (untrained, seed 0)
    .venv/bin/python benchmarks/esp32_kernels.py --cartpole-16x8           # the 4-64-64-2 tanh MLP, 16x8
    .venv/bin/python benchmarks/esp32_kernels.py --onnx model.int8.onnx    # any int8 / 16x8 QDQ ONNX
    add --json OUT.json to keep the numbers

One run measures everything on the SAME generated code:
- per op: rv32imc instructions (riscv64-unknown-elf-gcc -O2, counted exactly in the unicorn simulator;
  the generated invoke() is built with GX_MARK(i) defined as a call to an empty function in another
  file, and the simulator records the count at each mark), MACs, instructions per MAC;
- the whole model: host (x86-64) instructions per inference under valgrind callgrind, ours
  (<prefix>_invoke, gcc -O2) vs TFLM (MicroInterpreter::Invoke, pip tflite-micro), same parameters;
  arena bytes ours vs TFLM's smallest working arena; outputs bit-exact with the NumPy reference
  (host C and rv32) and with TFLM.
Instruction counts are exact and repeatable (no timing), so one run is enough; the mean is over
--n-inputs random inputs.
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

def digits_default(work):
    """LiteResNet() at its defaults (seed 0, untrained) -> ONNX -> int8 QDQ calibrated on 256 digits images."""
    import torch
    from grpo_edge.core.models import build_model
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.torch2onnx import torch2onnx
    torch.manual_seed(0)
    info = torch2onnx(build_model("lite-resnet").eval(), Path(work) / "digits.onnx")
    fp32 = list(info["files"].values())[0]["path"]
    try:
        from sklearn.datasets import load_digits
        cal = (load_digits().images[:256].astype(np.float32) / 16.0)[:, None]
    except ImportError:
        cal = np.random.default_rng(0).uniform(0, 1, (256, 1, 8, 8)).astype(np.float32)
    return onnx2int8(fp32, cal, Path(work) / "digits.int8.onnx")["path"]


def cartpole_16x8(work):
    from grpo_edge.targets.esp32 import samples
    return samples.build("mlp16", work)


def per_op_counts(graph, gen, x_q, work):
    """[(op index, kind, instructions)] (esp32/profile.py: marked build, exact counts, mean over the inputs), the
    unmarked model's mean instructions, its outputs (bit-exactness) and its section sizes."""
    from grpo_edge.targets.esp32 import rv32
    from grpo_edge.targets.esp32.profile import per_op_instructions
    counts = per_op_instructions(graph, gen, x_q, work)
    tin, tout = graph.tensors[graph.input], graph.tensors[graph.output]
    (Path(work) / "plain").mkdir(exist_ok=True)
    elf = rv32.build(gen, Path(work) / "plain")
    m = rv32.Machine(elf, gen.prefix, tin.size, tout.size, tin.dtype, tout.dtype)
    outs, totals = [], []
    for x in x_q:
        y, n, _ = m.invoke(x.reshape(-1), count=True)
        outs.append(y)
        totals.append(n)
    return ([(i, graph.ops[i].kind, n) for i, n in counts.items()], float(np.mean(totals)), np.stack(outs),
            rv32.section_sizes(elf))


def op_label(graph, op):
    t = graph.tensors
    if op.kind == "conv":
        w = op.attrs["weights"]
        kind = "depthwise" if op.attrs["group"] > 1 and w.shape[1] == 1 else (
            "1x1" if w.shape[2:] == (1, 1) else "%dx%d" % w.shape[2:])
        return "conv %s %s->%s s%d" % (kind, list(t[op.inputs[0]].shape[1:]), list(t[op.output].shape[1:]),
                                       op.attrs["strides"][0])
    return "%s %s" % (op.kind, list(t[op.output].shape[1:]))


def measure(onnx_path, n_inputs=3, tflm_on=True):
    from grpo_edge.targets.esp32 import codegen, parse, simulate, tflm
    from grpo_edge.targets.esp32 import reference as R
    g = parse.parse(onnx_path)
    gen = codegen.generate(g, "bench")
    tin = g.tensors[g.input]
    x = np.random.default_rng(0).integers(tin.qmin, tin.qmax + 1, size=(max(n_inputs, 20),) + tuple(tin.shape[1:]))
    x = x.astype(tin.np_dtype)
    ref = R.run(g, x).reshape(len(x), -1)
    res = {"model": str(onnx_path), "arena_ours": gen.plan.arena_bytes, "ops": []}
    with tempfile.TemporaryDirectory(prefix="gx_bench_") as d:
        counts, total, y, sizes = per_op_counts(g, gen, x[:n_inputs], d)
        res["rv32_flash"] = {"code": sizes["text"], "data": sizes["rodata"] + sizes["data"]}
        res["rv32_bit_exact"] = bool(np.array_equal(y, ref[:n_inputs]))
        res["rv32_instructions"] = total
        macs_total = 0
        for i, kind, n in counts:
            op = g.ops[i]
            macs = op.macs(g.tensors) if kind in ("conv", "fc", "fc16") else 0
            macs_total += macs
            res["ops"].append({"op": i, "label": op_label(g, op), "kind": kind, "instructions": n, "macs": macs,
                               "instr_per_mac": n / macs if macs else None})
        res["macs"] = macs_total
        res["rv32_instr_per_mac"] = total / macs_total if macs_total else None
        host = simulate.host_check(g, gen, x, opts=("O2",))
        res["host_bit_exact"] = host["bit_exact"]
        res["host_instructions"] = simulate.host_callgrind(gen, x, len(x))
        if tflm_on and tflm.available():
            buf, notes = tflm.to_tflite(g)
            mp = Path(d) / "m.tflite"
            mp.write_bytes(buf)
            ar = tflm.find_arena(mp, d)
            yt = tflm.run(mp, tflm.to_tflm_input(g, x), d, ar["arena_bytes"]).reshape(len(x), -1)
            r4 = R.run(g, x)
            r4 = (r4.transpose(0, 2, 3, 1) if r4.ndim == 4 else r4).reshape(len(x), -1)
            res["tflm_bit_exact"] = bool(np.array_equal(yt, r4))
            res["tflm_instructions"] = tflm.tflm_callgrind(mp, tflm.to_tflm_input(g, x), d, ar["arena_bytes"], len(x))
            res["tflm_arena"] = ar["arena_bytes"]
            res["instructions_ratio"] = res["host_instructions"] / res["tflm_instructions"]
            res["arena_ratio"] = res["arena_ours"] / float(res["tflm_arena"])
    return res


def report(name, res):
    print("\n## %s" % name)
    print("| op | kernel | rv32 instructions | MACs | instr/MAC |\n|---|---|---|---|---|")
    for o in res["ops"]:
        print("| %d | %s | %.0f | %s | %s |" % (o["op"], o["label"], o["instructions"], o["macs"] or "-",
                                               "%.2f" % o["instr_per_mac"] if o["instr_per_mac"] else "-"))
    print("\nrv32 instructions per inference: %.0f (%s MACs, %.2f instr/MAC overall); rv32 bit-exact: %s"
          % (res["rv32_instructions"], res["macs"], res["rv32_instr_per_mac"] or 0, res["rv32_bit_exact"]))
    print("rv32 flash: code %d B, constant data %d B" % (res["rv32_flash"]["code"], res["rv32_flash"]["data"]))
    print("host (x86-64 callgrind) instructions: ours %.0f; host C bit-exact: %s"
          % (res["host_instructions"], res["host_bit_exact"]))
    if "tflm_instructions" in res:
        print("TFLM %.0f -> ratio %.3f; arena ours %d / TFLM %d B -> %.3f; TFLM outputs bit-exact: %s"
              % (res["tflm_instructions"], res["instructions_ratio"], res["arena_ours"], res["tflm_arena"],
                 res["arena_ratio"], res["tflm_bit_exact"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--digits-default", action="store_true")
    ap.add_argument("--cartpole-16x8", action="store_true")
    ap.add_argument("--onnx", action="append", default=[])
    ap.add_argument("--n-inputs", type=int, default=3)
    ap.add_argument("--no-tflm", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    models = []
    with tempfile.TemporaryDirectory(prefix="gx_models_") as work:
        if a.digits_default:
            models.append(("digits lite-resnet (defaults, int8)", digits_default(work)))
        if a.cartpole_16x8:
            models.append(("cartpole mlp 4-64-64-2 tanh (16x8)", cartpole_16x8(work)))
        for p in a.onnx:
            if not Path(p).is_file():
                print("error: --onnx %s: file not found" % p, file=sys.stderr)
                return 2
            models.append((p, p))
        if not models:
            models.append(("digits lite-resnet (defaults, int8)", digits_default(work)))
        out = {}
        for name, path in models:
            out[name] = measure(path, a.n_inputs, not a.no_tflm)
            report(name, out[name])
    if a.json:
        from grpo_edge.report import atomic_write_text
        atomic_write_text(Path(a.json), json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
