"""`grpo-edge bench` table: every format, every figure labelled, Markdown + JSON + PNG."""
import json

from session_cache import checkpoint as cached_checkpoint
from grpo_edge.bench.table import FORMATS, run_bench


def test_bench_table(tmp_path):
    rows = run_bench(cached_checkpoint("cartpole"), tmp_path, targets=("rpi4", "esp32c3"),
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
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
