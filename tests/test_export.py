"""torch2onnx parity per architecture, onnx2int8 keeps the task metric, calibration sets, bad inputs."""
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from session_cache import checkpoint as cached_checkpoint
from grpo_edge.core.checkpoint import load_policy
from grpo_edge.core.models import build_model
from grpo_edge.errors import CheckpointError, ExportError
from grpo_edge.export.calibration import (builtin_calibration, calibration_meta, checkpoint2calibration,
                                          load_calibration)
from grpo_edge.export.onnx2int8 import onnx2int8
from grpo_edge.export.onnx_utils import count_macs, io_specs, load_onnx
from grpo_edge.tasks import task_from_state
from grpo_edge.export.torch2onnx import torch2onnx

ARCHS = {
    "mlp": dict(obs_dim=4, n_actions=2),
    "lite-resnet": dict(in_channels=1, n_classes=10, image_size=8, channels=[8, 16, 32], blocks=[1, 1, 1]),
    "micro-gpt": dict(vocab_size=20, d_model=32, n_layer=2, n_head=4, max_len=32),
    "tiny-transformer": dict(vocab_size=20, d_model=32, nhead=4, num_layers=2, dim_feedforward=64, max_len=32),
}


@pytest.fixture(scope="module")
def cartpole_onnx(tmp_path_factory):
    model, state = load_policy(cached_checkpoint("cartpole"))
    path = tmp_path_factory.mktemp("cp") / "model.onnx"
    torch2onnx(model, path)
    return path, model, state


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_export_parity_per_architecture(arch, tmp_path):
    torch.manual_seed(0)
    model = build_model(arch, **ARCHS[arch])
    info = torch2onnx(model, tmp_path / "model.onnx")
    assert info["opset"] == 17 and info["max_abs_diff"] < 1e-4
    expected = {"encoder", "decoder_step"} if arch == "tiny-transformer" else {"model"}
    assert set(info["files"]) == expected
    for key, f in info["files"].items():
        p = Path(f["path"])
        assert p.exists() and f["opset"] == 17 and f["max_abs_diff"] < 1e-4
        assert f["simplified"].startswith(("onnxslim", "onnxsim"))
        assert f["macs"] > 0
        # dynamic batch: the first input's batch axis is symbolic
        first = f["inputs"][0]["shape"]
        assert any(isinstance(d, str) for d in first)
    # single-file ONNX: no external data next to it
    assert not list(tmp_path.glob("*.data"))
    if arch == "tiny-transformer":
        assert (tmp_path / "model.encoder.onnx").exists() and (tmp_path / "model.decoder_step.onnx").exists()


def test_mlp_mac_count_is_exact(tmp_path):
    model = build_model("mlp", obs_dim=4, n_actions=2, hidden=64, num_layers=3)
    torch2onnx(model, tmp_path / "m.onnx", check=False)
    assert count_macs(load_onnx(tmp_path / "m.onnx")) == 4 * 64 + 64 * 64 + 64 * 2


def test_export_rejects_a_plain_module(tmp_path):
    with pytest.raises(ExportError, match="export_spec"):
        torch2onnx(torch.nn.Linear(2, 2), tmp_path / "x.onnx")


def test_int8_keeps_the_task_metric(cartpole_onnx, tmp_path):
    from grpo_edge.export.evaluate import onnx_policy, task_metric
    path, model, state = cartpole_onnx
    task = task_from_state(state)
    calib = task.calibration_inputs(512, policy=model)
    info = onnx2int8(path, calib, tmp_path / "model.int8.onnx")
    assert info["num_samples"] == 512 and not info["warnings"]
    assert "per-channel" in info["format"]
    m8 = load_onnx(tmp_path / "model.int8.onnx")
    ops = {n.op_type for n in m8.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    # weights: int8, symmetric (zero point 0), per output channel
    w_zp = [t for t in m8.graph.initializer if t.name.endswith("zero_point") and t.data_type == 3 and len(t.dims) == 1]
    assert w_zp and all(not any(np.frombuffer(t.raw_data, np.int8)) for t in w_zp)
    fp32 = task_metric(task, onnx_policy(path), n=5)
    int8 = task_metric(task, onnx_policy(tmp_path / "model.int8.onnx", reference=True), n=5)
    assert fp32 >= 475 and int8 >= 0.99 * fp32
    # A balancing policy is near-indifferent in many states it visits: int8 flips some decisions there
    # (the return holds), int16 activations with GPTQ-rounded weights keep nearly all of them.
    a8 = info["errors"]["reference"]["argmax_agreement"]
    info16 = onnx2int8(path, calib, tmp_path / "model.a16w8.onnx", activations="int16", weight_rounding="gptq")
    a16 = info16["errors"]["reference"]["argmax_agreement"]
    assert a8 >= 0.7 and a16 >= 0.98 and a16 > a8


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_other_calibration_methods(cartpole_onnx, tmp_path, method):
    info = onnx2int8(cartpole_onnx[0], str(builtin_calibration("cartpole")), tmp_path / "q.onnx", method=method)
    assert info["method"] == method and info["errors"]["reference"]["argmax_agreement"] > 0.8


def test_builtin_calibration_sets():
    for task, shape in (("cartpole", (4,)), ("digits", (1, 8, 8))):
        p = builtin_calibration(task)
        assert p is not None and p.suffix == ".npz"
        arrays = load_calibration(p)
        (x,) = arrays.values()
        assert x.dtype == np.float32 and x.shape[1:] == shape and len(x) >= 100
        assert calibration_meta(p)["task"] == task


def test_checkpoint2calibration(tmp_path):
    info = checkpoint2calibration(cached_checkpoint("cartpole"), tmp_path / "c.npz", n=128)
    assert info["shapes"] == {"obs": [128, 4]} and "checkpoint policy" in info["policy"]
    assert calibration_meta(tmp_path / "c.npz")["n"] == 128


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_corrupt_and_non_onnx_files(cartpole_onnx, tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(cartpole_onnx[0].read_bytes()[:300])
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 10)
    for p in (bad, text, tmp_path / "missing.onnx"):
        with pytest.raises(ExportError) as e:
            onnx2int8(p, np.zeros((200, 4), np.float32), tmp_path / "out.onnx")
        assert p.name in _one_line(e)


def test_calibration_shape_and_dtype_errors(cartpole_onnx, tmp_path):
    path = cartpole_onnx[0]
    with pytest.raises(ExportError) as e:
        onnx2int8(path, np.zeros((200, 5), np.float32), tmp_path / "o.onnx")
    msg = _one_line(e)
    assert "expected (batch, 4) float32" in msg and "found (200, 5) float32" in msg and "model.onnx" in msg
    with pytest.raises(ExportError) as e:
        onnx2int8(path, np.zeros((200, 4), np.float64), tmp_path / "o.onnx")
    assert "float64" in _one_line(e)
    np.savez(tmp_path / "wrong.npz", a=np.zeros((200, 4), np.float32), b=np.zeros((200, 4), np.float32))
    with pytest.raises(ExportError) as e:
        onnx2int8(path, tmp_path / "wrong.npz", tmp_path / "o.onnx")
    assert "wrong.npz" in _one_line(e)
    (tmp_path / "junk.npz").write_bytes(b"not numpy")
    with pytest.raises(ExportError) as e:
        onnx2int8(path, tmp_path / "junk.npz", tmp_path / "o.onnx")
    assert "junk.npz" in _one_line(e)
    with pytest.raises(ExportError, match="minmax"):
        onnx2int8(path, np.zeros((200, 4), np.float32), tmp_path / "o.onnx", method="kl")


def test_few_calibration_samples_warn(cartpole_onnx, tmp_path):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        info = onnx2int8(cartpole_onnx[0], np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32),
                         tmp_path / "o.onnx")
    assert info["warnings"] and any("20 calibration samples" in str(x.message) for x in w)


def test_checkpoint_without_a_known_task(tmp_path):
    with pytest.raises(CheckpointError, match="no-such-task"):
        task_from_state({"task": "no-such-task", "config": {}})


def test_io_specs(cartpole_onnx):
    (spec,) = io_specs(load_onnx(cartpole_onnx[0]))
    assert spec == {"name": "obs", "shape": ["batch", 4], "dtype": "float32"}


def test_quantize_never_reports_a_degenerate_calibration_as_perfect(cartpole_onnx, tmp_path):
    """`grpo-edge quantize` (issue 30): agreement measured on held-out samples, or on the task's states with
    --task; 512 all-zero or all-1e30 calibration samples are warnings, and on real CartPole states their
    int8 models' agreement is reported with a warning, not as 1.0; the input is never overwritten; a
    quantized input is one line."""
    import json
    from conftest import cli_in
    cartpole_onnx = cartpole_onnx[0]
    np.savez(tmp_path / "zeros.npz", obs=np.zeros((512, 4), np.float32))
    np.savez(tmp_path / "big.npz", obs=np.full((512, 4), 1e30, np.float32))
    r = cli_in(tmp_path, "quantize", cartpole_onnx, "--calibration", tmp_path / "zeros.npz", "--out", tmp_path / "z.onnx")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["evaluated_on"].startswith("102 held-out samples of") and "not used to calibrate" in info["evaluated_on"]
    assert "input 'obs' is constant (every value 0)" in r.stderr
    for calib, more in (("zeros.npz", "constant"), ("big.npz", "reaches 1e+30")):
        r = cli_in(tmp_path, "quantize", cartpole_onnx, "--calibration", tmp_path / calib, "--out", tmp_path / "q.onnx",
                   "--task", "cartpole")
        info = json.loads(r.stdout)
        agree = info["errors"]["reference"]["argmax_agreement_clear"]
        assert r.returncode == 0 and agree < 0.99 and info["evaluated_on"] == "512 inputs of task cartpole (not the calibration set)"
        assert more in r.stderr and ("int8 agrees with fp32 on %.1f%% of the decisions" % (100 * agree)) in r.stderr
    before = Path(cartpole_onnx).read_bytes()
    r = cli_in(tmp_path, "quantize", cartpole_onnx, "--calibration", tmp_path / "zeros.npz", "--out", cartpole_onnx)
    assert r.returncode == 2 and "is the input model" in r.stderr and Path(cartpole_onnx).read_bytes() == before
    r = cli_in(tmp_path, "quantize", tmp_path / "q.onnx", "--calibration", tmp_path / "zeros.npz", "--out", tmp_path / "qq.onnx")
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("error")]
    assert r.returncode == 2 and len(lines) == 1 and "is already quantized" in lines[0] and not (tmp_path / "qq.onnx").exists()


def test_quantize_bad_flags_and_a_task_of_another_model_are_one_line(cartpole_onnx, tmp_path):
    """--task whose states do not fit the model, --holdout and --min-agreement out of range: one error
    line, exit 2, nothing written."""
    from conftest import cli_in, one_error_line
    np.savez(tmp_path / "c.npz", obs=np.random.default_rng(0).normal(size=(128, 4)).astype(np.float32))
    base = ["quantize", cartpole_onnx[0], "--calibration", tmp_path / "c.npz", "--out", tmp_path / "q.onnx"]
    for extra, want in ((["--task", "digits"], "evaluation inputs of task digits does not fit"),
                        (["--holdout", "2"], "--holdout"), (["--min-agreement", "1.5"], "--min-agreement")):
        assert want in one_error_line(cli_in(tmp_path, *(base + extra)))
        assert not (tmp_path / "q.onnx").exists()
