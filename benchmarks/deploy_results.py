"""Issues 3 and 4 results: `grpo-edge bench` tables and ESP32 ours-vs-TFLM, written to docs/results.md.

    .venv/bin/python benchmarks/deploy_results.py --cartpole runs/cartpole/best.pt --digits runs/digits/best.pt

Runs the real CLI (`grpo-edge bench`, `grpo-edge deploy --target esp32s3`) on the two checkpoints and
copies the tables into docs/results.md between markers, with the commands. Host figures are measured on
this machine; device latency/energy are estimates from the target profiles (labelled in the tables).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_results import write_section  # noqa: E402

START, END = "<!-- deploy:start -->", "<!-- deploy:end -->"


def cli(*args, reuse=None):
    """Run `grpo-edge ARGS` (skipped when `reuse` names an existing output); returns the command line."""
    cmd = [str(ROOT / ".venv/bin/grpo-edge"), *args]
    if reuse is not None and Path(reuse).exists():
        return " ".join(["grpo-edge", *args])
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    return " ".join(["grpo-edge", *args])


def esp32_row(name, rep):
    f = rep["figures"]
    t = rep["sections"].get("tflm_baseline", {})
    ins = t.get("instructions_per_inference", {})
    ram = t.get("ram", {})

    def v(k):
        return f[k]["value"] if k in f else None
    outs = t.get("outputs", {})
    return {
        "model": name, "activations": v("activations"),
        "host C == NumPy reference": v("host_bit_exact"), "rv32 bit-exact": v("rv32_bit_exact"),
        "decision agreement vs fp32": v("decision_agreement_fp32"),
        "task metric integer / fp32": ("%.1f / %.1f" % (v("task_metric_integer"), v("task_metric_fp32"))
                                       if v("task_metric_integer") is not None else "-"),
        "instructions ours / TFLM (x86 callgrind)": "%s / %s (%.2f)" % (
            "{:,}".format(int(ins["ours"])), "{:,}".format(int(ins["tflm"])), ins["ratio"]) if ins else "-",
        "rv32 instructions": "{:,}".format(v("rv32_instructions_per_inference") or 0),
        "arena ours / TFLM (B)": "%s / %s (%.2f)" % (ram["ours_arena"], ram["tflm_arena"], ram["ratio"]) if ram else "-",
        "flash ours / .tflite alone (B)": "%s / %s" % (v("flash_bytes"), t.get("tflite_bytes", "-")),
        "TFLM outputs": ("bit-exact" if outs.get("bit_exact") else
                         "max %s LSB (tanh: TFLM's fixed-point int8 tanh vs our exact table)" % outs.get("max_lsb")
                         if "tanh" in outs.get("reason", "") else "max %s LSB" % outs.get("max_lsb")),
        "est. latency esp32s3": "%.3g ms (estimate)" % (1e3 * v("latency_s")) if v("latency_s") else "-",
    }


def agreement_row(seed, rep):
    """Per checkpoint: what each quantization candidate does on the evaluation states, and what was chosen."""
    q = rep["sections"].get("quantization", {})
    f = rep["figures"]
    row = {"checkpoint": seed}
    for c in q.get("candidates", []):
        key = "%s/%s" % (c["activations"], c["weight_rounding"])
        row[key + " calib"] = "%.3f" % c["agreement_calibration"] if c.get("agreement_calibration") is not None else "-"
        row[key + " eval"] = "%.3f" % c["agreement_eval"] if c.get("agreement_eval") is not None else "-"
    row["chosen"] = q.get("chosen", "-")
    row["return integer / fp32"] = ("%.1f / %.1f" % (f["task_metric_integer"]["value"], f["task_metric_fp32"]["value"])
                                    if "task_metric_integer" in f else "-")
    return row


def table(rows):
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cartpole", required=True)
    ap.add_argument("--digits", required=True)
    ap.add_argument("--more-cartpole", nargs="*", default=[], help="more cartpole checkpoints for the agreement table")
    ap.add_argument("--out", default="runs/bench_deploy")
    ap.add_argument("--reuse", action="store_true", help="reuse outputs already in --out (only rewrite the doc)")
    args = ap.parse_args()
    out = Path(args.out)
    parts = [START, "## Export, int8 and bench tables (issue 3)", ""]
    esp_rows, cmds = [], []
    runs = (("cartpole mlp", args.cartpole, []), ("cartpole mlp, int8 forced", args.cartpole, ["--activations", "int8"]),
            ("digits lite-resnet", args.digits, []))
    for name, ckpt, extra in runs:
        key = name.split()[0]
        if not extra:
            b = out / ("bench_" + key)
            cmds.append(cli("bench", ckpt, "--out", str(b), "--targets", "rpi4,rpi5,jetson-nano,esp32s3",
                            reuse=(ROOT / b / "bench.md") if args.reuse else None))
            parts += ["### %s (`%s`)" % (name, cmds[-1]), "", (ROOT / b / "bench.md").read_text().strip(), ""]
        e = out / ("esp32_" + key + ("_int8" if extra else ""))
        cmds.append(cli("deploy", "--target", "esp32s3", "--checkpoint", ckpt, "--out", str(e), *extra,
                        reuse=(ROOT / e / "report.json") if args.reuse else None))
        esp_rows.append(esp32_row(name, json.loads((ROOT / e / "report.json").read_text())))
    seeds = []
    for ckpt in [args.cartpole] + list(args.more_cartpole or []):
        e = out / ("esp32_choice_" + Path(ckpt).parent.name)
        cmds.append(cli("deploy", "--target", "esp32c3", "--checkpoint", ckpt, "--out", str(e),
                        "--option", "tflm=false", "--option", "callgrind=false",
                        reuse=(ROOT / e / "report.json") if args.reuse else None))
        seeds.append(agreement_row(Path(ckpt).parent.name, json.loads((ROOT / e / "report.json").read_text())))
    parts += ["## ESP32: generated C vs TFLite Micro (issue 4)", "",
              "Goal: at most half of TFLM's instructions, at most 60% of its RAM, less flash, and decisions that agree "
              "with the fp32 checkpoint on >= 99% of a task evaluation. Instructions are counted exactly (valgrind "
              "callgrind on this x86-64 host: our `<prefix>_invoke` at gcc -O2 vs `tflite::MicroInterpreter::Invoke` "
              "from the pip tflite-micro package, the same quantized model in both; rv32imc counts from the unicorn "
              "simulator). Flash: ours is the whole rv32 model code + data; TFLM needs the .tflite plus its runtime "
              "(10-20 KB, a public estimate). Latency on the chip is an ESTIMATE (rv32 count x CPI 1.2 / 240 MHz). "
              "Decision agreement: argmax of the integer reference vs the fp32 ONNX on 1,000 states the fp32 policy "
              "visits in an evaluation with another seed than the calibration set (digits: 1,000 of the task's images).",
              "", table(esp_rows), "",
              "### Why CartPole needs int16 activations (16x8)", "",
              "A balancing policy spends its time near its decision boundary: about 10% of the states it visits have "
              "an fp32 logit gap under 0.013. With int8 activations the four state features share one input scale "
              "(the cart position sets it; the pole angle gets about ten levels) and 10-22% of the decisions flip (the table). "
              "`deploy` therefore measures: int8 first, and when its decisions agree with fp32 on fewer than 99% of "
              "the calibration states it also builds the 16x8 form (TFLite's int16-activation mode: int16 "
              "activations, int8 weights, TFLM-exact kernels) with GPTQ-rounded weights, and keeps the one that "
              "agrees more. Agreement per checkpoint (calib = the states the choice was made on; eval = other "
              "states, the reported figure):", "", table(seeds), "",
              "The return column is the task's own metric over the checkpoint's evaluation episodes (100) with the "
              "integer reference (the C's arithmetic) as the policy: int8's flipped decisions cost little return "
              "(498.4 vs 499.3 on seed 0), because they fall where the policy is nearly indifferent; the 99% goal is "
              "about computing what the model computes, and only 16x8 meets it. Its cost: 2 bytes per activation "
              "(arena 256 vs 128 B), a 512-byte tanh table, and 6% more rv32 instructions than int8, still about a "
              "third of TFLM's.", "", "Commands:", ""] + ["    " + c for c in cmds] + ["", END]
    write_section(ROOT / "docs" / "results.md", "\n".join(parts), START, END)
    print("\n".join(parts))


if __name__ == "__main__":
    main()
