"""Raspberry Pi deploy of text models: the runner decodes text without torch and matches torch's greedy
completions; int8 calibrated from decoding runs; bench fills the text rows."""
import json
import subprocess

import numpy as np
import pytest

from conftest import pi_python
from session_cache import text_checkpoint as cached_text_checkpoint
from grpo_edge.errors import ExportError, TargetError
from grpo_edge.targets.rpi import deploy

FAST = {"calibration_samples": 128, "text_runs": 5, "text_warmup": 1, "min_agreement": 1.0}
NO_TORCH = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = ['runner.py'] + sys.argv[1:]; "
            "runpy.run_path('runner.py', run_name='__main__')")
FILES = {"arithmetic": ["model.onnx", "model.int8.onnx"],
         "zh-en-numbers": ["model.encoder.onnx", "model.decoder_step.onnx", "model.int8.encoder.onnx",
                           "model.int8.decoder_step.onnx"]}


@pytest.fixture(scope="module", params=sorted(FILES))
def deployed(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    rep = deploy(cached_text_checkpoint(request.param), "rpi4", out, FAST)
    return request.param, out, rep


def _runner(out, args, stdin=None):
    r = subprocess.run([pi_python(), "-c", NO_TORCH] + args, cwd=str(out), input=stdin, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_text_deploy_folder_and_report(deployed):
    kind, out, rep = deployed
    for name in FILES[kind] + ["runner.py", "textgen.py", "tokenizer.json", "prompts.txt", "requirements.txt",
                               "expected_completions.json", "deploy.json", "report.json", "report.md"]:
        assert (out / name).is_file(), name
    cfg = json.loads((out / "deploy.json").read_text())
    assert cfg["chosen"] in ("model.onnx", "model.int8.onnx") and cfg["why"]
    assert cfg["generation"]["arch"] == ("micro-gpt" if kind == "arithmetic" else "tiny-transformer")
    tok = json.loads((out / "tokenizer.json").read_text())
    assert tok["chars"] and tok["max_new_tokens"] >= 2
    fig = rep.figures
    assert fig["sim_fp32_agreement"].value == 1.0                    # runner == torch greedy, every prompt
    assert fig["metric_onnx_fp32"].value == fig["metric_torch"].value > 0
    assert 0.0 <= fig["metric_onnx_int8"].value <= 1.0 and fig["sim_int8_agreement"].value > 0.5
    assert fig["host_latency_fp32_s"].value > fig["host_latency_per_token_fp32_s"].value > 0
    assert fig["device_latency_int8_s"].how == "estimated" and fig["macs_per_completion"].value > 0
    for key, f in json.loads((out / "report.json").read_text())["figures"].items():
        assert f["how"] in ("measured-host", "estimated", "exact") and f["source"], key


def test_text_runner_without_torch_matches_torch(deployed):
    kind, out, _ = deployed
    expected = json.loads((out / "expected_completions.json").read_text())
    res = json.loads(_runner(out, ["--model", "model.onnx", "--prompts", "prompts.txt", "--json"]))
    assert res["completions"] == expected["completions"] and res["prompts"] == expected["prompts"]
    first = expected["prompts"][0]
    assert _runner(out, ["--model", "model.onnx", "--text", first]).strip() == expected["completions"][0]
    res = json.loads(_runner(out, ["--model", "model.int8.onnx", "--reference", "--prompts", "-", "--json"],
                             stdin="\n".join(expected["prompts"][:3]) + "\n"))
    assert len(res["completions"]) == 3
    b = json.loads(_runner(out, ["--bench", "--runs", "3", "--warmup", "1", "--json"]))["bench"]
    assert b["per_completion_median_s"] > b["per_token_median_s"] > 0 and b["how"] == "measured-host"
    assert b["model_calls_per_completion"] >= b["new_tokens"] >= 1


def test_text_bad_inputs(deployed, tmp_path):
    kind, out, _ = deployed
    r = subprocess.run([pi_python(), "runner.py", "--text", "@@@"], cwd=str(out), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "error: runner: --text: characters not in the vocabulary: '@'"], r.stderr
    with pytest.raises(TargetError, match="from its checkpoint"):        # no tokenizer / loop in a bare step
        deploy(out / FILES[kind][len(FILES[kind]) // 2 - 1], "rpi4", tmp_path / "x", dict(FAST, task=kind))


def test_a_bad_prompt_line_is_reported_and_the_others_complete(deployed):
    """--prompts -: a line the model cannot take (a character outside its vocabulary, too long) is one
    error line naming it; the other prompts still complete; exit 1."""
    kind, out, _ = deployed
    good = json.loads((out / "expected_completions.json").read_text())["prompts"][:2]
    lines = [good[0], "@@", good[1], "9" * 200]
    r = subprocess.run([pi_python(), "-c", NO_TORCH, "--model", "model.onnx", "--prompts", "-", "--json"],
                       cwd=str(out), input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    res = json.loads(r.stdout)
    assert res["prompts"] == good and len(res["completions"]) == 2
    errs = r.stderr.strip().splitlines()
    assert len(errs) == 2 and errs[0].startswith("error: runner: stdin line 2: characters not in")
    assert errs[1].startswith("error: runner: stdin line 4: ")


def test_text_check_completes_the_golden_prompts(deployed):
    """--check on a text folder: expected_completions.json's prompts through both models; fp32 completes
    them as the checkpoint did."""
    kind, out, _ = deployed
    res = json.loads(_runner(out, ["--check", "--json"]))
    assert res["model.onnx"]["agreement"] == 1.0 and res["model.onnx"]["pass"]
    assert res["model.int8.onnx"]["pass"], res
    lines = _runner(out, ["--check"]).splitlines()            # as the Pi user reads it: PASS per model
    assert lines[0].startswith("PASS fp32 (model.onnx): agreement 1, threshold >= 1 (deploy.json min_agreement)"), lines
    assert lines[1].startswith("PASS int8 (model.int8.onnx): agreement ") and lines[-1].startswith("check: PASS")
    assert "at least 1 (deploy.json min_agreement)" in (out / "README.md").read_text()


def test_the_text_folder_readme_runs_as_it_says(deployed):
    """README.md of a text folder: its --text / --prompts / --check / --bench commands run in a venv with only
    numpy and onnxruntime."""
    from test_rpi import run_readme
    kind, out, _ = deployed
    text = (out / "README.md").read_text()
    assert "## Inputs" in text and "at most" in text and "greedy completion" in text
    done = run_readme(out)
    assert any("--text" in c for c in done) and any("--check" in c for c in done)


def test_calibration_from_decoding_quantizes_and_runs(tmp_path):
    from grpo_edge.export.calibration import checkpoint2calibration
    from grpo_edge.export.decode_calibration import load_feeds, text_config
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.torch2onnx import torch2onnx
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.runtime.textgen import TextGenerator, ort_functions
    ckpt = cached_text_checkpoint("arithmetic")
    info = checkpoint2calibration(ckpt, tmp_path / "calib.npz", n=120)
    loaded = np.load(str(tmp_path / "calib.npz"))
    feeds = load_feeds(loaded)
    assert len(feeds) == 120 and info["files"]["model"]["n"] == 120
    past = sorted(set(f["past_keys"].shape[3] for f in feeds))
    assert past[0] == 0 and len(past) > 2                            # every cache length the decode loop sees
    model, state = load_policy(ckpt)
    torch2onnx(model, tmp_path / "model.onnx")
    q = onnx2int8(tmp_path / "model.onnx", tmp_path / "calib.npz", tmp_path / "model.int8.onnx",
                  op_types=["MatMul", "Gemm"])
    assert q["num_samples"] == 120 and q["errors"]["reference"]["argmax_agreement"] > 0.8
    cfg = text_config(state)
    gen = TextGenerator(cfg, ort_functions(str(tmp_path / "model.int8.onnx"), cfg, reference=True))
    assert len(gen.complete(["1+2=", "9+9="])) == 2
    with pytest.raises(ExportError, match="minmax"):
        onnx2int8(tmp_path / "model.onnx", tmp_path / "calib.npz", tmp_path / "e.onnx", method="entropy")
    with pytest.raises(ExportError, match="past_keys"):
        bad = [dict(f, past_keys=f["past_keys"][:, :, :1]) for f in feeds[:3]]   # wrong head count
        onnx2int8(tmp_path / "model.onnx", bad, tmp_path / "b.onnx")


def test_bench_fills_text_rows(tmp_path):
    from grpo_edge.bench.table import run_bench
    rows = run_bench(cached_text_checkpoint("zh-en-numbers"), tmp_path, targets=("rpi4",),
                     options={"runs": 20, "warmup": 10, "calibration_samples": 128})
    by = {r["format"]: r for r in rows}
    for f in ("torch", "onnx fp32", "onnx int8"):
        assert by[f]["status"] == "ok", by[f]["status"]
        assert by[f]["metric"] is not None and by[f]["host_latency_s"] > 0 and by[f]["size_bytes"] > 0
    assert by["onnx fp32"]["metric"] == by["torch"]["metric"]
    assert by["onnx int8"]["rpi4_latency_s"] > 0 and by["tflite fp32"]["status"].startswith("unsupported")
    assert "per completion" in json.loads((tmp_path / "bench.json").read_text())["legend"]["rpi4_latency_s"]
