"""`grpo-edge bench --tflite model.tflite`: an int8 TFLite model compiled for the ESP32 chips, ours against TFLite
Micro on the very same file (Markdown + JSON).

    rows = bench_tflite("kws.tflite", "out/bench", targets=("esp32s3", "esp32c3"))

Per target, the ESP32 deploy of the file (targets/esp32/deploy.py, into out/<target>): the gate (outputs equal to
TFLM's), host and rv32 bit-exactness, rv32 instructions (exact), the host (x86-64 callgrind) instructions of our
invoke and of TFLM's with its reference kernels, arenas (ours planned, TFLM's smallest working one), flash; on
the S3 the estimate against TFLM + ESP-NN (targets/esp32/espnn_estimate.py), labelled as such.
"""
import json
import time
from pathlib import Path

from grpo_edge.report import atomic_write_bytes, atomic_write_text

ESTIMATE_NOTE = ("S3 columns are ESTIMATES (no ESP32-S3 here): targets/esp32/espnn_estimate.py, from TFLM's "
                 "measured host instructions per op and ESP-NN's published speed-ups")


def measure(path, target, out_dir, options=None) -> dict:
    """Deploy `path` to `target` into out_dir and return its row."""
    from grpo_edge.targets import deploy
    path = Path(path)
    t0 = time.time()
    rep = deploy(target, tflite=str(path), out_dir=str(out_dir), options=dict(options or {}))
    f, s = rep.figures, rep.sections
    t = s.get("tflm_baseline", {})
    ipi = t.get("instructions_per_inference", {})

    def fig(k):
        return f[k].value if k in f else None
    row = {"model": path.stem, "target": target, "deploy_s": round(time.time() - t0, 1), "gate": rep.gate["line"],
           "gate_passed": rep.gate["passed"], "tflm_bit_exact": t.get("outputs", {}).get("bit_exact"),
           "tflm_inputs": t.get("outputs", {}).get("n_inputs"), "host_bit_exact": fig("host_bit_exact"),
           "rv32_bit_exact": fig("rv32_bit_exact"), "esp_nn_host_bit_exact": fig("esp_nn_host_bit_exact"),
           "esp_nn_ops": fig("esp_nn_ops"), "rv32_instructions": fig("rv32_instructions_per_inference"),
           "macs": fig("macs_per_inference"), "flash_bytes": fig("flash_bytes"), "arena_bytes": fig("arena_bytes"),
           "tflite_bytes": path.stat().st_size, "tflm_arena_bytes": t.get("arena_bytes"),
           "host_instructions_ours": ipi.get("ours"), "host_instructions_tflm": ipi.get("tflm"),
           "instructions_ratio": ipi.get("ratio"), "arena_ratio": (t.get("ram") or {}).get("ratio"),
           "layout": "nhwc" if fig("esp_nn_ops") is not None else "nchw",
           "ops": [r["kind"] for r in s.get("per_op", [])]}
    e = s.get("s3_estimate")
    if e:
        row["s3_estimate"] = {k: e["model"][k] for k in ("ours_us", "ours_esp_nn_us", "tflm_reference_us",
                                                         "tflm_esp_nn_us", "ours_esp_nn_over_esp_nn",
                                                         "esp_nn_over_reference")}
        row["s3_estimate"]["tflm_esp_nn_arena_bytes"] = fig("s3_estimate_tflm_esp_nn_arena_bytes")
    return row


def _x(v):
    return "%.2fx" % v if v else "n/a"


def table(rows) -> str:
    lines = ["| model | target | bit-exact TFLM / host / rv32 | rv32 instr | host instr ours / TFLM | arena ours / TFLM "
             "| flash ours / .tflite (B) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %s / %s / %s | %s | %s | %s | %s / %d |" % (
            r["model"], r["target"], r["tflm_bit_exact"], r["host_bit_exact"], r["rv32_bit_exact"],
            "{:,}".format(int(r["rv32_instructions"])) if r.get("rv32_instructions") else "n/a",
            _x(r.get("instructions_ratio")),
            "%d / %s (%s)" % (r["arena_bytes"], r["tflm_arena_bytes"], _x(r.get("arena_ratio"))),
            r["flash_bytes"], r["tflite_bytes"]))
    s3 = [r for r in rows if r.get("s3_estimate")]
    if s3:
        lines += ["", "ESP32-S3, ESTIMATE (no device here; %s):" % ESTIMATE_NOTE.split(": ", 1)[1], "",
                  "| model | ours plain C (us) | ours + ESP-NN (us) | TFLM reference (us) | TFLM + ESP-NN (us) "
                  "| ours + ESP-NN / TFLM + ESP-NN | arena ours / TFLM + ESP-NN (B) | ESP-NN calls proven on host |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in s3:
            e = r["s3_estimate"]
            lines.append("| %s | %.0f | %.0f | %.0f | %.0f | %.2fx | %d / %s | %s |" % (
                r["model"], e["ours_us"], e["ours_esp_nn_us"], e["tflm_reference_us"], e["tflm_esp_nn_us"],
                e["ours_esp_nn_over_esp_nn"], r["arena_bytes"], e.get("tflm_esp_nn_arena_bytes") or "n/a",
                "%s (%s ops)" % (r["esp_nn_host_bit_exact"], r["esp_nn_ops"])
                if r.get("esp_nn_host_bit_exact") is not None else "not here (%s ops)" % r.get("esp_nn_ops")))
    return "\n".join(lines)


def bench_tflite(path, out_dir, targets=("esp32s3", "esp32c3"), options=None) -> list:
    """Deploy `path` to each ESP32 target (out_dir/<target>), write out_dir/bench.{md,json}; returns the rows."""
    from grpo_edge.errors import TargetError
    from grpo_edge.targets.profiles import load_profile
    for t in targets:
        if load_profile(t).get("family") != "esp32":
            raise TargetError("bench --tflite compares with TFLite Micro on the esp32 targets; %s is not one" % t)
    out = Path(out_dir)
    rows = [measure(path, t, out / t, options) for t in targets]
    md = "# %s on the ESP32: ours vs TFLite Micro on the same file\n\n%s\n" % (Path(path).name, table(rows))
    atomic_write_text(out / "bench.md", md)
    atomic_write_bytes(out / "bench.json", json.dumps({"model": str(path), "rows": rows}, indent=1,
                                                      default=str).encode())
    return rows
