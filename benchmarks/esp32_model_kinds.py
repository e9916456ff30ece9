"""Issue 28: small-model kinds the project never trained, deployed to the ESP32 from fp32 ONNX + calibration,
ours vs TFLite Micro (the same int8 parameters through the project's TFLite writer).

    .venv/bin/python benchmarks/esp32_model_kinds.py [--out /tmp/kinds] [--json benchmarks/results/esp32_model_kinds.json]

For each kind of grpo_edge.targets.esp32.samples.KINDS (an MLP with LayerNorm and GELU, a Conv1d keyword
spotter with an input Transpose and a softmax head, a CNN with BatchNorm, HardSwish and Concat, a transformer
encoder written out, the same with torch's nn.TransformerEncoder, a token classifier with nn.Embedding):
export it (samples.export_kind: fp32, opset 17, seeded weights, 256 calibration inputs or token ids), then `grpo-edge deploy --target
esp32s3 --onnx M --calibration C --activations int8` (the Python API, with TFLM and callgrind). Printed per
kind: host / rv32 bit-exactness, rv32 instructions, flash, arena; TFLM's arena and the host (x86-64 callgrind)
instructions of both invokes, and their ratios (goal: <= 0.5x TFLM). Where TFLM cannot run the model, why.
About a minute per kind.
"""
import argparse
import json
import tempfile
from pathlib import Path


def measure(name, work) -> dict:
    from grpo_edge.targets import deploy
    from grpo_edge.targets.esp32 import samples
    onnx, calib = samples.export_kind(name, work)
    rep = deploy("esp32s3", onnx=str(onnx), out_dir=str(Path(work) / (name + "_esp32")),
                 options={"calibration": str(calib), "activations": "int8"})
    f, s = rep.figures, rep.sections
    t = s.get("tflm_baseline", {})
    row = {"kind": name, "ops": [r["kind"] for r in s.get("per_op", [])],
           "host_bit_exact": f["host_bit_exact"].value, "rv32_bit_exact": f["rv32_bit_exact"].value,
           "ort_max_lsb_per_op": f["ort_max_lsb_per_op"].value,
           "rv32_instructions": f["rv32_instructions_per_inference"].value, "flash_bytes": f["flash_bytes"].value,
           "arena_bytes": f["arena_bytes"].value, "tflm": t.get("skipped") or "ran"}
    if "skipped" not in t:
        ipi = t.get("instructions_per_inference", {})
        row.update(tflm_arena_bytes=t["arena_bytes"], tflm_outputs_max_lsb=t["outputs"]["max_lsb"],
                   host_instructions_ours=ipi.get("ours"), host_instructions_tflm=ipi.get("tflm"),
                   instructions_ratio=ipi.get("ratio"), arena_ratio=t["ram"]["ratio"])
    return row


def markdown(rows) -> str:
    head = ("| kind | ops | host / rv32 bit-exact | rv32 instr | flash B | arena B | TFLM arena B (ours/TFLM) | "
            "host instr ours / TFLM (ratio) | TFLM outputs |")
    out = [head, "|" + "---|" * 9]
    for r in rows:
        if r["tflm"] == "ran":
            tf = ["%d (%.2fx)" % (r["tflm_arena_bytes"], r["arena_ratio"]),
                  "%s / %s (%.2fx)" % (format(int(r["host_instructions_ours"]), ","),
                                       format(int(r["host_instructions_tflm"]), ","), r["instructions_ratio"]),
                  "max %d LSB" % r["tflm_outputs_max_lsb"]]
        else:
            tf = ["-", "-", "cannot run: " + r["tflm"]]
        out.append("| %s | %s | %s / %s | %s | %s | %s | %s |" % (
            r["kind"], " ".join(r["ops"]), r["host_bit_exact"], r["rv32_bit_exact"],
            format(int(r["rv32_instructions"]), ","), format(int(r["flash_bytes"]), ","),
            format(int(r["arena_bytes"]), ","), " | ".join(tf)))
    return "\n".join(out)


def main():
    from grpo_edge.targets.esp32 import samples
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write the rows here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kinds_") as tmp:
        rows = [measure(k, a.out or tmp) for k in samples.KINDS]
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=str))
    print(markdown(rows))


if __name__ == "__main__":
    main()
