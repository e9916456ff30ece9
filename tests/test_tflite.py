"""TFLite baselines: .tflite files written from our ONNX (fp32) and QDQ int8 parameters, run with LiteRT."""
import numpy as np
import pytest

from conftest import need

from session_cache import checkpoint as cached_checkpoint
from grpo_edge.bench.tflite import tflite_available
from grpo_edge.errors import ExportError

OK, WHY = tflite_available()
need(OK, WHY)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.tasks import task_from_state
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
    from grpo_edge.export.evaluate import task_metric
    from grpo_edge.bench.tflite import onnx2tflite, tflite_policy
    d, task, _ = models
    onnx2tflite(d / "model.int8.onnx", d / "m8.tflite")
    assert task_metric(task, tflite_policy(d / "m8.tflite"), n=5) >= 475


def _small_resnet():
    import torch
    from grpo_edge.core.models import build_model
    torch.manual_seed(0)
    m = build_model("lite-resnet", in_channels=1, n_classes=10, image_size=8, channels=[8, 16, 32], blocks=[1, 1, 1])
    for mod in m.modules():       # non-trivial BN statistics, so the folded convs are not near-identity
        if isinstance(mod, torch.nn.BatchNorm2d):
            torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
            torch.nn.init.normal_(mod.bias, 0.0, 0.1)
            mod.running_mean.normal_(0.0, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    return m


def _assert_tflite_equals_ort(onnx_path, tflite_path, x):
    from grpo_edge.bench.tflite import run_tflite
    from grpo_edge.export.onnx_utils import session
    sess = session(onnx_path)
    ref = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    y = run_tflite(tflite_path, x)
    assert y.shape == ref.shape
    assert np.max(np.abs(y - ref)) <= 1e-4 * max(1.0, float(np.max(np.abs(ref))))


def test_lite_resnet_fp32_tflite_matches_onnx(tmp_path):
    from grpo_edge.bench.tflite import onnx2tflite
    from grpo_edge.export.torch2onnx import torch2onnx
    torch2onnx(_small_resnet(), tmp_path / "r.onnx")
    info = onnx2tflite(tmp_path / "r.onnx", tmp_path / "r.tflite")
    assert info["dtype"] == "fp32" and {"Conv", "Add", "GlobalAveragePool", "Gemm"} <= set(info["ops"])
    x = np.random.default_rng(0).normal(size=(32, 1, 8, 8)).astype(np.float32)   # NCHW, as ONNX takes it
    _assert_tflite_equals_ort(tmp_path / "r.onnx", tmp_path / "r.tflite", x)


def _cnn(unsupported=False):
    """Depthwise (x2) stride-2 conv with non-SAME pads, grouped conv, relu6 / clamp, padded pools, a mean
    over H, W and a flatten of a 2x2 map; `unsupported` adds a Concat."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from grpo_edge.core.models.spec import ExportSpec

    class Net(nn.Module):
        def __init__(self):
            super(Net, self).__init__()
            self.c0 = nn.Conv2d(3, 8, 3, padding=1)
            self.dw = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=8)
            self.gc = nn.Conv2d(16, 12, 3, padding=1, groups=4)
            self.c5 = nn.Conv2d(12, 12, 5, padding=2)
            self.fc = nn.Linear(12 * 2 * 2, 5)
            self.fg = nn.Linear(12, 5)

        def forward(self, x):
            h = F.max_pool2d(F.relu6(self.c0(x)), 3, stride=1, padding=1)
            h = self.gc(torch.clamp(self.dw(h), -0.5, 2.0))
            h = h + F.relu(self.c5(h))
            g = h.mean(dim=(2, 3))
            if unsupported:
                g = torch.cat([g, g], 1)[:, :12]
            h = F.avg_pool2d(h, 3, stride=2, padding=1, count_include_pad=False)
            h = F.max_pool2d(h, 3, stride=2, padding=1)
            return self.fc(h.flatten(1)) + self.fg(g)

        def export_spec(self, batch_size=1):
            return ExportSpec(module=self.eval(), example_inputs=(torch.randn(batch_size, 3, 12, 12),),
                              input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})

    torch.manual_seed(0)
    return Net()


def test_depthwise_strided_padded_cnn_matches_onnx(tmp_path):
    from grpo_edge.bench.tflite import onnx2tflite
    from grpo_edge.export.torch2onnx import torch2onnx
    torch2onnx(_cnn(), tmp_path / "c.onnx")
    info = onnx2tflite(tmp_path / "c.onnx", tmp_path / "c.tflite")
    assert {"Conv", "Clip", "MaxPool", "AveragePool", "ReduceMean", "Flatten", "Add"} <= set(info["ops"])
    x = np.random.default_rng(1).normal(size=(16, 3, 12, 12)).astype(np.float32)
    _assert_tflite_equals_ort(tmp_path / "c.onnx", tmp_path / "c.tflite", x)


def test_unsupported_op_names_op_and_node(tmp_path):
    from grpo_edge.bench.tflite import onnx2tflite
    from grpo_edge.export.torch2onnx import torch2onnx
    torch2onnx(_cnn(unsupported=True), tmp_path / "u.onnx")
    with pytest.raises(ExportError) as e:
        onnx2tflite(tmp_path / "u.onnx", tmp_path / "u.tflite")
    msg = str(e.value)
    assert "op Concat" in msg and "node" in msg and "\n" not in msg
