"""A continuous-control policy to the ESP32 (issue 38): the InvertedDoublePendulum-v5 policy, trained by the
default recipe as a user trains it, lost its decisions in int8 (action agreement 0.715) and deployed with exit
0; its 16x8 form failed on the Gaussian mean's Clip. Now deploy chooses 16x8 by measurement, bit-exact, at the
gate; forced int8 is below the gate and exits 3 with one line. benchmarks/continuous_deploy.py runs five envs."""
import json

import pytest

from conftest import cli_in

mujoco = pytest.importorskip("mujoco", reason='MuJoCo envs need pip install "gymnasium[mujoco]" (the robots extra)')


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    d = tmp_path_factory.mktemp("idp")
    r = cli_in(d, "train", "--set", "task.name=InvertedDoublePendulum-v5", "--set", "training.steps=30",
               "--save-dir", "run")
    assert r.returncode == 0, r.stderr[-2000:]
    return d


def test_mujoco_policy_deploys_in_16x8_at_the_gate(idp):
    r = cli_in(idp, "deploy", "--target", "esp32s3", "--checkpoint", "run/best.pt", "--out", "esp",
               "--option", "tflm=false", "--option", "callgrind=false")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    rep = json.loads((idp / "esp" / "report.json").read_text())
    f = {k: v["value"] for k, v in rep["figures"].items()}
    assert rep["gate"]["passed"] and "  gate: action agreement" in r.stdout and "passed (16x8)" in r.stdout
    tried = {t["form"]: t.get("value") for t in rep["gate"]["tried"]}
    assert tried["int8"] < 0.99 <= tried["16x8"], tried               # int8 first, 16x8 by measurement
    assert f["activations"] == "int16" and f["decision_agreement_fp32"] >= 0.99
    assert f["host_bit_exact"] is True and f["rv32_bit_exact"] in (True, None)
    assert f["action_error_max_relative"] < 0.02
    assert rep["gate"]["retention"] is not None and rep["gate"]["retention_noise"] is not None
    kinds = [r["op"] for r in rep["sections"]["onnxruntime_check"]["per_op"]]
    assert kinds[-1] == "requant16"                                    # the mean's Clip, in 16x8


def test_forced_int8_is_below_the_gate_and_exits_3(idp):
    r = cli_in(idp, "deploy", "--target", "esp32c3", "--checkpoint", "run/best.pt", "--out", "esp8",
               "--option", "tflm=false", "--option", "callgrind=false", "--option", "rv32=false",
               "--activations", "int8")
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("error:")]
    assert r.returncode == 3 and len(lines) == 1, r.stderr[-2000:]
    assert "action agreement 0." in lines[0] and "--min-agreement 0." in lines[0], lines[0]
    assert (idp / "esp8" / "README.md").read_text().splitlines()[2].startswith("> **Not deployable as it is.**")
