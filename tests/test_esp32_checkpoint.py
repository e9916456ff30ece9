"""`grpo-edge deploy --target esp32*` from a checkpoint, end to end through the real CLI: export,
calibration, the measured int8-or-16x8 choice, generated C checked on the host, the report."""
import json
import subprocess

import pytest
from conftest import cli_in
from session_cache import checkpoint as cached_checkpoint
from typer.testing import CliRunner

from grpo_edge.cli.main import app


def _deploy(tmp_path, *extra, exit_code=0):
    out = tmp_path / "esp32"
    r = CliRunner().invoke(app, ["deploy", "--target", "esp32c3", "--checkpoint", str(cached_checkpoint("cartpole")),
                                 "--out", str(out), "--option", "tflm=false", "--option", "callgrind=false", *extra])
    if exit_code == 3:            # below the quality gate (the CLI's main turns GateError into exit 3)
        from grpo_edge.targets.gate import GateError
        assert isinstance(r.exception, GateError), r.output
    else:
        assert r.exit_code == exit_code, r.output
    return json.loads((out / "report.json").read_text()), out


def test_cartpole_checkpoint_deploys_with_measured_quantization_choice(tmp_path):
    rep, out = _deploy(tmp_path)
    f, q = rep["figures"], rep["sections"]["quantization"]
    cands = {c["activations"]: c for c in q["candidates"]}
    assert cands["int8"]["agreement_calibration"] is not None
    if cands["int8"]["agreement_calibration"] < 0.99:          # the rule: 16x8 is tried only then
        assert "int16" in cands
    chosen = cands[q["chosen"]]
    assert f["activations"]["value"] == q["chosen"]
    assert all(chosen["agreement_calibration"] >= c["agreement_calibration"] for c in cands.values())
    assert f["host_bit_exact"]["value"] is True
    assert f["decision_agreement_fp32"]["value"] == chosen["agreement_eval"]
    assert f["decision_agreement_fp32"]["value"] >= 0.98
    assert f["task_metric_integer"]["value"] >= 0.98 * f["task_metric_fp32"]["value"]
    headers = list(out.rglob("cartpole_model.h"))
    assert headers, "no generated header under %s" % out
    ctype = "int16_t" if q["chosen"] == "int16" else "int8_t"
    assert "int cartpole_invoke(const %s *in, %s *out);" % (ctype, ctype) in headers[0].read_text()


def test_activations_flag_forces_a_form(tmp_path):
    """Forced int8, the CartPole policy keeps its return but not its decisions: the gate says so (exit 3)."""
    rep, out = _deploy(tmp_path, "--activations", "int8", exit_code=3)
    assert rep["figures"]["activations"]["value"] == "int8"
    assert [c["activations"] for c in rep["sections"]["quantization"]["candidates"]] == ["int8"]
    assert rep["gate"]["passed"] is False and rep["gate"]["tried"][0]["form"] == "int8"
    assert rep["figures"]["decision_agreement_fp32"]["value"] < 0.99
    rep, _ = _deploy(tmp_path, "--activations", "int8", "--min-agreement", "0")
    assert rep["gate"]["passed"] is True


@pytest.mark.parametrize("args,needle", [
    (["--target", "rpi4", "--activations", "int16"], "error: --activations applies to the esp32 targets (got --target rpi4)"),
    (["--target", "esp32", "--activations", "int4"], "error: option activations must be one of auto|int8|int16, got 'int4'"),
])
def test_bad_activations_is_one_line(args, needle, tmp_path, capsys, monkeypatch):
    from grpo_edge.cli.main import main
    monkeypatch.setattr("sys.argv", ["grpo-edge", "deploy", "--checkpoint", str(cached_checkpoint("cartpole")),
                                     "--out", str(tmp_path / "x")] + args)
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip() == needle
    assert not (tmp_path / "x" / "report.json").exists()


def test_fp32_onnx_with_calibration_deploys(tmp_path):
    """An fp32 ONNX model and a calibration set (no checkpoint): quantized and compiled like a checkpoint."""
    ckpt = str(cached_checkpoint("cartpole"))
    run = CliRunner()
    assert run.invoke(app, ["export", ckpt, "--out", str(tmp_path / "m.onnx")]).exit_code == 0
    assert run.invoke(app, ["calibrate", ckpt, "--n", "256", "--out", str(tmp_path / "c.npz")]).exit_code == 0
    out = tmp_path / "esp32"
    r = run.invoke(app, ["deploy", "--target", "esp32c3", "--onnx", str(tmp_path / "m.onnx"), "--calibration",
                         str(tmp_path / "c.npz"), "--out", str(out), "--option", "tflm=false", "--option",
                         "callgrind=false"])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["figures"]["host_bit_exact"]["value"] is True
    q = rep["sections"]["quantization"]
    chosen = next(c for c in q["candidates"] if c["activations"] == q["chosen"])
    assert chosen["agreement_calibration"] >= 0.98


def test_deploy_prints_a_short_summary_and_points_to_the_report(tmp_path):
    """The console gets what was built and where, the key figures with how each was obtained, and the way
    to the whole report; a warning (a goal missed) goes on top of report.md and to stderr."""
    from grpo_edge.report import Report
    r = cli_in(tmp_path, "deploy", "--target", "esp32c3", "--checkpoint", cached_checkpoint("cartpole"), "--out",
               tmp_path / "esp", "--option", "callgrind=false", "--option", "tflm=false")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) <= 12 and lines[0].endswith("esp/") and lines[-1].startswith("full report: ")
    assert any(l.strip().startswith("host_bit_exact: True") for l in lines)
    assert any("latency_s" in l and "ESTIMATE" in l for l in lines)
    assert lines[0].startswith("ESP32 deploy: cartpole.pt ->")          # the source checkpoint, not a file made from it
    rep_json = json.loads((tmp_path / "esp" / "report.json").read_text())
    assert rep_json["sections"]["source"].endswith("cartpole.pt") and not rep_json["sections"]["source"].startswith("/")
    readme = (tmp_path / "esp" / "README.md").read_text()           # the folder's README, its host check run
    assert "idf.py set-target esp32c3" in readme and "## In and out" in readme and "ESTIMATE" in readme
    block = readme.split("## Check the generated C on this PC", 1)[1].split("```")[1].strip().splitlines()
    run = subprocess.run(["bash", "-c", " && ".join(block)], cwd=str(tmp_path / "esp"), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "status=OK" in run.stdout, run.stdout + run.stderr
    rep = Report(title="t", warnings=["int8 keeps 0.984 of the return (goal 0.99)"])
    assert "  warning: int8 keeps 0.984" in rep.summary(tmp_path)
    assert rep.to_markdown().index("## Warnings") < rep.to_markdown().index("0.984") and rep.to_dict()["warnings"]
