"""`grpo-edge bench` table: every format, every figure labelled, Markdown + JSON + PNG."""
import json

from session_cache import checkpoint as cached_checkpoint
from grpo_edge.bench.table import FORMATS, run_bench


def test_bench_table(tmp_path):
    rows = run_bench(cached_checkpoint("cartpole"), tmp_path, targets=("rpi4", "esp32c3", "jetson-nano"),
                     options={"runs": 50, "warmup": 5, "eval_n": 3, "calibration_samples": 256})
    assert [r["format"] for r in rows] == list(FORMATS)
    by = {r["format"]: r for r in rows}
    for f in ("torch", "onnx fp32", "onnx int8"):
        assert by[f]["status"] == "ok" and by[f]["size_bytes"] > 0 and by[f]["host_latency_s"] > 0
        assert by[f]["metric"] >= 475
    assert by["torch"]["rpi4_latency_s"] is None                   # no estimate for a format not deployed
    assert by["onnx int8"]["esp32c3_latency_s"] > by["onnx int8"]["rpi4_latency_s"] > 0
    for f in ("tflite fp32", "tflite int8"):
        assert by[f]["status"] == "ok" or by[f]["status"].startswith(("skipped:", "unsupported:"))
    doc = json.loads((tmp_path / "bench.json").read_text())
    for key in rows[0]:
        if key not in ("format", "file"):
            assert doc["legend"].get(key), "column %s has no label" % key
    assert "ESTIMATE" in doc["legend"]["rpi4_latency_s"]
    md = (tmp_path / "bench.md").read_text()
    assert "(measured-host)" in md and "(ESTIMATE)" in md
    assert "ESP-NN's SIMD kernels" not in md                        # the C3 has no ESP-NN: no such assumption
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    _check_esp32_per_op(doc, md, tmp_path)
    _check_one_device_model(by, doc, tmp_path)


def _check_one_device_model(by, doc, out):
    """bench and deploy take a device's estimate from one model (targets/device_model.py): the int8 C on the
    ESP32-C3 is its rv32 count x CPI / clock in both (deploy of bench's own int8 ONNX gives the same figure,
    within the count's spread over inputs); the Jetson's ONNX rows are TensorRT engines on its GPU, its TFLite
    rows the CPU; each legend says which code it assumes."""
    from grpo_edge.targets import deploy
    from grpo_edge.targets.esp32 import rv32
    leg = doc["legend"]
    assert "TensorRT" in leg["jetson-nano_latency_s"] and "onnx int8: TensorRT int8 engine" in leg["jetson-nano_latency_s"]
    assert "plain C, no ESP-NN" in leg["esp32c3_latency_s"]
    if not rv32.available():
        return
    int8 = next(p for p in out.iterdir() if p.name.endswith(".onnx") and "int8" in p.name)
    rep = deploy("esp32c3", onnx=str(int8), out_dir=str(out / "esp32"), options={"callgrind": False, "tflm": False})
    assert abs(rep.figures["latency_s"].value / by["onnx int8"]["esp32c3_latency_s"] - 1) < 0.02


def _check_esp32_per_op(doc, md, out):
    """The int8 model's per-op profile on the ESP32: every op of the compiled graph has a row, the rows add
    up to the whole model's exact rv32 count (within the mark calls, 5%), the chart is a PNG; with TFLM and
    valgrind here, TFLM's host count for every op it runs."""
    from grpo_edge.targets.esp32 import rv32
    p = doc["esp32_per_op"]
    if not rv32.available():
        assert p["status"].startswith("skipped:")
        return
    assert p["status"] == "ok", p["status"]
    kinds = [r["kind"] for r in p["ops"]]
    assert kinds.count("fc") + kinds.count("fc16") == 3 and p["totals"]["rv32_bit_exact"] is True
    t = p["totals"]
    assert abs(t["rv32_instructions_ops"] - t["rv32_instructions_model"]) <= 0.05 * t["rv32_instructions_model"]
    assert t["macs"] == sum(r["macs"] for r in p["ops"]) and t["macs"] > 0
    if p["host_columns"] == "ok":
        assert all(r["tflm_host_instructions"] > 0 and r["host_instructions"] > 0 for r in p["ops"])
    assert "## Per-op profile on the ESP32" in md and (out / "per_op.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_cli_says_what_the_s3_tflite_figures_assume(tmp_path):
    """`grpo-edge bench CKPT --targets esp32s3` as a user runs it: the S3's TFLite int8 figure (TFLM + ESP-NN's
    SIMD kernels, from the profile) is faster than our plain C while TFLM's per-op host instructions are its
    reference kernels; a line directly under the table says so, with the sources, printed and in bench.md."""
    from conftest import cli_in
    r = cli_in(tmp_path, "bench", cached_checkpoint("cartpole"), "--targets", "esp32s3", "--no-per-op", "--out", "b")
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "b" / "bench.md").read_text()
    for text in (r.stdout, md):
        lines = text.splitlines()
        last_row = max(i for i, ln in enumerate(lines) if ln.startswith("| tflite int8 |"))
        assert lines[last_row + 1] == "", lines[last_row:last_row + 3]
        note = lines[last_row + 2]
        assert note.startswith("esp32s3 TFLite int8 figures assume TFLite Micro + ESP-NN's SIMD kernels (ESTIMATE: ")
        assert "int8_cycles_per_mac 1.8" in note and "espressif/esp-nn README" in note and "esp-nn issue 1" in note
        assert "our generated plain C, no ESP-NN" in note and "reference kernels" in note
