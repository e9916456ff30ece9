"""TFLite baselines: .tflite files written from our ONNX (fp32) and QDQ int8 parameters, run with LiteRT."""
import numpy as np
import pytest

from edge_fixtures import cached_checkpoint
from grpo_edge.bench.tflite import tflite_available
from grpo_edge.errors import ExportError

OK, WHY = tflite_available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.export.calibration import task_from_state
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.torch2onnx import torch2onnx
    d = tmp_path_factory.mktemp("tfl")
    model, state = load_policy(cached_checkpoint("cartpole"))
    task = task_from_state(state)
    torch2onnx(model, d / "model.onnx")
    x = task.calibration_inputs(256, policy=model)
    onnx2int8(d / "model.onnx", x, d / "model.int8.onnx")
    return d, task, x


def test_fp32_tflite_matches_onnx(models):
    from grpo_edge.bench.tflite import onnx2tflite, run_tflite
    from grpo_edge.export.onnx_utils import session
    d, _, x = models
    info = onnx2tflite(d / "model.onnx", d / "model.tflite")
    assert info["dtype"] == "fp32" and info["size_bytes"] > 0 and (d / "model.tflite").read_bytes()[4:8] == b"TFL3"
    y = run_tflite(d / "model.tflite", x[:64])
    ref = session(d / "model.onnx").run(None, {"obs": x[:64]})[0]
    assert np.max(np.abs(y - ref)) < 1e-4


def test_int8_tflite_uses_our_parameters(models):
    from grpo_edge.bench.tflite import onnx2tflite, run_tflite
    from grpo_edge.export.onnx_utils import session
    d, _, x = models
    info = onnx2tflite(d / "model.int8.onnx", d / "model.int8.tflite")
    assert info["dtype"] == "int8" and info["size_bytes"] < (d / "model.tflite").stat().st_size
    y = run_tflite(d / "model.int8.tflite", x[:64])
    ref = session(d / "model.int8.onnx", optimize=False).run(None, {"obs": x[:64]})[0]
    # same scales / zero points: only kernel rounding differs (a couple of output LSBs at most)
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(d / "model.int8.onnx"))
    scales = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    out_scale = max(float(v) for k, v in scales.items() if k.endswith("scale") and v.ndim == 0)
    assert np.max(np.abs(y - ref)) <= 2.01 * out_scale
    assert np.mean(y.argmax(-1) == ref.argmax(-1)) >= 0.95


def test_tflite_keeps_the_task_metric(models):
    from grpo_edge.bench.runtime import task_metric
    from grpo_edge.bench.tflite import onnx2tflite, tflite_policy
    d, task, _ = models
    onnx2tflite(d / "model.int8.onnx", d / "m8.tflite")
    assert task_metric(task, tflite_policy(d / "m8.tflite"), n=5) >= 475


def test_unsupported_op_names_op_and_node(tmp_path):
    import torch
    from grpo_edge.bench.tflite import onnx2tflite
    from grpo_edge.core.models import build_model
    from grpo_edge.export.torch2onnx import torch2onnx
    torch.manual_seed(0)
    m = build_model("lite-resnet", in_channels=1, n_classes=10, image_size=8, channels=[8, 16, 32], blocks=[1, 1, 1])
    torch2onnx(m, tmp_path / "r.onnx")
    with pytest.raises(ExportError) as e:
        onnx2tflite(tmp_path / "r.onnx", tmp_path / "r.tflite")
    msg = str(e.value)
    assert "op Conv" in msg and "node" in msg and "\n" not in msg
