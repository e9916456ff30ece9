"""Raspberry Pi target: deploy folder, the runner without torch, the host simulation, bad inputs."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import pi_python
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
    """python CODE_ARGS in the folder, with the python of a venv holding only numpy and onnxruntime (what
    the folder's requirements.txt installs on a Pi; conftest.pi_python)."""
    return subprocess.run([pi_python()] + code_args, cwd=str(out), input=stdin, capture_output=True,
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


def _copy(deployed, tmp_path):
    import shutil
    out, _ = deployed
    d = tmp_path / "copy"
    shutil.copytree(str(out), str(d))
    return d


def _digests(d):
    import hashlib
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir() if p.is_file()}


def test_runner_choose_writes_device_choice_and_keeps_the_manifest_true(deployed, tmp_path):
    """--choose on the device writes device_choice.json and changes no shipped file (what MANIFEST.sha256
    lists stays true); the runner's default then follows the device's choice."""
    d = _copy(deployed, tmp_path)
    before, shipped = _digests(d), (d / "deploy.json").read_text()
    r = _run(d, ["-c", NO_TORCH, "--choose", "--runs", "50", "--warmup", "5", "--json"])
    assert r.returncode == 0, r.stderr
    choice = json.loads((d / "device_choice.json").read_text())
    assert choice["chosen"] == json.loads(r.stdout)["chosen"] and "device_bench" in choice
    after = _digests(d)
    assert set(after) - set(before) == {"device_choice.json"} and all(after[k] == v for k, v in before.items())
    if not json.loads(shipped)["int8_allowed"]:
        assert choice["chosen"] == "model.onnx"
    choice["chosen"] = "model.int8.onnx"          # the runner's default follows the device's choice
    (d / "device_choice.json").write_text(json.dumps(choice))
    default = _run(d, ["-c", NO_TORCH, "--input", "sample_inputs.npy", "--json"])
    named = _run(d, ["-c", NO_TORCH, "--model", "model.int8.onnx", "--input", "sample_inputs.npy", "--json"])
    assert json.loads(default.stdout)["outputs"] == json.loads(named.stdout)["outputs"]


def _error_line(r):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: runner: "), r.stderr
    return lines[0]


def test_runner_bad_inputs_are_one_line_each(deployed, tmp_path):
    """Every input or flag the runner cannot take: one `error:` line naming it, exit 2, no traceback."""
    d = _copy(deployed, tmp_path)
    np.save(d / "wide.npy", np.zeros((3, 5), np.float32))
    np.save(d / "nan.npy", np.array([[0, 0, 0, 0], [0, np.nan, 0, 0]], np.float32))
    np.save(d / "strings.npy", np.array([["a", "b", "c", "d"]]))
    np.save(d / "empty.npy", np.zeros((0, 4), np.float32))
    (d / "bad.csv").write_text("0.1,0.2,0.3,0.4\n0.1,abc,0.3,0.4\n")
    (d / "ragged.txt").write_text("0.1 0.2 0.3 0.4\n0.1 0.2\n")
    (d / "pickle.npy").write_bytes(b"\x93NUMPY garbage")
    cases = [(["--input", "missing.npy"], None, "input file not found: missing.npy"),
             (["--input", "wide.npy"], None, "the model takes (N, 4): 4 values per sample"),
             (["--input", "nan.npy"], None, "sample 1 has NaN or inf values"),
             (["--input", "strings.npy"], None, "the model takes numbers"),
             (["--input", "empty.npy"], None, "holds no samples"),
             (["--input", "bad.csv"], None, "bad.csv line 2: '0.1,abc,0.3,0.4' is not a list of numbers"),
             (["--input", "ragged.txt"], None, "ragged.txt line 2 has 2 values, the first sample 4"),
             (["--input", "pickle.npy"], None, "pickle.npy is not a .npy / .npz array"),
             (["--input", "-"], "abc\n", "stdin line 1: 'abc' is not a list of numbers"),
             (["--input", "-"], "", "no input samples in stdin"),
             (["--input", "-"], "1 2 3 inf\n", "sample 0 has NaN or inf values"),
             (["--bench", "--runs", "0"], None, "--runs must be >= 1 (got 0)"),
             (["--bench", "--runs", "-5"], None, "--runs must be >= 1 (got -5)"),
             (["--threads", "0"], None, "--threads must be >= 1"),
             (["--runs", "many"], None, "argument --runs: invalid int value: 'many'"),
             (["--model", "nope.onnx", "--input", "sample_inputs.npy"], None, "model not found")]
    for args, stdin, want in cases:
        line = _error_line(_run(d, ["-c", NO_TORCH] + args, stdin=stdin))
        assert want in line, (args, line)


def test_runner_casts_what_it_can_without_loss(deployed, tmp_path):
    """float64 (numpy's default), int64, one sample without the batch axis, rows flattened, a CSV file: the
    same outputs as the float32 batch."""
    d = _copy(deployed, tmp_path)
    x = np.load(str(d / "sample_inputs.npy"))[:4]
    want = json.loads(_run(d, ["-c", NO_TORCH, "--model", "model.onnx", "--input", "sample_inputs.npy",
                               "--json"]).stdout)["outputs"][:4]
    np.save(d / "f64.npy", x.astype(np.float64))
    np.save(d / "one.npy", x[0].astype(np.float64))
    np.save(d / "ints.npy", np.array([[0, 1, -1, 2]], np.int64))
    (d / "x.csv").write_text("\n".join(",".join("%.9g" % v for v in row) for row in x) + "\n")
    for name, rows in (("f64.npy", want), ("one.npy", want[:1]), ("x.csv", want)):
        r = _run(d, ["-c", NO_TORCH, "--model", "model.onnx", "--input", name, "--json"])
        assert r.returncode == 0, (name, r.stderr)
        np.testing.assert_allclose(json.loads(r.stdout)["outputs"], rows, rtol=1e-5, atol=1e-6)
    r = _run(d, ["-c", NO_TORCH, "--model", "model.onnx", "--input", "ints.npy", "--json"])
    assert r.returncode == 0 and len(json.loads(r.stdout)["actions"]) == 1, r.stderr


def test_runner_check_compares_the_folder_with_its_golden_vectors(deployed, tmp_path):
    """--check: both models on sample_inputs.npy vs expected_outputs.npy, exit 0; a changed golden vector
    makes the fp32 comparison fail, exit 1."""
    d = _copy(deployed, tmp_path)
    r = _run(d, ["-c", NO_TORCH, "--check", "--json"])
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    assert res["model.onnx"]["pass"] and res["model.onnx"]["max_abs_diff"] < 1e-4
    assert res["model.int8.onnx"]["pass"] and res["model.int8.onnx"]["samples"] == 100    # held out of calibration
    y = np.load(str(d / "expected_outputs.npy"))
    np.save(d / "expected_outputs.npy", y + 0.01)
    r = _run(d, ["-c", NO_TORCH, "--check", "--json"])
    assert r.returncode == 1 and not json.loads(r.stdout)["model.onnx"]["pass"]


def test_runner_check_prints_pass_per_model_against_deploy_json(deployed, tmp_path):
    """python3 runner.py --check as the Pi user runs it: one PASS line per model with the measured figure and
    the threshold deploy.json sets (fp32: tolerance_fp32; int8: int8_check_agreement less 0.05), exit 0; the
    README states the same thresholds."""
    d = _copy(deployed, tmp_path)
    cfg = json.loads((d / "deploy.json").read_text())
    r = _run(d, ["runner.py", "--check"])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    fp32 = [ln for ln in lines if ln.startswith("PASS fp32 (model.onnx): max_abs_diff ")]
    assert len(fp32) == 1 and "threshold <= %.4g (deploy.json tolerance_fp32)" % cfg["tolerance_fp32"] in fp32[0], lines
    limit = max(0.0, cfg["int8_check_agreement"] - 0.05)
    int8 = [ln for ln in lines if ln.startswith("PASS int8 (model.int8.onnx): agreement ")]
    assert len(int8) == 1 and "threshold >= %.4g (deploy.json int8_check_agreement" % limit in int8[0], lines
    assert "the same argmax" in int8[0] and "100 samples" in int8[0] and "max_abs_diff" in int8[0]
    assert lines[-1].startswith("check: PASS")
    readme = (d / "README.md").read_text()
    assert "at most %.4g (deploy.json tolerance_fp32)" % cfg["tolerance_fp32"] in readme
    assert "at least %.4g (deploy.json int8_check_agreement" % limit in readme and "within 5%" not in readme


def test_runner_check_fails_when_deploy_json_expects_more(deployed, tmp_path):
    """deploy.json's int8 expectation tightened past what int8 can reach: --check prints a FAIL line naming
    model.int8.onnx with its figure and threshold, fp32 still PASSes, the verdict names the model, exit 1."""
    d = _copy(deployed, tmp_path)
    cfg = json.loads((d / "deploy.json").read_text())
    cfg["int8_check_agreement"] = 1.2                       # int8 must now agree on >= 1.15 of the samples
    (d / "deploy.json").write_text(json.dumps(cfg))
    r = _run(d, ["runner.py", "--check"])
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    fail = [ln for ln in lines if ln.startswith("FAIL int8 (model.int8.onnx): agreement ")]
    assert len(fail) == 1 and "threshold >= 1.15 (deploy.json int8_check_agreement 1.2" in fail[0], lines
    assert any(ln.startswith("PASS fp32 (model.onnx)") for ln in lines)
    assert lines[-1].startswith("check: FAIL") and "model.int8.onnx" in lines[-1]


def test_runner_refuses_inputs_far_outside_the_training_range(deployed, tmp_path):
    """deploy.json's input range (the task's: digits' pixels / 16 in [0, 1]): values far outside it are one
    line saying how to prepare them; --no-range-check runs them anyway."""
    d = _copy(deployed, tmp_path)
    cfg = json.loads((d / "deploy.json").read_text())
    assert "input" in cfg and cfg["input"]["layout"][1:] == [4]
    cfg["input"].update(range=[0.0, 1.0], preprocess="pixels / 16")
    (d / "deploy.json").write_text(json.dumps(cfg))
    np.save(d / "raw.npy", np.full((2, 4), 16.0, np.float32))
    line = _error_line(_run(d, ["-c", NO_TORCH, "--input", "raw.npy"]))
    assert "values reach [16, 16], but the model was trained on [0, 1] (pixels / 16)" in line
    assert _run(d, ["-c", NO_TORCH, "--input", "raw.npy", "--no-range-check"]).returncode == 0


def test_runner_reads_pi5_power(deployed, tmp_path):
    # vcgencmd exists only on a Pi: a stand-in prints the PMIC's line format so the parser is exercised.
    out, _ = deployed
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "vcgencmd").write_text("#!/bin/sh\necho ' VDD_CORE_A current(7)=2.00000000A'\n"
                                   "echo ' VDD_CORE_V volt(15)=0.80000000V'\necho ' EXT5V_V volt(24)=5.1V'\n")
    (fake / "vcgencmd").chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (fake, os.environ["PATH"]))
    r = subprocess.run([pi_python(), "-c", "import runner; print(runner.pmic_power_w())"], cwd=str(out),
                       env=env, capture_output=True, text=True, timeout=60)
    assert float(r.stdout) == pytest.approx(1.6)


def test_deploy_from_plain_onnx(deployed, tmp_path):
    out, _ = deployed
    rep = deploy(out / "model.onnx", "rpi5", tmp_path / "d", dict(FAST, task="cartpole"))
    assert rep.target == "rpi5" and rep.figures["int8_metric_retention"].value >= 0.99
    assert "calibration_inputs(256), no policy" in " ".join(rep.notes)


def test_deploy_an_onnx_exported_with_a_fixed_batch_of_one(tmp_path):
    """torch.onnx.export fixes the batch at 1 unless told otherwise: deploy (the simulation ran 64 samples at
    once: an onnxruntime traceback) and the folder's runner take such a model, a batch of that size at a time."""
    import warnings
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2), torch.nn.LogSoftmax(-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m.eval(), (torch.randn(1, 4),), str(tmp_path / "m.onnx"), opset_version=17, dynamo=False,
                          input_names=["obs"], output_names=["logp"])
    x = np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32)
    np.save(tmp_path / "c.npy", x)
    out = tmp_path / "d"
    rep = deploy(tmp_path / "m.onnx", "rpi4", out, dict(FAST, calibration=str(tmp_path / "c.npy")))
    assert rep.figures["sim_fp32_max_abs_diff"].value < 1e-5
    np.save(tmp_path / "five.npy", x[:5])
    r = _run(out, ["runner.py", "--model", "model.onnx", "--input", str(tmp_path / "five.npy"), "--json"])
    assert r.returncode == 0, r.stderr
    with torch.no_grad():
        want = m(torch.as_tensor(x[:5])).numpy()
    assert np.abs(np.asarray(json.loads(r.stdout)["outputs"]) - want).max() < 1e-5
    r = _run(out, ["runner.py", "--check"])
    assert r.returncode == 0 and sum(ln.startswith("PASS ") for ln in r.stdout.splitlines()) == 2, r.stdout + r.stderr


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


def test_digits_folder_says_how_to_prepare_raw_pixels(tmp_path):
    """The digits folder, as a scikit-learn user feeds it: load_digits().images (float64, (N, 8, 8), pixels
    0-16) is refused in one line that says pixels / 16; images / 16 in the same layout run (cast, reshaped
    to (N, 1, 8, 8)) and classify as the checkpoint does."""
    from sklearn.datasets import load_digits
    out = tmp_path / "digits"
    deploy(cached_checkpoint("digits"), "rpi4", out, FAST)
    cfg = json.loads((out / "deploy.json").read_text())
    assert cfg["input"]["range"] == [0.0, 1.0] and "divided by 16" in cfg["input"]["preprocess"]
    d = load_digits()
    np.save(out / "raw.npy", d.images[:200])
    np.save(out / "scaled.npy", d.images[:200] / 16.0)
    line = _error_line(_run(out, ["-c", NO_TORCH, "--model", "model.onnx", "--input", "raw.npy"]))
    assert "trained on [0, 1] (scikit-learn's 8x8 digits: pixel values 0-16 divided by 16" in line
    r = _run(out, ["-c", NO_TORCH, "--model", "model.onnx", "--input", "scaled.npy", "--json"])
    assert r.returncode == 0, r.stderr
    assert np.mean(np.asarray(json.loads(r.stdout)["actions"]) == d.target[:200]) > 0.8
    readme = (out / "README.md").read_text()                      # its README says so, and runs as it says
    assert "(N, 1, 8, 8)" in readme and "divided by 16" in readme and "the action to take (0 .. 9)" in readme
    run_readme(out)


def readme_commands(text):
    """The shell lines of a README's code blocks that run on the device (not the venv / pip set-up)."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and line.strip() and not line.startswith(("python3 -m venv", ". venv/", "pip install")):
            lines.append(line)
    return lines


def run_readme(folder):
    """Every command of folder/README.md, as the device user runs it (python3: the numpy + onnxruntime
    venv); -> {command: CompletedProcess}."""
    text = (folder / "README.md").read_text()
    assert "pip install -r requirements.txt" in text
    done = {}
    for cmd in readme_commands(text):
        if cmd.startswith("sha256sum") and not (folder / "MANIFEST.sha256").exists():
            continue                     # the manifest is the CLI's (deploy() alone writes none)
        r = subprocess.run(["bash", "-c", cmd.replace("python3 runner.py", pi_python() + " runner.py")],
                           cwd=str(folder), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (cmd, r.stdout[-500:], r.stderr[-500:])
        done[cmd] = r
    return done


def test_the_folder_readme_runs_as_it_says(tmp_path):
    """grpo-edge deploy --target rpi4 of the cartpole checkpoint: README.md says how to install, check, run,
    what goes in and comes out, how to measure; every command in it runs in a venv with only numpy and
    onnxruntime (the manifest check with sha256sum too); deploy.json names the checkpoint relative to the
    folder."""
    from conftest import cli_in
    ckpt = cached_checkpoint("cartpole")
    out = tmp_path / "pi"
    r = cli_in(tmp_path, "deploy", "--target", "rpi4", "--checkpoint", ckpt, "--out", out, "--option", "runs=200",
               "--option", "warmup=20", "--option", "eval_n=5", "--option", "calibration_samples=256")
    assert r.returncode == 0, r.stderr
    text = (out / "README.md").read_text()
    for want in ("## Install", "## Check the folder", "## Run", "## Inputs", "(N, 4), float32", "## Outputs",
                 "the action to take (0 .. 1)", "## Which model runs", "## Measure", "estimates"):
        assert want in text, want
    cfg = json.loads((out / "deploy.json").read_text())
    assert not os.path.isabs(cfg["source"]) and (out / cfg["source"]).resolve() == Path(ckpt).resolve()
    done = run_readme(out)
    assert any(c.startswith("sha256sum") for c in done) and any("--check" in c for c in done)
    assert any(c.startswith("echo") for c in done) and any("--bench" in c for c in done)


def test_docs_list_every_pi_option():
    """docs/rpi.md's options table names every key `deploy --option` takes for a Pi, and no other."""
    import re
    from grpo_edge.targets.rpi import OPTIONS
    text = (Path(__file__).resolve().parents[1] / "docs" / "rpi.md").read_text()
    table = text.split("## Options", 1)[1]
    named = set()
    for row in (r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| key")):
        named |= set(re.findall(r"[a-z_0-9]+", row.split("|")[1]))
    assert named == set(OPTIONS), named ^ set(OPTIONS)
