"""Issue 39: the MLPerf Tiny architectures as int8 .tflite files (grpo_edge/bench/tiny_models.py) deployed with
`deploy --tflite` to the ESP32-S3 and ESP32-C3, ours against TFLite Micro on the very same file.

    .venv/bin/python benchmarks/tflite_models.py [--models ds_cnn,resnet8] [--targets esp32s3,esp32c3]
                                                 [--json benchmarks/results/tflite_models.json]

Per model and target (the Python API of `grpo-edge deploy --target T --tflite M`): the gate (outputs equal to
TFLM's on 200 inputs), host C (-O2, -O0 + sanitizers) and rv32 bit-exactness, rv32 instructions; TFLM's smallest
arena, the host (x86-64 callgrind) instructions of both invokes and their ratio (goal <= 0.5x TFLM's reference
kernels), the arena ratio (goal <= 0.5x), flash ours vs the .tflite + TFLM's runtime (10-20 KB, public figure);
on the S3 the estimate against TFLM + ESP-NN (targets/esp32/espnn_estimate.py). A few minutes per model
(MobileNet: about two per target).
"""
import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(name, target, work) -> dict:
    from grpo_edge.bench import tiny_models as T
    from grpo_edge.targets import deploy
    path = Path(work) / (name + ".tflite")
    if not path.exists():
        T.write_model(name, path)
    t0 = time.time()
    rep = deploy(target, tflite=str(path), out_dir=str(Path(work) / ("%s_%s" % (name, target))),
                 options={"n_callgrind": 5 if name == "mobilenet_v1_025" else 10})
    f, s = rep.figures, rep.sections
    t = s.get("tflm_baseline", {})
    ipi = t.get("instructions_per_inference", {})
    row = {"model": name, "target": target, "deploy_s": round(time.time() - t0, 1), "gate": rep.gate["line"],
           "gate_passed": rep.gate["passed"], "tflm_bit_exact": t.get("outputs", {}).get("bit_exact"),
           "tflm_inputs": t.get("outputs", {}).get("n_inputs"),
           "host_bit_exact": f["host_bit_exact"].value, "rv32_bit_exact": f["rv32_bit_exact"].value,
           "rv32_instructions": f["rv32_instructions_per_inference"].value, "macs": f["macs_per_inference"].value,
           "flash_bytes": f["flash_bytes"].value, "arena_bytes": f["arena_bytes"].value,
           "tflite_bytes": path.stat().st_size, "tflm_arena_bytes": t.get("arena_bytes"),
           "host_instructions_ours": ipi.get("ours"), "host_instructions_tflm": ipi.get("tflm"),
           "instructions_ratio": ipi.get("ratio"), "arena_ratio": (t.get("ram") or {}).get("ratio"),
           "ops": [r["kind"] for r in s.get("per_op", [])]}
    e = s.get("s3_estimate")
    if e:
        row["s3_estimate"] = {k: e["model"][k] for k in ("ours_us", "tflm_reference_us", "tflm_esp_nn_us",
                                                         "ours_over_esp_nn", "esp_nn_over_reference")}
    return row


def table(rows) -> str:
    lines = ["| model | target | bit-exact TFLM / host / rv32 | rv32 instr | host instr ours / TFLM | arena ours / TFLM "
             "| flash ours / .tflite | S3 estimate ours / TFLM ref / TFLM + ESP-NN (us) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s3 = r.get("s3_estimate")
        lines.append("| %s | %s | %s / %s / %s | %s | %s | %s | %d / %d | %s |" % (
            r["model"], r["target"], r["tflm_bit_exact"], r["host_bit_exact"], r["rv32_bit_exact"],
            "{:,}".format(int(r["rv32_instructions"])),
            "%.2fx" % r["instructions_ratio"] if r.get("instructions_ratio") else "n/a",
            "%d / %s (%.2fx)" % (r["arena_bytes"], r["tflm_arena_bytes"], r["arena_ratio"]) if r.get("arena_ratio") else "n/a",
            r["flash_bytes"], r["tflite_bytes"],
            "%.0f / %.0f / %.0f (%.2fx)" % (s3["ours_us"], s3["tflm_reference_us"], s3["tflm_esp_nn_us"],
                                           s3["ours_over_esp_nn"]) if s3 else "-"))
    return "\n".join(lines)


def main(argv=None):
    from grpo_edge.bench.tiny_models import MODELS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default="esp32s3,esp32c3")
    ap.add_argument("--json", default=None)
    ap.add_argument("--work", default=None)
    a = ap.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="tflite_models_"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        for target in a.targets.split(","):
            r = measure(name, target, work)
            rows.append(r)
            print("%-18s %-8s gate %s  ratio %s  arena %s  %.0fs" % (name, target, r["gate_passed"],
                  r.get("instructions_ratio"), r.get("arena_ratio"), r["deploy_s"]), flush=True)
    print(table(rows))
    if a.json:
        from grpo_edge.report import atomic_write_bytes
        atomic_write_bytes(a.json, json.dumps({"benchmark": "tflite_models", "rows": rows}, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
