"""Batch-first layout (export/onnx_layout.py): torch's attention modules (nn.MultiheadAttention,
nn.TransformerEncoderLayer, scaled_dot_product_attention over a rank-5 view) move the sequence axis first;
rewritten with the batch axis first in every tensor, the graph computes the same, and such models deploy to
the ESP32 bit-exact (issue 28: transformer-encoder classifiers of kinds the project never saw)."""
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from grpo_edge.export.onnx_fuse import fuse_model
from grpo_edge.export.onnx_layout import _Layout, batch_first
from grpo_edge.targets.esp32 import rv32


class _TorchEncoder(nn.Module):
    """(B, 8, 6) -> Linear to 16 -> nn.TransformerEncoder (2 layers, 2 heads, GELU) -> mean over time -> 3."""

    def __init__(self, norm_first=False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=norm_first)
        self.inp, self.head = nn.Linear(6, 16), nn.Linear(16, 3)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.head(self.enc(self.inp(x)).mean(dim=1))


class _Mha(nn.Module):
    """nn.MultiheadAttention, a residual LayerNorm, a mean and a softmax head."""

    def __init__(self):
        super().__init__()
        self.inp, self.att = nn.Linear(6, 16), nn.MultiheadAttention(16, 2, batch_first=True)
        self.ln, self.head = nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, x):
        h = self.inp(x)
        return torch.softmax(self.head(self.ln(h + self.att(h, h, h, need_weights=False)[0]).mean(1)), -1)


class _Sdpa(nn.Module):
    """q, k, v split off a rank-5 view (1, T, 3, heads, d) moved to (3, 1, heads, T, d); F.scaled_dot_product_attention."""

    def __init__(self):
        super().__init__()
        self.inp, self.out = nn.Linear(6, 48), nn.Linear(16, 3)

    def forward(self, x):
        q, k, v = self.inp(x).view(1, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(a.transpose(1, 2).reshape(1, 8, 16).mean(1))


def _export(module, path, dynamic=False):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), torch.randn(1, 8, 6), str(path), opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b"}, "y": {0: "b"}} if dynamic else None)
    return path


def _run(model, x):
    import onnxruntime as ort
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("make,dynamic", [(lambda: _TorchEncoder(False), False), (lambda: _TorchEncoder(True), True),
                                          (_Mha, True), (_Sdpa, False)])
def test_torch_attention_gets_the_batch_axis_first_and_computes_the_same(tmp_path, make, dynamic):
    """Every tensor (1, ...) of rank 4 at most after fuse_model (a dynamic batch becomes 1, Shapes fold); the
    sequence-first Transposes became reshapes or transposes of the non-1 axes; onnxruntime gives the same outputs."""
    import onnx
    torch.manual_seed(1)
    src = _export(make(), tmp_path / "m.onnx", dynamic)
    before = _Layout(onnx.load(str(src)))
    assert any(before.bad(n) for n in before.shapes) or dynamic     # the export really moves the batch axis
    model = onnx.load(str(src))
    fusions = fuse_model(model)
    layout = [f for f in fusions if f.get("layout")]
    assert layout and any(f["op"] == "Transpose" for f in layout)
    after = _Layout(model)
    assert not [(n, s) for n, s in after.shapes.items() if after.bad(n)]
    onnx.checker.check_model(model)
    x = np.random.default_rng(0).normal(size=(1, 8, 6)).astype(np.float32)
    want = _run(onnx.load(str(src)), x)
    np.testing.assert_allclose(_run(model, x), want, rtol=1e-5, atol=1e-5)


def test_a_transpose_of_four_non_unit_axes_is_refused_by_name_before_any_work(tmp_path):
    """(1, 2, 3, 4, 5) permuted so no two axes stay together: no batch-first rank-4 form. deploy names the
    node where the rank-5 tensor begins, in one line, exit 2, before quantizing (nothing written)."""
    from conftest import cli_in

    class Shuffle(nn.Module):
        def forward(self, x):
            return x.reshape(1, 2, 3, 4, 5).permute(4, 0, 3, 2, 1).reshape(1, 120)
    src = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Shuffle(), torch.randn(1, 120), str(src), opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["y"])
    np.save(tmp_path / "c.npy", np.random.default_rng(0).normal(size=(16, 120)).astype(np.float32))
    out = tmp_path / "out"
    r = cli_in(tmp_path, "deploy", "--target", "esp32s3", "--onnx", src, "--calibration", tmp_path / "c.npy",
               "--out", out)
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(("device:", "note:"))]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: 1 op cannot be compiled for the ESP32: Reshape node '/Reshape': writes "
                               "'/Reshape_output_0' of shape (1, 2, 3, 4, 5): the compiler keeps the batch axis "
                               "first, rank 4 at most (it compiles Add"), r.stderr
    assert not (out / "model.int8.onnx").exists()


@pytest.mark.parametrize("make", [lambda: _TorchEncoder(False), _Mha])
def test_torch_transformer_modules_deploy_bit_exact(tmp_path, make):
    """nn.TransformerEncoder (post-norm, GELU, 2 layers) and nn.MultiheadAttention with a softmax head, the
    user's way (fp32 ONNX + calibration, int8): host and rv32 bit-exact, every op within 1 LSB of
    onnxruntime, the layout rewrites in the report's notes."""
    from grpo_edge.targets import deploy
    torch.manual_seed(2)
    src = _export(make(), tmp_path / "m.onnx")
    np.save(tmp_path / "c.npy", np.random.default_rng(0).normal(size=(256, 8, 6)).astype(np.float32))
    rep = deploy("esp32s3", onnx=str(src), out_dir=str(tmp_path / "out"), options={
        "calibration": str(tmp_path / "c.npy"), "activations": "int8", "callgrind": False, "tflm": False})
    f = rep.figures
    assert f["host_bit_exact"].value is True and f["ort_max_lsb_per_op"].value <= 1
    assert any("export/onnx_layout.py" in n for n in rep.notes)
    if rv32.available():
        assert f["rv32_bit_exact"].value is True


def test_a_model_with_its_weights_beside_it_deploys_as_one_file(tmp_path):
    """An ONNX file whose weights lie in m.onnx.data (what torch's dynamo exporter writes): deploy reads them
    in and writes one self-contained model.onnx; without the .data file, one line names the model, exit 2."""
    import onnx
    from conftest import cli_in
    from grpo_edge.targets.esp32 import samples
    src, calib = samples.export_kind("ln_gelu_mlp", tmp_path / "kind")
    split = tmp_path / "split"
    split.mkdir()
    onnx.save(onnx.load(str(src)), str(split / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.onnx.data", size_threshold=0)
    assert (split / "m.onnx.data").stat().st_size > 0
    out = tmp_path / "out"
    r = cli_in(tmp_path, "deploy", "--target", "esp32s3", "--onnx", split / "m.onnx", "--calibration", calib,
               "--out", out, "--option", "callgrind=false", "--option", "tflm=false", "--activations", "int8")
    assert r.returncode == 0, r.stderr
    copied = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in copied.graph.initializer)
    (split / "m.onnx.data").unlink()
    r = cli_in(tmp_path, "deploy", "--target", "esp32s3", "--onnx", split / "m.onnx", "--calibration", calib,
               "--out", tmp_path / "out2")
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(("device:", "note:"))]
    assert r.returncode == 2 and len(lines) == 1 and "m.onnx" in lines[0], r.stderr
