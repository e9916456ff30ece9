"""16x8 (int16 activations, int8 weights) in TFLite Micro: a tanh MLP exported by the project's own pipeline
(torch2onnx -> onnx2int8 activations="int16") runs in the pip tflite-micro interpreter bit for bit like our
NumPy reference; the arena search works for it; a 16x8 graph ending in argmax has no TFLM baseline."""
import copy
import os

import numpy as np
import pytest

from conftest import need

from grpo_edge.errors import TargetError
from grpo_edge.targets.esp32 import parse, tflm
from grpo_edge.targets.esp32 import reference as R
from grpo_edge.targets.esp32.ir import Op, TensorInfo


@pytest.fixture(scope="module")
def mlp16(tmp_path_factory):
    """4 -> 32 -> 32 -> 3 tanh MLP, 16x8 QDQ, parsed."""
    import torch
    from grpo_edge.core.models import build_model
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.torch2onnx import torch2onnx
    d = tmp_path_factory.mktemp("mlp16")
    torch.manual_seed(0)
    model = build_model("mlp", obs_dim=4, n_actions=3, hidden=32).eval()
    with torch.no_grad():                 # a last layer with gain 1 so the logits use their int16 range
        torch.nn.init.orthogonal_(model.net[-1].weight, 1.0)
        model.net[-1].bias.uniform_(-0.5, 0.5)
    info = torch2onnx(model, d / "m.onnx")
    fp32 = list(info["files"].values())[0]["path"]
    cal = (np.random.default_rng(0).standard_normal((256, 4)) * [1.0, 0.5, 0.2, 2.0]).astype(np.float32)
    q = onnx2int8(fp32, cal, d / "m.int16.onnx", activations="int16")
    g = parse.parse(q["path"])
    assert g.activation_dtype == "int16"
    assert [op.kind for op in g.ops] == ["fc16", "tanh16", "fc16", "tanh16", "fc16"]
    return g, cal


def _inputs(g, cal, n=300, seed=1):
    t = g.tensors[g.input]
    x = np.random.default_rng(seed).integers(-32768, 32768, size=(n, 4)).astype(np.int16)
    return np.concatenate([x, R.quantize(cal[:n], t.scale, t.zero_point, t.dtype)]).astype(np.int16)


def test_16x8_mlp_tflm_bit_exact_and_arena(mlp16, tmp_path):
    need(tflm.available(), "pip install tflite-micro")
    g, cal = mlp16
    buf, notes = tflm.to_tflite(g)
    assert notes == []
    mp = tmp_path / "m.tflite"
    mp.write_bytes(buf)
    ar = tflm.find_arena(mp, tmp_path)
    assert 0 < ar["arena_bytes"] < (1 << 20)
    assert ar["reported_total"] is None or ar["reported_total"] <= ar["arena_bytes"]
    x = _inputs(g, cal)
    xt = tflm.to_tflm_input(g, x)
    assert xt.dtype == np.int16
    y = tflm.run(mp, xt, tmp_path, ar["arena_bytes"]).reshape(len(x), -1)
    ref = R.run(g, x).reshape(len(x), -1)
    assert y.dtype == np.int16 and ref.dtype == np.int16
    assert np.array_equal(y, ref), "max diff %d LSB" % np.abs(y.astype(np.int64) - ref).max()
    assert len(np.unique(ref[:, 0])) > 100        # the outputs really vary (not saturated / constant)
    # int8 inputs (what deploy draws) widen losslessly to the model's int16 input
    x8 = np.random.default_rng(2).integers(-128, 128, size=(20, 4)).astype(np.int8)
    y8 = tflm.run(mp, tflm.to_tflm_input(g, x8), tmp_path, ar["arena_bytes"]).reshape(20, -1)
    assert np.array_equal(y8, R.run(g, x8.astype(np.int16)).reshape(20, -1))


def test_16x8_sigmoid_mlp_tflm_bit_exact(tmp_path):
    """A sigmoid MLP in 16x8: LOGISTIC int16 in TFLM equals our sigmoid16 reference on random and calibration
    inputs (the same sigmoid table as tanh, read at another step)."""
    need(tflm.available(), "pip install tflite-micro")
    import torch
    from grpo_edge.export.onnx2int8 import onnx2int8
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Sigmoid(), torch.nn.Linear(32, 16), torch.nn.Sigmoid(),
                            torch.nn.Linear(16, 3)).eval()
    torch.onnx.export(m, (torch.zeros(1, 4),), str(tmp_path / "m.onnx"), input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=17)
    cal = (np.random.default_rng(0).standard_normal((256, 4)) * 2).astype(np.float32)
    g = parse.parse(onnx2int8(tmp_path / "m.onnx", cal, tmp_path / "m16.onnx", activations="int16")["path"])
    assert [op.kind for op in g.ops] == ["fc16", "sigmoid16", "fc16", "sigmoid16", "fc16"]
    buf, notes = tflm.to_tflite(g)
    mp = tmp_path / "m.tflite"
    mp.write_bytes(buf)
    ar = tflm.find_arena(mp, tmp_path)
    x = _inputs(g, cal)
    y = tflm.run(mp, tflm.to_tflm_input(g, x), tmp_path, ar["arena_bytes"]).reshape(len(x), -1)
    ref = R.run(g, x).reshape(len(x), -1)
    assert np.array_equal(y, ref), "max diff %d LSB" % np.abs(y.astype(np.int64) - ref).max()
    assert len(np.unique(ref[:, 0])) > 100


def test_16x8_graph_ending_in_argmax_has_no_tflm_baseline(mlp16):
    need(tflm.available(), "pip install tflite-micro")
    g, _ = mlp16
    g2 = copy.deepcopy(g)
    g2.tensors["action"] = TensorInfo("action", (1, 1), 1.0, 0, "int8")
    g2.ops.append(Op("argmax", "argmax", [g.output], "action", {}))
    g2.output = "action"
    with pytest.raises(TargetError, match="ARG_MAX takes float32/int8 only"):
        tflm.to_tflite(g2)
