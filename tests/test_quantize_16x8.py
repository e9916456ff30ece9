"""int16-activation (16x8) quantization, GPTQ weight rounding and the int8-or-16x8 choice, with real
onnxruntime quantization and the real ESP32 parser / integer reference."""
import numpy as np
import pytest
import torch

from grpo_edge.errors import ExportError, TargetError
from grpo_edge.export.gptq import gptq_round, layer_output_error
from grpo_edge.export.onnx2int8 import onnx2int8
from grpo_edge.export.torch2onnx import torch2onnx


def _unbalanced_inputs(n=2000, seed=0):
    """CartPole-like states: correlated features, one ~50x smaller than the largest."""
    z = np.random.default_rng(seed).standard_normal((n, 4))
    mix = np.array([[1.0, 0.6, 0.0, 0.2], [0.0, 0.5, 0.3, 0.4], [0.0, 0.0, 0.02, 0.0], [0.0, 0.0, 0.01, 0.1]])
    return (z @ mix).astype(np.float32)


def _tanh_mlp(seed=0):
    """The cartpole policy shape (4 -> 32 -> 32 -> 2, tanh); the small feature gets large weights."""
    from grpo_edge.core.models.mlp import MLPPolicy
    torch.manual_seed(seed)
    m = MLPPolicy(4, 2, hidden=32, num_layers=3, activation="tanh")
    with torch.no_grad():
        first = [p for p in m.parameters() if p.dim() == 2][0]
        first.mul_(torch.tensor([0.5, 1.0, 20.0, 2.0]))
        [p for p in m.parameters() if p.dim() == 2][-1].mul_(100.0)     # undo the 0.01 policy-head gain
    return m.eval()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    d = tmp_path_factory.mktemp("q16")
    torch2onnx(_tanh_mlp(), d / "m.onnx")
    x = _unbalanced_inputs()
    np.savez(d / "calib.npz", obs=x[:512])
    return d, x


def test_gptq_beats_nearest_on_unbalanced_inputs_and_stays_on_grid():
    rng = np.random.default_rng(1)
    x = _unbalanced_inputs().astype(np.float64)
    w = rng.standard_normal((16, 4)) * np.array([0.3, 1.0, 20.0, 2.0])
    s = np.abs(w).max(1) / 127
    near = np.clip(np.round(w / s[:, None]), -127, 127).astype(np.int8)
    q = gptq_round(w, s, x)
    assert q.dtype == np.int8 and q.shape == w.shape and np.abs(q.astype(int)).max() <= 127
    assert np.abs(q.astype(int) - near.astype(int)).max() <= 3          # a re-rounding, not a new grid
    assert layer_output_error(w, q, s, x) < 0.6 * layer_output_error(w, near, s, x)   # measured 0.18-0.50 over seeds


def test_gptq_equals_nearest_when_inputs_are_uncorrelated():
    # H diagonal (orthogonal design): no error can be moved onto other columns.
    x = np.kron(np.eye(4), np.ones((5, 1))) * np.array([1.0, 2.0, 3.0, 4.0])
    w = np.random.default_rng(2).standard_normal((8, 4))
    s = np.abs(w).max(1) / 127
    near = np.clip(np.round(w / s[:, None]), -127, 127).astype(np.int8)
    assert np.array_equal(gptq_round(w, s, x, damp=0.0), near)


def test_onnx2int8_int16_activations_follow_tflite_16x8(mlp):
    import onnx
    from onnx import numpy_helper
    d, x = mlp
    info = onnx2int8(d / "m.onnx", d / "calib.npz", d / "m16.onnx", activations="int16", weight_rounding="gptq")
    m = onnx.load(str(d / "m16.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    zps = [inits[n.input[2]] for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert zps and all(z.dtype == np.int16 and int(z) == 0 for z in zps)          # symmetric int16 activations
    tanh_q = [n for n in m.graph.node if n.op_type == "QuantizeLinear" and "Tanh" in n.input[0]]
    assert tanh_q and all(float(inits[n.input[1]]) == 2.0 ** -15 for n in tanh_q)
    weights = [v for k, v in inits.items() if k.endswith("_quantized") and v.ndim == 2]
    assert weights and all(v.dtype == np.int8 for v in weights)
    assert info["activations"] == "int16" and set(info["gptq"]) and info["weight_rounding"] == "gptq"
    info8 = onnx2int8(d / "m.onnx", d / "calib.npz", d / "m8.onnx")
    assert info["errors"]["reference"]["mean_abs_diff"] < 0.25 * info8["errors"]["reference"]["mean_abs_diff"]


def test_16x8_reference_agrees_with_onnxruntime(mlp):
    from grpo_edge.targets.esp32 import parse, simulate
    d, x = mlp
    onnx2int8(d / "m.onnx", d / "calib.npz", d / "m16.onnx", activations="int16")
    g = parse.parse(d / "m16.onnx")
    assert g.activation_dtype == "int16" and [op.kind for op in g.ops] == ["fc16", "tanh16", "fc16", "tanh16", "fc16"]
    r = simulate.ort_check(g, d / "m16.onnx", x[:200])
    worst = {}
    for p in r["per_op"]:
        worst[p["op"]] = max(worst.get(p["op"], 0), p["max_lsb"])
    assert worst["fc16"] <= 1                 # ORT rescales in float, we in fixed point
    assert 0 < worst["tanh16"] <= 4           # TFLM's int16 tanh interpolates a table: a few LSB of 2^-15
    assert r["decision_agreement"] >= 0.99


def test_bad_quantization_options(mlp):
    d, _ = mlp
    with pytest.raises(ExportError, match="activations must be one of int8\\|int16"):
        onnx2int8(d / "m.onnx", d / "calib.npz", d / "x.onnx", activations="int4")
    with pytest.raises(ExportError, match="weight rounding must be one of"):
        onnx2int8(d / "m.onnx", d / "calib.npz", d / "x.onnx", weight_rounding="stochastic")
    assert not (d / "x.onnx").exists()


def test_int16_tanh_needs_the_fixed_output_scale(mlp, tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from grpo_edge.targets.esp32 import parse
    d, x = mlp

    class R(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"obs": x[i:i + 64]} for i in range(0, 512, 64)])

        def get_next(self):
            return next(self.it, None)
    quantize_static(str(d / "m.onnx"), str(tmp_path / "bad.onnx"), R(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt16, weight_type=QuantType.QInt8, per_channel=True,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    with pytest.raises(ExportError, match="Tanh node .* scale 2\\^-15"):
        parse.parse(tmp_path / "bad.onnx")


def test_choice_keeps_int8_when_it_agrees_and_tries_16x8_when_not(mlp, tmp_path):
    from grpo_edge.targets.esp32_pipeline import choose_quantization
    d, x = mlp
    data = {"obs": x[:512]}
    keep = choose_quantization(d / "m.onnx", d / "calib.npz", data, tmp_path, min_agreement=0.0)
    assert keep["chosen"] == "int8" and len(keep["candidates"]) == 1
    both = choose_quantization(d / "m.onnx", d / "calib.npz", data, tmp_path, min_agreement=1.01)
    a8, a16 = (c["agreement_calibration"] for c in both["candidates"])
    assert [c["activations"] for c in both["candidates"]] == ["int8", "int16"]
    assert both["chosen"] == ("int16" if a16 > a8 else "int8")
    assert a16 >= a8                     # this model's small feature is what int8 loses
    forced = choose_quantization(d / "m.onnx", d / "calib.npz", data, tmp_path, activations="int16")
    assert forced["chosen"] == "int16" and len(forced["candidates"]) == 1


def test_bad_activations_option_names_it(tmp_path):
    from grpo_edge.targets.esp32_pipeline import prepare_int8
    with pytest.raises(TargetError, match="activations must be one of auto\\|int8\\|int16, got 'int4'"):
        prepare_int8(tmp_path / "x.pt", tmp_path, {"activations": "int4"}, from_checkpoint=True)


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("flags", [["--activations", "int16"], ["--weight-rounding", "gptq"],
                                   ["--activations", "int16", "--weight-rounding", "gptq"]])
def test_cli_quantizes_a_fixed_batch_export(tmp_path, flags, batch):
    """torch.onnx.export writes a fixed batch by default; int16 and GPTQ feed it that many samples a run."""
    import subprocess
    import sys
    from grpo_edge.core.models.mlp import MLPPolicy
    torch.manual_seed(0)
    model = MLPPolicy(4, 2, hidden=16, num_layers=3, activation="tanh").eval()
    torch.onnx.export(model, (torch.randn(batch, 4),), str(tmp_path / "m.onnx"), dynamo=False, opset_version=17,
                      input_names=["obs"], output_names=["logits"])
    np.save(str(tmp_path / "c.npy"), np.random.RandomState(0).randn(257, 4).astype(np.float32))
    r = subprocess.run([sys.executable, "-m", "grpo_edge.cli.main", "quantize", str(tmp_path / "m.onnx"),
                        "--calibration", str(tmp_path / "c.npy"), "-o", str(tmp_path / "q.onnx")] + flags,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and (tmp_path / "q.onnx").is_file()
