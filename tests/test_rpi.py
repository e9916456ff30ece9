"""Raspberry Pi target: deploy folder, the runner without torch, the host simulation, bad inputs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from session_cache import checkpoint as cached_checkpoint
from grpo_edge.errors import ExportError, TargetError
from grpo_edge.targets.rpi import deploy

FAST = {"runs": 200, "warmup": 20, "eval_n": 5, "calibration_samples": 256}
NO_TORCH = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = ['runner.py'] + sys.argv[1:]; "
            "runpy.run_path('runner.py', run_name='__main__')")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    out = tmp_path_factory.mktemp("rpi4")
    rep = deploy(cached_checkpoint("cartpole"), "rpi4", out, FAST)
    return out, rep


def test_deploy_folder(deployed):
    out, rep = deployed
    for name in ("model.onnx", "model.int8.onnx", "runner.py", "requirements.txt", "deploy.json", "report.json",
                 "report.md", "sample_inputs.npy", "expected_outputs.npy"):
        assert (out / name).is_file(), name
    req = (out / "requirements.txt").read_text()
    assert "onnxruntime" in req and "numpy" in req and "torch" not in req
    cfg = json.loads((out / "deploy.json").read_text())
    assert cfg["chosen"] in ("model.onnx", "model.int8.onnx") and cfg["why"]
    assert os.access(str(out / "runner.py"), os.X_OK)


def test_report_labels_every_figure(deployed):
    out, rep = deployed
    data = json.loads((out / "report.json").read_text())
    for key, f in data["figures"].items():
        assert f["how"] in ("measured-host", "measured-device", "estimated", "exact"), key
        assert f["source"], key
        if key.startswith("device_"):
            assert f["how"] == "estimated"
    assert "ESTIMATE" in (out / "report.md").read_text().upper()


def test_simulation_and_metric_retention(deployed):
    _, rep = deployed
    fig = rep.figures
    assert fig["sim_fp32_max_abs_diff"].value <= 1e-4
    assert fig["sim_fp32_action_agreement"].value == 1.0
    assert fig["metric_onnx_fp32"].value == fig["metric_torch"].value >= 475
    assert fig["int8_metric_retention"].value >= 0.99
    assert fig["host_latency_fp32_s"].value > 0 and fig["host_latency_int8_s"].value > 0
    assert fig["device_latency_int8_s"].how == "estimated" and "rpi4" in fig["device_latency_int8_s"].source


def _run(out, code_args, stdin=None):
    return subprocess.run([sys.executable] + code_args, cwd=str(out), input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_runner_runs_without_torch(deployed):
    out, _ = deployed
    probe = _run(out, ["-c", "import sys; sys.modules['torch'] = None\ntry:\n import torch\nexcept ImportError:\n"
                             " print('blocked')"])
    assert probe.stdout.strip() == "blocked"
    # the fp32 model, named: the default is chosen by measured latency and may be int8 on a loaded machine
    r = _run(out, ["-c", NO_TORCH, "--model", "model.onnx", "--input", "sample_inputs.npy", "--json"])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    expected = np.load(str(out / "expected_outputs.npy"))
    got = np.asarray(res["outputs"])
    assert got.shape == expected.shape and np.max(np.abs(got - expected)) < 1e-4
    assert res["actions"] == expected.argmax(-1).tolist()


@pytest.mark.parametrize("chosen", ["model.onnx", "model.int8.onnx"])
def test_runner_default_is_the_chosen_model(deployed, tmp_path, chosen):
    import shutil
    out, _ = deployed
    d = tmp_path / "copy"
    shutil.copytree(str(out), str(d))
    cfg = json.loads((d / "deploy.json").read_text())
    cfg["chosen"] = chosen
    (d / "deploy.json").write_text(json.dumps(cfg))
    default = _run(d, ["-c", NO_TORCH, "--input", "sample_inputs.npy", "--json"])
    named = _run(d, ["-c", NO_TORCH, "--model", chosen, "--input", "sample_inputs.npy", "--json"])
    assert default.returncode == 0 and named.returncode == 0, default.stderr + named.stderr
    assert json.loads(default.stdout)["outputs"] == json.loads(named.stdout)["outputs"]


def test_runner_stdin_and_bench_without_torch(deployed):
    out, _ = deployed
    x = np.load(str(out / "sample_inputs.npy"))[:3]
    lines = "\n".join(" ".join("%.8f" % v for v in row) for row in x) + "\n"
    r = _run(out, ["-c", NO_TORCH, "--model", "model.int8.onnx", "--input", "-", "--json"], stdin=lines)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["actions"]) == 3
    r = _run(out, ["-c", NO_TORCH, "--bench", "--runs", "50", "--warmup", "5", "--json"])
    b = json.loads(r.stdout)["bench"]
    assert b["latency_median_s"] > 0 and b["how"] == "measured-host" and "power" not in b


def test_runner_choose_rewrites_deploy_json(deployed, tmp_path):
    import shutil
    out, _ = deployed
    d = tmp_path / "copy"
    shutil.copytree(str(out), str(d))
    r = _run(d, ["-c", NO_TORCH, "--choose", "--runs", "50", "--warmup", "5", "--json"])
    assert r.returncode == 0, r.stderr
    cfg = json.loads((d / "deploy.json").read_text())
    assert cfg["chosen"] == json.loads(r.stdout)["chosen"] and "device_bench" in cfg
    if not cfg["int8_allowed"]:
        assert cfg["chosen"] == "model.onnx"


def test_runner_reads_pi5_power(deployed, tmp_path):
    # vcgencmd exists only on a Pi: a stand-in prints the PMIC's line format so the parser is exercised.
    out, _ = deployed
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "vcgencmd").write_text("#!/bin/sh\necho ' VDD_CORE_A current(7)=2.00000000A'\n"
                                   "echo ' VDD_CORE_V volt(15)=0.80000000V'\necho ' EXT5V_V volt(24)=5.1V'\n")
    (fake / "vcgencmd").chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (fake, os.environ["PATH"]))
    r = subprocess.run([sys.executable, "-c", "import runner; print(runner.pmic_power_w())"], cwd=str(out),
                       env=env, capture_output=True, text=True, timeout=60)
    assert float(r.stdout) == pytest.approx(1.6)


def test_deploy_from_plain_onnx(deployed, tmp_path):
    out, _ = deployed
    rep = deploy(out / "model.onnx", "rpi5", tmp_path / "d", dict(FAST, task="cartpole"))
    assert rep.target == "rpi5" and rep.figures["int8_metric_retention"].value >= 0.99
    assert "calibration_inputs(256), no policy" in " ".join(rep.notes)


def test_bad_inputs(deployed, tmp_path):
    out, _ = deployed
    with pytest.raises(TargetError) as e:
        deploy(out / "model.onnx", "rpi9", tmp_path / "x", FAST)
    assert "rpi4" in str(e.value) and "rpi5" in str(e.value)
    with pytest.raises(TargetError, match="not a Raspberry Pi"):
        deploy(out / "model.onnx", "esp32", tmp_path / "x", FAST)
    with pytest.raises(TargetError, match="calibration"):
        deploy(out / "model.onnx", "rpi4", tmp_path / "x", FAST)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 20)
    with pytest.raises(ExportError, match="bad.onnx"):
        deploy(bad, "rpi4", tmp_path / "x", dict(FAST, task="cartpole"))
    with pytest.raises(TargetError, match="unknown option runz for target rpi4"):
        deploy(out / "model.onnx", "rpi4", tmp_path / "x", {"runz": 3})
