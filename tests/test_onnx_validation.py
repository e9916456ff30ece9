"""Export-side inputs are checked before any work starts: calibration sets (shape, dtype, finite values)
and quantized models (finite, positive Q/DQ scales). Through the real CLI: exit 2, one `error:` line naming
the file, no traceback, no output file."""
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from grpo_edge.errors import ExportError
from grpo_edge.export.onnx2int8 import onnx2int8
from grpo_edge.export.onnx_utils import load_onnx
from grpo_edge.export.torch2onnx import torch2onnx


@pytest.fixture(scope="module")
def fp32(tmp_path_factory):
    from grpo_edge.core.models.mlp import MLPPolicy
    d = tmp_path_factory.mktemp("val")
    torch.manual_seed(0)
    torch2onnx(MLPPolicy(4, 2, hidden=16, num_layers=2, activation="tanh").eval(), d / "m.onnx")
    np.save(str(d / "good.npy"), np.random.RandomState(0).randn(256, 4).astype(np.float32))
    onnx2int8(d / "m.onnx", d / "good.npy", d / "q.onnx")
    return d


def cli(*args):
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=300)


def one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.mark.parametrize("bad, where", [(np.nan, "sample 7"), (np.inf, "sample 200"), (-np.inf, "sample 0")])
def test_non_finite_calibration_is_refused_naming_file_and_sample(fp32, tmp_path, bad, where):
    x = np.random.RandomState(1).randn(256, 4).astype(np.float32)
    x[int(where.split()[1]), 2] = bad
    np.save(str(tmp_path / "c.npy"), x)
    r = cli("quantize", fp32 / "m.onnx", "--calibration", tmp_path / "c.npy", "-o", tmp_path / "q.onnx")
    one_line_error(r, "c.npy", where, "non-finite")
    assert not (tmp_path / "q.onnx").exists()
    assert not [p for p in tmp_path.iterdir() if p.name not in ("c.npy",)]


def test_non_finite_npz_and_feed_list(fp32, tmp_path):
    x = np.random.RandomState(1).randn(128, 4).astype(np.float32)
    x[5, 0] = np.nan
    np.savez(str(tmp_path / "c.npz"), x)
    with pytest.raises(ExportError, match="c.npz.*sample 5"):
        onnx2int8(fp32 / "m.onnx", tmp_path / "c.npz", tmp_path / "q.onnx")
    name = load_onnx(fp32 / "m.onnx").graph.input[0].name
    feeds = [{name: x[i:i + 1]} for i in range(10)]
    with pytest.raises(ExportError, match="feed 5"):
        onnx2int8(fp32 / "m.onnx", feeds, tmp_path / "q.onnx")


@pytest.mark.parametrize("shape, dtype, needle", [((256, 5), np.float32, "expected"), ((256, 4), np.float64, "float64"),
                                                  ((0, 4), np.float32, "expected")])
def test_calibration_shape_and_dtype(fp32, tmp_path, shape, dtype, needle):
    np.save(str(tmp_path / "c.npy"), np.zeros(shape, dtype))
    one_line_error(cli("quantize", fp32 / "m.onnx", "--calibration", tmp_path / "c.npy", "-o", tmp_path / "q.onnx"),
                   "c.npy", needle)


def test_quantize_json_reports_the_errors_against_fp32(fp32, tmp_path):
    import json
    r = cli("quantize", fp32 / "m.onnx", "--calibration", fp32 / "good.npy", "-o", tmp_path / "q.onnx")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)                  # measured on the 20% held out of calibration (issue 30)
    assert info["errors"]["reference"]["samples"] == 51 and info["num_samples"] == 205
    assert info["evaluated_on"].startswith("51 held-out samples of")
    assert 0 <= info["errors"]["reference"]["max_abs_diff"] < 0.5
    r = cli("quantize", fp32 / "m.onnx", "--calibration", fp32 / "good.npy", "-o", tmp_path / "q.onnx", "--holdout", "0")
    info = json.loads(r.stdout)
    assert info["errors"]["reference"]["samples"] == 256 and info["evaluated_on"] == "the calibration samples themselves"


def _scale_tampered(src, dst, value):
    m = onnx.load(str(src))
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear")
    init = next(i for i in m.graph.initializer if i.name == dq.input[1])
    a = numpy_helper.to_array(init).copy()
    a.reshape(-1)[0] = value
    init.CopyFrom(numpy_helper.from_array(a, init.name))
    onnx.save(m, str(dst))


@pytest.mark.parametrize("value", [np.inf, np.nan, 0.0, -1.0])
def test_qdq_model_with_a_bad_scale_is_refused(fp32, tmp_path, value):
    _scale_tampered(fp32 / "q.onnx", tmp_path / "bad.onnx", value)
    with pytest.raises(ExportError, match="bad.onnx.*scale"):
        load_onnx(tmp_path / "bad.onnx")
    r = cli("deploy", "--target", "esp32c3", "--onnx", tmp_path / "bad.onnx", "--out", tmp_path / "out")
    one_line_error(r, "bad.onnx", "scale")


def test_good_qdq_model_loads(fp32):
    assert load_onnx(fp32 / "q.onnx").graph.node
