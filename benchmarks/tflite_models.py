"""Issue 39: the MLPerf Tiny architectures as int8 .tflite files (grpo_edge/bench/tiny_models.py) deployed with
`deploy --tflite` to the ESP32-S3 and ESP32-C3, ours against TFLite Micro on the very same file.

    .venv/bin/python benchmarks/tflite_models.py [--models ds_cnn,resnet8] [--targets esp32s3,esp32c3]
                                                 [--int16] [--json benchmarks/results/tflite_models.json]

--int16: the same architectures written in 16x8 (int16 activations, int64 biases), rows named "<model> 16x8".

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


def measure(name, target, work, activations="int8") -> dict:
    from grpo_edge.bench import tiny_models as T
    from grpo_edge.bench.tflite_bench import measure as measure_file
    tag = name if activations == "int8" else name + "_16x8"
    path = Path(work) / (tag + ".tflite")
    if not path.exists():
        T.write_model(name, path, activations=activations)
    row = measure_file(path, target, Path(work) / ("%s_%s" % (tag, target)),
                       {"n_callgrind": 5 if name == "mobilenet_v1_025" else 10})
    row["model"] = name if activations == "int8" else name + " 16x8"
    row["activations"] = activations
    return row


def main(argv=None):
    from grpo_edge.bench.tiny_models import MODELS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default="esp32s3,esp32c3")
    ap.add_argument("--int16", action="store_true", help="the models in 16x8 (int16 activations)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--work", default=None)
    a = ap.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="tflite_models_"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        for target in a.targets.split(","):
            r = measure(name, target, work, "int16" if a.int16 else "int8")
            rows.append(r)
            print("%-18s %-8s gate %s  ratio %s  arena %s  %.0fs" % (name, target, r["gate_passed"],
                  r.get("instructions_ratio"), r.get("arena_ratio"), r["deploy_s"]), flush=True)
    from grpo_edge.bench.tflite_bench import table
    print(table(rows))
    if a.json:
        from grpo_edge.report import atomic_write_bytes
        atomic_write_bytes(a.json, json.dumps({"benchmark": "tflite_models", "rows": rows}, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
