"""The quality gate of every deploy (issue 38, targets/gate.py): an artifact below its threshold exits 3 with one
line (the figure, the threshold, what was tried, the flag that accepts it), the folder is still written and its
README and report open with the fact; the console summary always shows the gate; bad thresholds and calibration
too small to measure the gate are one line, exit 2.

The model under test is a real torch MLP exported by torch.onnx.export whose two logits are nearly tied (the
second row of the last layer is the first plus 0.01% noise): int8 flips many of its decisions, fp32 none."""
import json

import numpy as np
import pytest

from conftest import cli_in, one_error_line
from grpo_edge.errors import GrpoEdgeError, TargetError
from grpo_edge.targets import gate


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    import torch
    d = tmp_path_factory.mktemp("gate")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    with torch.no_grad():
        m[2].weight[1] = m[2].weight[0] + 1e-4 * torch.randn(16)
        m[2].bias[1] = m[2].bias[0]
    torch.onnx.export(m, (torch.zeros(1, 8),), str(d / "tied.onnx"), input_names=["x"], output_names=["y"],
                      dynamo=False, dynamic_axes={"x": {0: "batch"}})
    rng = np.random.default_rng(0)
    np.save(d / "calib.npy", rng.normal(size=(500, 8)).astype(np.float32))
    np.save(d / "small.npy", rng.normal(size=(150, 8)).astype(np.float32))
    return d


def _gate_exit(r):
    """The one error line of a deploy below its gate (exit 3), after the summary on stdout."""
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(("device:", "note:", "warning:"))]
    assert r.returncode == 3, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr and len(lines) == 1 and lines[0].startswith("error: below the quality gate: ")
    return lines[0]


def _opens_with_banner(path, line):
    text = path.read_text().splitlines()
    body = [ln for ln in text[1:] if ln.strip()]          # after the title
    assert body[0].startswith("> **Not deployable as it is.**"), (path, body[:2])
    assert line.replace("error: ", "") in body[0], (line, body[0])


def test_esp32_below_gate_exits_3_with_one_line_and_writes_the_folder(tied):
    r = cli_in(tied, "deploy", "--target", "esp32c3", "--onnx", "tied.onnx", "--calibration", "calib.npy",
               "--out", "esp", "--option", "rv32=false", "--option", "tflm=false")
    line = _gate_exit(r)
    assert "decision agreement 0." in line and "< 0.99" in line and "held out of calibration" in line, line
    assert "tried: int8 0." in line and "16x8" in line, line          # each form tried, and why it failed
    floor = line.rsplit("--min-agreement ", 1)[1]
    assert float(floor) < 0.99, line
    assert "  gate: below the quality gate" in r.stdout            # the summary shows the gate first
    _opens_with_banner(tied / "esp" / "README.md", line)
    _opens_with_banner(tied / "esp" / "report.md", line)
    # the flag with the figure the line names accepts it: exit 0, the gate line says passed
    ok = cli_in(tied, "deploy", "--target", "esp32c3", "--onnx", "tied.onnx", "--calibration", "calib.npy",
                "--out", "esp_ok", "--option", "rv32=false", "--option", "tflm=false", "--min-agreement", floor)
    assert ok.returncode == 0, ok.stderr[-1500:]
    assert ("  gate: decision agreement %s" % line.split("decision agreement ")[1].split(" ")[0]) in ok.stdout
    assert ">= %s: passed (" % float(floor) in ok.stdout
    assert "Not deployable" not in (tied / "esp_ok" / "README.md").read_text()


def test_jetson_int8_and_fp16_below_gate_exit_3_and_fp32_is_the_model(tied):
    r = cli_in(tied, "deploy", "--target", "jetson-orin", "--onnx", "tied.onnx", "--calibration", "calib.npy",
               "--precision", "int8", "--out", "jet")
    line = _gate_exit(r)
    assert "agreement 0." in line and "held-out" in line and "--precision" in line and "--min-agreement 0." in line
    cfg = json.loads((tied / "jet" / "deploy.json").read_text())
    assert cfg["quality_gate"]["passed"] is False and cfg["quality_gate"]["line"] in line
    _opens_with_banner(tied / "jet" / "README.md", line)
    r16 = cli_in(tied, "deploy", "--target", "jetson-orin", "--onnx", "tied.onnx", "--calibration", "calib.npy",
                 "--precision", "fp16", "--out", "jet16")            # logits this close are lost in fp16 too
    assert "tried: fp16 engine 0." in _gate_exit(r16) and "fp32 / int8 not tried" in r16.stderr
    ok = cli_in(tied, "deploy", "--target", "jetson-orin", "--onnx", "tied.onnx", "--calibration", "calib.npy",
                "--precision", "fp32", "--out", "jet32")
    assert ok.returncode == 0, ok.stderr[-1500:]
    assert "  gate: not measured (on no inputs: an fp32 engine runs the model as it is)" in ok.stdout


def test_pi_keeps_fp32_when_int8_is_below_gate_and_says_so(tied):
    r = cli_in(tied, "deploy", "--target", "rpi5", "--onnx", "tied.onnx", "--calibration", "calib.npy", "--out", "pi")
    assert r.returncode == 0, r.stderr[-1500:]
    assert "  gate: agreement 1.0000 (on 100 sample inputs" in r.stdout and "passed (model.onnx (fp32))" in r.stdout
    cfg = json.loads((tied / "pi" / "deploy.json").read_text())
    assert cfg["chosen"] == "model.onnx" and cfg["why"].startswith("no task metric to check int8 against"), cfg["why"]
    int8 = json.loads((tied / "pi" / "report.json").read_text())["gate"]["tried"][0]
    assert int8["form"] == "int8" and int8["value"] < 0.99           # measured, and not what the folder runs
    held = np.load(tied / "pi" / "sample_inputs.npy")            # held out of the calibration, not its head
    calib = np.load(tied / "calib.npy")
    assert len(held) == 100 and not np.array_equal(held, calib[:100])


@pytest.mark.parametrize("target", ["esp32c3", "rpi5", "jetson-orin"])
def test_bad_thresholds_and_small_calibration_are_one_line(tied, target):
    base = ["deploy", "--target", target, "--onnx", "tied.onnx", "--out", "bad_" + target]
    if target == "jetson-orin":
        base += ["--precision", "int8"]
    assert "--min-agreement" in one_error_line(cli_in(tied, *base, "--calibration", "calib.npy", "--min-agreement", "2"))
    assert "--min-retention" in one_error_line(cli_in(tied, *base, "--calibration", "calib.npy", "--min-retention", "-1"))
    assert "--min-agreement" in one_error_line(cli_in(tied, *base, "--calibration", "calib.npy", "--min-agreement"))
    line = one_error_line(cli_in(tied, *base, "--calibration", "small.npy"))
    assert "small.npy has 150 inputs" in line and "at least 200" in line, line
    assert not (tied / ("bad_" + target)).exists()


def test_python_api_raises_gate_error_carrying_the_report(tied, tmp_path):
    from grpo_edge.targets import deploy
    with pytest.raises(gate.GateError) as e:
        deploy("esp32c3", onnx=str(tied / "tied.onnx"), out_dir=str(tmp_path / "api"),
               options={"calibration": str(tied / "calib.npy"), "rv32": False, "tflm": False, "callgrind": False})
    assert e.value.exit_code == 3 and e.value.report.gate["passed"] is False
    assert e.value.report.summary(tmp_path / "api").splitlines()[1].startswith("  gate: below the quality gate")
    with pytest.raises(GrpoEdgeError, match="min_agreement must be in 0..1"):
        deploy("esp32c3", onnx=str(tied / "tied.onnx"), out_dir=str(tmp_path / "api2"),
               options={"calibration": str(tied / "calib.npy"), "min_agreement": 1.5})


def test_gate_decides_and_words_it():
    g = gate.decide("decision agreement", 0.715, 0.99, 1000, "task states", [{"form": "int8", "value": 0.715},
                    {"form": "16x8", "error": "op clip at node '/Clip' has no int16 (16x8) kernel here"}])
    assert not g["passed"] and g["flags"] == ["--min-agreement"]
    assert g["line"] == ("below the quality gate: decision agreement 0.7150 < 0.99 (on 1000 task states); tried: "
                         "int8 0.7150; 16x8 failed (op clip at node '/Clip' has no int16 (16x8) kernel here); to "
                         "deploy it anyway: --min-agreement 0.71")
    assert g["banner"].startswith("> **Not deployable as it is.**")
    ok = gate.decide("action agreement", 0.995, 0.99, 500, "states", chosen="int8", retention=0.97)
    assert not ok["passed"] and ok["flags"] == ["--min-retention"] and "--min-retention 0.97" in ok["line"]
    assert gate.decide("x", 1.0, 0.99, 10, "y", chosen="int8")["line"] == "x 1.0000 (on 10 y) >= 0.99: passed (int8)"
    assert gate.decide("x", None, 0.99, 0, "inputs")["passed"]          # not measured is said, not failed


def test_return_retention_and_hold_out():
    assert gate.return_retention(398.5, 460.3) == pytest.approx(1 - 61.8 / 460.3)
    assert gate.return_retention(-160.0, -150.0) == pytest.approx(1 - 10 / 150)   # a ratio would say 1.07
    assert gate.return_retention(500.0, 460.0) == 1.0
    keep, held = gate.hold_out(1000, 0.99, "c.npy")
    assert len(held) == 200 and len(keep) == 800 and not set(keep) & set(held)
    assert len(gate.hold_out(200, 0.99, "c.npy")[1]) == 100
    keep, held = gate.hold_out(50, 0.0, "c.npy")
    assert held is None and len(keep) == 50
    for n in (1, 128, 400, 512, 1000):
        m = gate.with_held_out(n)
        assert len(gate.hold_out(m, 0.99, "c")[0]) == max(n, 100), n
    with pytest.raises(TargetError, match="c.npy has 199 inputs"):
        gate.hold_out(199, 0.5, "c.npy")
    with pytest.raises(Exception, match="min_agreement must be in 0..1"):
        gate.check_threshold("min_agreement", 1.01)
