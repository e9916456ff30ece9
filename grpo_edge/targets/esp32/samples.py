"""Tiny int8 QDQ sample models for self-checks and tests (torch -> ONNX opset 17 -> quantize_static).

    python -m grpo_edge.targets.esp32.samples OUT_DIR     # writes mlp/resnet/... .int8.onnx

Quantization matches what the export step produces: QuantFormat.QDQ, per_channel=True, QInt8
activations and weights (weights symmetric), calibrated on seeded random inputs. The 16x8 samples
(INT16_NAMES: int16 activations, int8 weights) go through the export step itself
(grpo_edge.export.onnx2int8 with activations="int16"); their file is still named <name>.int8.onnx.
"""
import sys
from pathlib import Path

import numpy as np


def _modules():
    import torch
    from torch import nn

    class MLP(nn.Module):
        """The cartpole policy shape: 4 -> 64 -> 64 -> 2 with tanh (the mlp default)."""

        def __init__(self, obs=4, hidden=64, act=2, activation="tanh"):
            super().__init__()
            self.l1, self.l2, self.l3 = nn.Linear(obs, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, act)
            self.act = {"tanh": torch.tanh, "relu": torch.relu, "hardswish": nn.functional.hardswish}[activation]

        def forward(self, x):                      # (B, obs) -> (B, act)
            return self.l3(self.act(self.l2(self.act(self.l1(x)))))

    class ResNet(nn.Module):
        """A small residual CNN on 8x8x1 images: conv, residual add, depthwise stride 2, pools, FC."""

        def __init__(self, classes=10, width=8):
            super().__init__()
            w = width
            self.c1 = nn.Conv2d(1, w, 3, padding=1)
            self.c2 = nn.Conv2d(w, w, 3, padding=1)
            self.c3 = nn.Conv2d(w, w, 3, padding=1)
            self.dw = nn.Conv2d(w, w, 3, stride=2, padding=1, groups=w)
            self.pw = nn.Conv2d(w, 2 * w, 1)
            self.fc = nn.Linear(2 * w, classes)

        def forward(self, x):                      # (B, 1, 8, 8) -> (B, classes)
            y = torch.relu(self.c1(x))
            y = torch.relu(y + self.c3(torch.relu(self.c2(y))))
            y = nn.functional.relu6(self.dw(y))    # (B, w, 4, 4)
            y = torch.relu(self.pw(y))             # (B, 2w, 4, 4)
            y = nn.functional.max_pool2d(y, 2)     # (B, 2w, 2, 2)
            y = nn.functional.adaptive_avg_pool2d(y, 1)
            return self.fc(torch.flatten(y, 1))

    class Pools(nn.Module):
        """Average pooling with padding, a stride-2 valid conv and flatten of a spatial map."""

        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(2, 4, 3, stride=2)

        def forward(self, x):                      # (B, 2, 9, 9) -> (B, 64)
            y = torch.relu(self.c(x))              # (B, 4, 4, 4)
            y = nn.functional.avg_pool2d(y, 3, stride=1, padding=1, count_include_pad=False)
            return torch.flatten(y, 1)

    class Classifier(nn.Module):
        """An MLP policy ending in softmax (action probabilities) as the export step may emit it."""

        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(4, 32), nn.Linear(32, 6)

        def forward(self, x):                      # (B, 4) -> (B, 6) probabilities
            return torch.softmax(self.l2(torch.relu(self.l1(x))), dim=-1)

    class Unsupported(nn.Module):
        def forward(self, x):
            return x * x + torch.sin(x)

    return {"mlp": (MLP, (1, 4)), "mlp_relu": (lambda: MLP(activation="relu"), (1, 4)), "mlp16": (MLP, (1, 4)),
            "mlp_hardswish": (lambda: MLP(activation="hardswish"), (1, 4)),
            "resnet": (ResNet, (1, 1, 8, 8)), "pools": (Pools, (1, 2, 9, 9)), "softmax": (Classifier, (1, 4)),
            "unsupported": (Unsupported, (1, 4))}


NAMES = ("mlp", "mlp_relu", "mlp_hardswish", "resnet", "pools", "softmax", "unsupported", "mlp16")
INT16_NAMES = ("mlp16",)       # the tanh MLP quantized with int16 activations (TFLite 16x8)


def calibration(shape, n=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n,) + tuple(shape[1:])).astype(np.float32)


def build(name: str, out_dir, seed: int = 0) -> Path:
    """Write OUT_DIR/<name>.onnx and <name>.int8.onnx; return the int8 path."""
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    cls, shape = _modules()[name]
    torch.manual_seed(seed)
    model = cls().eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fp32, int8 = out / (name + ".onnx"), out / (name + ".int8.onnx")
    # batch axis dynamic: the int16 export probes tensor ranges in batches (onnx_utils.tensor_values)
    torch.onnx.export(model, (torch.randn(*shape),), str(fp32), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    data = calibration(shape, seed=seed)
    if name in INT16_NAMES:
        from grpo_edge.export.onnx2int8 import onnx2int8
        onnx2int8(fp32, calibration(shape, n=256, seed=seed), int8, activations="int16")
        return int8

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": data[i:i + 1]} for i in range(len(data))])

        def get_next(self):
            return next(self.it, None)

    import logging
    logging.getLogger().setLevel(logging.ERROR)
    quantize_static(str(fp32), str(int8), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return int8


def _kinds():
    """The small-model kinds of issue 28, in fp32 (they go through deploy --onnx --calibration)."""
    import torch
    from torch import nn

    class LayerNormMLP(nn.Module):
        """Linear -> LayerNorm -> GELU -> Linear."""

        def __init__(self, width=32, gelu=True):
            super().__init__()
            self.a, self.ln, self.b = nn.Linear(4, width), nn.LayerNorm(width), nn.Linear(width, 3)
            self.act = nn.GELU() if gelu else nn.Identity()

        def forward(self, x):                      # (B, 4) -> (B, 3)
            return self.b(self.act(self.ln(self.a(x))))

    class KeywordSpotter(nn.Module):
        """Frames (B, T=20, F=10) transposed to (B, F, T), two Conv1d, mean over time, FC, softmax."""

        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv1d(10, 16, 3, padding=1), nn.Conv1d(16, 16, 3, stride=2, padding=1)
            self.fc = nn.Linear(16, 4)

        def forward(self, x):                      # (B, 20, 10) -> (B, 4) probabilities
            h = torch.relu(self.c1(x.transpose(1, 2)))
            return torch.softmax(self.fc(torch.relu(self.c2(h)).mean(dim=2)), dim=-1)

    class BnCnn(nn.Module):
        """Conv + BatchNorm -> HardSwish -> two branches concatenated -> BatchNorm (after the Concat: no Conv to
        fold into) -> HardSwish -> mean -> FC."""

        def __init__(self):
            super().__init__()
            self.c1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.a, self.b = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 4, 1)
            self.bn2, self.fc = nn.BatchNorm2d(12), nn.Linear(12, 5)

        def forward(self, x):                      # (B, 1, 12, 12) -> (B, 5)
            h = nn.functional.hardswish(self.bn1(self.c1(x)))
            h = torch.cat([self.a(h), self.b(h)], dim=1)
            return self.fc(nn.functional.hardswish(self.bn2(h)).mean(dim=(2, 3)))

    class Block(nn.Module):
        """Pre-norm transformer block: LayerNorm, 2-head self-attention through MatMul and Softmax, LayerNorm,
        GELU MLP, residuals."""

        def __init__(self, d=16, heads=2):
            super().__init__()
            self.ln1, self.ln2, self.qkv, self.o = nn.LayerNorm(d), nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.f1, self.f2, self.h = nn.Linear(d, 2 * d), nn.Linear(2 * d, d), heads

        def forward(self, x):                      # (B, T, d) -> (B, T, d)
            B, T, D = x.shape
            q, k, v = (t.reshape(B, T, self.h, D // self.h).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(D, dim=-1))
            a = torch.softmax(q @ k.transpose(-1, -2) / (D // self.h) ** 0.5, dim=-1)
            x = x + self.o((a @ v).transpose(1, 2).reshape(B, T, D))
            return x + self.f2(nn.functional.gelu(self.f1(self.ln2(x))))

    class Encoder(nn.Module):
        """(B, T=8, F=6) -> linear to d=16 -> two blocks -> mean over T -> 3 classes."""

        def __init__(self):
            super().__init__()
            self.inp, self.b1, self.b2, self.head = nn.Linear(6, 16), Block(), Block(), nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.b2(self.b1(self.inp(x))).mean(dim=1))

    return {"ln_gelu_mlp": (LayerNormMLP, (1, 4)), "keyword_spotter": (KeywordSpotter, (1, 20, 10)),
            "bn_cnn": (BnCnn, (1, 1, 12, 12)), "encoder": (Encoder, (1, 8, 6)), **_torch_kinds()}


def _torch_kinds():
    """Kinds written with torch's own transformer modules (nn.MultiheadAttention inside)."""
    import torch
    from torch import nn

    class TorchEncoder(nn.Module):
        """The same task with torch's own modules: nn.TransformerEncoder (2 post-norm layers, 2 heads, GELU;
        nn.MultiheadAttention inside: export/onnx_layout.py keeps its batch axis first)."""

        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True)
            self.inp, self.enc, self.head = nn.Linear(6, 16), nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.enc(self.inp(x)).mean(dim=1))

    class TokenClassifier(nn.Module):
        """Token ids (B, 8) of a 20-word vocabulary -> nn.Embedding + learned positions -> one
        nn.TransformerEncoderLayer -> mean -> 3 classes."""

        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True)
            self.emb, self.pos = nn.Embedding(VOCAB, 16), nn.Parameter(torch.zeros(1, 8, 16))
            self.enc, self.head = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False), nn.Linear(16, 3)

        def forward(self, ids):
            return self.head(self.enc(self.emb(ids) + self.pos).mean(dim=1))

    return {"torch_encoder": (TorchEncoder, (1, 8, 6)), "token_classifier": (TokenClassifier, (1, 8))}


KINDS = ("ln_gelu_mlp", "keyword_spotter", "bn_cnn", "encoder", "torch_encoder", "token_classifier")
VOCAB = 20            # token_classifier's vocabulary: its input is ids 0 .. VOCAB - 1


def kind_model(name: str, seed: int = 0, **kwargs):
    """(fp32 torch module, input shape) of a model kind: weights drawn with `seed` (std 0.8), batch norms
    with non-trivial statistics."""
    import torch
    cls, shape = _kinds()[name]
    torch.manual_seed(seed)
    m = cls(**kwargs)
    with torch.no_grad():
        for p in m.parameters():
            torch.nn.init.normal_(p, std=0.8)
        for bn in (x for x in m.modules() if isinstance(x, torch.nn.BatchNorm2d)):
            bn.running_mean.normal_(0.0, 0.3)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_(1.0, 0.3)
        for ln in (x for x in m.modules() if isinstance(x, torch.nn.LayerNorm)):
            ln.weight.normal_(1.0, 0.3)
    return m.eval(), shape


def export_kind(name: str, out_dir, seed: int = 0, n_calibration: int = 256):
    """OUT/<name>.onnx (fp32, opset 17) and OUT/<name>_calibration.npy (token ids for token_classifier);
    returns their paths."""
    import warnings
    import torch
    m, shape = kind_model(name, seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = name == "token_classifier"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, torch.randint(0, VOCAB, shape) if ids else torch.randn(*shape), str(out / (name + ".onnx")),
                          opset_version=17, dynamo=False, input_names=["x"], output_names=["y"])
    rng = np.random.default_rng(seed)
    x = (rng.integers(0, VOCAB, size=(n_calibration,) + tuple(shape[1:])) if ids
         else (rng.normal(size=(n_calibration,) + tuple(shape[1:])) * 1.5).astype(np.float32))
    np.save(out / (name + "_calibration.npy"), x)
    return out / (name + ".onnx"), out / (name + "_calibration.npy")


def input_shape(name: str):
    return _modules()[name][1]



if __name__ == "__main__":
    for n in NAMES:
        print(build(n, sys.argv[1] if len(sys.argv) > 1 else "."))
