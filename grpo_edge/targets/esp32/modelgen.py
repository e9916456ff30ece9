"""Models written many ways, for the ESP32 compiler's tests and its benchmark: seeded random compositions of
the ops the compiler claims (docs/esp32.md, "Supported ONNX ops"), exported the ways users export them.

    spec = modelgen.make_spec(7)                      # plain data: family, input, blocks, exporter, opset, ...
    onnx_path, calib_path = modelgen.export(spec, "out/7")
    result = modelgen.check(spec, "out/7")            # {"outcome": "deployed" | "refused" | "wrong" | "traceback"}

A spec is JSON (the benchmark writes it beside each outcome, so any model can be rebuilt from its line). Four
families: an MLP on (F,), a Conv1d net on (C, L), a Conv2d net on (C, H, W) and an attention block on (T, D).
Each draws 2-5 blocks from its family's list, so an op appears several times; blocks include residual adds,
two branches concatenated, gates (a product of two activations), layer and batch norms and a dozen
activations written as torch modules or functional calls. Then the way it is written down: torch's
TorchScript exporter at opset 13-18 or its dynamo exporter (opset 18), a fixed batch of 1 or a dynamic one,
node names as torch gives them, rewritten with slashes, or repeated (a graph onnxruntime refuses until the
names are made unique).

The contract `check` holds every model to (issue 38): it deploys bit-exact (host and rv32), every op within
its documented bound of onnxruntime (1 LSB; TFLM's int16 tanh 3: OpSpec.ort_lsb), its decisions agreeing with fp32 at the gate; or it is refused with one line (a
GrpoEdgeError). Anything else is "wrong" (deployed, yet not right) or "traceback" (an unexpected exception).
"""
import json
import random
from pathlib import Path

import numpy as np

FAMILIES = ("mlp", "conv1d", "conv2d", "attention")
ACTIVATIONS = ("relu", "relu6", "tanh", "sigmoid", "gelu", "gelu_tanh", "hardswish", "hardsigmoid",
               "leakyrelu", "elu", "softplus", "silu")
HEADS = (None, None, "softmax", "log_softmax", "tanh")
NAMINGS = ("torch", "torch", "slashes", "repeated")
GATE = 0.99                                          # the decision agreement a deployed model must reach


def make_spec(seed: int, family: str = None) -> dict:
    """The model of `seed` (and of `family`, else drawn), as plain data."""
    rng = random.Random(seed)
    family = family or rng.choice(FAMILIES)
    shape = {"mlp": [rng.randint(3, 12)], "conv1d": [rng.choice((1, 2, 4)), rng.choice((8, 12, 16))],
             "conv2d": [rng.choice((1, 2, 3)), rng.choice((6, 8)), rng.choice((6, 8))],
             "attention": [rng.choice((4, 6, 8)), rng.choice((8, 16))]}[family]
    blocks = [_block(rng, family) for _ in range(rng.randint(2, 5))]
    exporter = rng.choice(("torchscript", "torchscript", "dynamo"))
    return {"seed": seed, "family": family, "input": shape, "blocks": blocks,
            "head": {"out": rng.randint(2, 6), "fn": rng.choice(HEADS)},
            "exporter": exporter, "opset": 18 if exporter == "dynamo" else rng.randint(13, 18),
            "batch": rng.choice(("fixed", "dynamic")), "naming": rng.choice(NAMINGS),
            "functional": rng.random() < 0.5}


def _block(rng, family) -> dict:
    act = rng.choice(ACTIVATIONS)
    width = rng.choice((8, 12, 16, 24))
    if family == "mlp":
        return rng.choice([{"op": "linear", "out": width, "act": act}, {"op": "linear_ln", "out": width, "act": act},
                           {"op": "residual", "act": act}, {"op": "concat", "out": width // 2, "act": act},
                           {"op": "gate"}, {"op": "linear_bn", "out": width, "act": act}])
    if family in ("conv1d", "conv2d"):
        return rng.choice([{"op": "conv", "out": width, "k": rng.choice((1, 3)), "stride": rng.choice((1, 1, 2)),
                            "act": act},
                           {"op": "conv_bn", "out": width, "k": 3, "act": act},
                           {"op": "depthwise", "k": 3, "stride": rng.choice((1, 2)), "act": act},
                           {"op": "residual", "act": act}, {"op": "concat", "out": width // 2, "act": act},
                           {"op": "pool", "kind": rng.choice(("max", "avg"))}, {"op": "pad_conv", "out": width,
                                                                                "act": act}])
    return rng.choice([{"op": "attention", "causal": rng.random() < 0.5}, {"op": "mlp", "act": act},
                       {"op": "token_linear", "act": act}])


# ---- torch modules from a spec ------------------------------------------------------------------------------

def build(spec: dict):
    """The torch module a spec describes (eval mode, weights drawn from its seed)."""
    import torch
    torch.manual_seed(spec["seed"])
    model = _Net(spec)
    for p in model.parameters():                     # weights of the size trained small nets have
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=1.0 / max(1.0, p[0].numel()) ** 0.5)
    for m in model.modules():                        # batch norms with statistics of their own
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _activation(name, functional):
    import torch
    from torch import nn
    F = nn.functional
    if functional:
        return {"relu": F.relu, "relu6": F.relu6, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "gelu": F.gelu,
                "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "hardswish": F.hardswish,
                "hardsigmoid": F.hardsigmoid, "leakyrelu": lambda x: F.leaky_relu(x, 0.1), "elu": F.elu,
                "softplus": F.softplus, "silu": lambda x: x * torch.sigmoid(x)}[name]
    return {"relu": nn.ReLU(), "relu6": nn.ReLU6(), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid(), "gelu": nn.GELU(),
            "gelu_tanh": nn.GELU(approximate="tanh"), "hardswish": nn.Hardswish(), "hardsigmoid": nn.Hardsigmoid(),
            "leakyrelu": nn.LeakyReLU(0.1), "elu": nn.ELU(), "softplus": nn.Softplus(), "silu": nn.SiLU()}[name]


def _net_class():
    import torch
    from torch import nn

    class _Attention(nn.Module):
        """One head of self-attention with its residual: (B, T, D) -> (B, T, D)."""

        def __init__(self, d, t, causal):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln, self.scale, self.causal = nn.LayerNorm(d), d ** -0.5, causal
            self.register_buffer("future", torch.triu(torch.ones(t, t, dtype=torch.bool), 1))

        def forward(self, x):
            h = self.ln(x)
            s = self.q(h) @ self.k(h).transpose(1, 2) * self.scale          # (B, T, T)
            if self.causal:
                s = s.masked_fill(self.future, float("-inf"))
            return x + self.o(torch.softmax(s, dim=-1) @ self.v(h))

    class _Net(nn.Module):
        """The spec's blocks in order (plan: (kind, modules, activation) per block), a mean over the spatial
        or token axes, a Linear head and the head's function."""

        def __init__(self, spec):
            super().__init__()
            self.spec, self.layers, self.plan, shape = spec, nn.ModuleList(), [], list(spec["input"])
            for b in spec["blocks"]:
                shape = _add_block(self, b, shape, _Attention)
            self.head = nn.Linear(shape[0] if spec["family"] != "attention" else shape[-1], spec["head"]["out"])

        def module(self, *mods):
            seq = nn.Sequential(*[m for m in mods if m is not None])
            self.layers.append(seq)
            return seq

        def act(self, name):
            return _activation(name, self.spec["functional"])

        def forward(self, x):
            for step in self.plan:
                x = _step(step, x)
            fam = self.spec["family"]
            if fam in ("conv1d", "conv2d"):
                x = x.mean(dim=tuple(range(2, x.dim())))                        # (B, C)
            elif fam == "attention":
                x = x.mean(dim=1)                                               # (B, D)
            y, fn = self.head(x), self.spec["head"]["fn"]
            if fn == "softmax":
                return torch.softmax(y, dim=-1)
            if fn == "log_softmax":
                return torch.log_softmax(y, dim=-1)
            return torch.tanh(y) if fn == "tanh" else y

    return _Net


def _add_block(net, b, shape, attention):
    """Block b on input `shape` (no batch axis): its modules into net.layers, its step into net.plan; -> the
    output shape."""
    from torch import nn
    fam, op, dims = net.spec["family"], b["op"], len(shape) - 1
    conv = {1: nn.Conv1d, 2: nn.Conv2d}.get(dims)
    bn = {0: nn.BatchNorm1d, 1: nn.BatchNorm1d, 2: nn.BatchNorm2d}[dims if fam != "attention" else 0]
    c, act = (shape[0] if fam != "attention" else shape[-1]), net.act(b["act"]) if "act" in b else None
    if op in ("linear", "linear_ln", "linear_bn"):
        extra = nn.LayerNorm(b["out"]) if op == "linear_ln" else bn(b["out"]) if op == "linear_bn" else None
        net.plan.append(("seq", net.module(nn.Linear(c, b["out"]), extra), act))
        return [b["out"]]
    if op in ("conv", "conv_bn", "pad_conv"):
        k, s = b["k"] if op != "pad_conv" else 3, b.get("stride", 1)
        pad = 0 if op == "pad_conv" else k // 2
        m = net.module(conv(c, b["out"], k, stride=s, padding=pad), bn(b["out"]) if op == "conv_bn" else None)
        net.plan.append(("pad_seq" if op == "pad_conv" else "seq", m, act))
        return [b["out"]] + [(n + 2 * (1 if op == "pad_conv" else pad) - k) // s + 1 for n in shape[1:]]
    if op == "depthwise":
        net.plan.append(("seq", net.module(conv(c, c, b["k"], stride=b["stride"], padding=1, groups=c)), act))
        return [c] + [(n + 2 - 3) // b["stride"] + 1 for n in shape[1:]]
    if op == "residual":
        net.plan.append(("residual", net.module(nn.Linear(c, c) if fam == "mlp" else conv(c, c, 3, padding=1)), act))
        return shape
    if op == "concat":
        a = net.module(nn.Linear(c, b["out"]) if fam == "mlp" else conv(c, b["out"], 1))
        z = net.module(nn.Linear(c, b["out"]) if fam == "mlp" else conv(c, b["out"], 3, padding=1))
        net.plan.append(("concat", (a, z), act))
        return [2 * b["out"]] + shape[1:]
    if op == "gate":
        net.plan.append(("gate", net.module(nn.Linear(c, c)), None))
        return shape
    if op == "pool":
        if min(shape[1:]) < 4:
            return shape                         # too small to pool again: the block is left out
        net.plan.append(("pool", b["kind"], dims))
        return [c] + [n // 2 for n in shape[1:]]
    if op == "attention":
        net.plan.append(("seq", net.module(attention(c, shape[0], b["causal"])), None))
        return shape
    if op == "mlp":
        net.plan.append(("residual_ln", (net.module(nn.LayerNorm(c), nn.Linear(c, 2 * c)),
                                         net.module(nn.Linear(2 * c, c))), act))
        return shape
    net.plan.append(("seq", net.module(nn.Linear(c, c)), act))        # token_linear
    return shape


def _step(step, x):
    """One block of the plan on x."""
    import torch
    F = torch.nn.functional
    kind, m, act = step
    if kind in ("seq", "pad_seq"):
        x = m(F.pad(x, [1, 1] * (x.dim() - 2)) if kind == "pad_seq" else x)
        return act(x) if act is not None else x
    if kind == "residual":
        return act(x + m(x))
    if kind == "residual_ln":
        return x + m[1](act(m[0](x)))
    if kind == "concat":
        return torch.cat([m[0](x), act(m[1](x))], dim=1)
    if kind == "gate":
        return x * torch.sigmoid(m(x))
    pool = {("max", 1): F.max_pool1d, ("avg", 1): F.avg_pool1d, ("max", 2): F.max_pool2d, ("avg", 2): F.avg_pool2d}
    return pool[(m, act)](x, 2)


def _Net(spec):
    return _net_class()(spec)


# ---- export, the ways users export --------------------------------------------------------------------------

def calibration(spec: dict, n: int = 256) -> np.ndarray:
    """Seeded inputs for the spec's model: features of different sizes, as a policy's observations are."""
    rng = np.random.default_rng(spec["seed"] + 1)
    scale = np.exp(rng.uniform(-1.0, 1.0, size=spec["input"][:1] + [1] * (len(spec["input"]) - 1)))
    return (rng.normal(size=[n] + spec["input"]) * scale).astype(np.float32)


def export(spec: dict, out_dir) -> tuple:
    """The spec's model as an fp32 ONNX file and its calibration set in out_dir -> (model.onnx, calib.npy)."""
    import warnings
    import torch
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, path = build(spec), out / "model.onnx"
    x = torch.from_numpy(calibration(spec, 2)[:1 if spec["batch"] == "fixed" else 2])
    names = {"input_names": ["obs/x" if spec["naming"] == "slashes" else "x"], "output_names": ["y"]}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if spec["exporter"] == "dynamo":
            dyn = {"dynamic_shapes": ({0: torch.export.Dim("batch")},)} if spec["batch"] == "dynamic" else {}
            _quiet(lambda: torch.onnx.export(model, (x,), str(path), opset_version=spec["opset"], dynamo=True,
                                             external_data=False, verbose=False, **names, **dyn))
        else:
            dyn = {"dynamic_axes": {names["input_names"][0]: {0: "batch"}}} if spec["batch"] == "dynamic" else {}
            torch.onnx.export(model, (x,), str(path), opset_version=spec["opset"], dynamo=False, **names, **dyn)
    _rename(path, spec["naming"])
    calib = out / "calib.npy"
    np.save(calib, calibration(spec))
    (out / "spec.json").write_text(json.dumps(spec, indent=1))
    return path, calib


def _quiet(fn):
    """Run fn with the dynamo exporter's progress lines (stdout) and logging (stderr) silenced."""
    import contextlib
    import io
    import logging
    level = logging.getLogger("torch").level
    logging.getLogger("torch").setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return fn()
    finally:
        logging.getLogger("torch").setLevel(level)


def _rename(path, naming):
    """Node names as a user's tool may leave them: a/b/c paths, or one name repeated."""
    if naming == "torch":
        return
    import onnx
    model = onnx.load(str(path))
    for i, n in enumerate(model.graph.node):
        n.name = ("model/block.%d/%s" % (i // 3, n.op_type)) if naming == "slashes" else "block/op"
    onnx.save(model, str(path))


# ---- the contract -------------------------------------------------------------------------------------------

def check(spec: dict, out_dir, target: str = "esp32c3", rv32: bool = True) -> dict:
    """Export the spec's model and deploy it as a user would (--onnx, --calibration); -> {"outcome", "reason",
    figures}. outcome: deployed (every figure right), refused (one line), wrong, traceback."""
    import traceback
    from grpo_edge.errors import GrpoEdgeError
    from grpo_edge.targets import deploy
    from grpo_edge.targets.esp32 import rv32 as rv32_sim
    rv32 = rv32 and rv32_sim.available()
    out = Path(out_dir)
    src, calib = export(spec, out)
    dst = out / "esp32"
    options = {"calibration": str(calib), "callgrind": False, "rv32": rv32}
    try:
        report = deploy(target, onnx=str(src), out_dir=str(dst), options=options)
    except GrpoEdgeError as e:        # one line, or a header and a line per op; GateError: below the gate, exit 3
        res = {"outcome": "refused", "reason": str(e).strip()}
        if getattr(e, "report", None) is not None:      # the gate measured it: the artifact must still be right
            verdict = judge(e.report.figures, rv32)
            if verdict["outcome"] == "wrong":
                return verdict
            res.update({k: v for k, v in verdict.items() if k not in ("outcome", "reason")})
        return res
    except Exception as e:  # noqa: BLE001 - the benchmark counts every unexpected exception
        return {"outcome": "traceback", "reason": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e)
                                                                else ""), "traceback": traceback.format_exc()}
    return judge(report.figures, rv32)


def judge(figures: dict, rv32: bool = True) -> dict:
    """A deploy's figures against the contract -> {"outcome": "deployed" | "wrong", "reason", figures}."""
    def value(name):
        f = figures.get(name)
        return getattr(f, "value", None) if not isinstance(f, dict) else f.get("value")
    got = {k: value(k) for k in ("host_bit_exact", "rv32_bit_exact", "ort_max_lsb_per_op", "ort_ops_over_bound",
                                 "decision_agreement_fp32", "activations")}
    faults = []
    if got["host_bit_exact"] is not True:
        faults.append("host C not bit-exact")
    if rv32 and got["rv32_bit_exact"] is not True:
        faults.append("rv32 not bit-exact (%s)" % got["rv32_bit_exact"])
    if got["ort_ops_over_bound"] is None or got["ort_ops_over_bound"] > 0:
        faults.append("%s ops beyond their LSB bound from onnxruntime (the largest: %s LSB)"
                      % (got["ort_ops_over_bound"], got["ort_max_lsb_per_op"]))
    if faults:
        return dict(got, outcome="wrong", reason="; ".join(faults))
    if got["decision_agreement_fp32"] is None or got["decision_agreement_fp32"] < GATE:
        return dict(got, outcome="below_gate", reason="decision agreement %s < %s, yet deployed (exit 0)"
                    % (got["decision_agreement_fp32"], GATE))
    return dict(got, outcome="deployed", reason="")
