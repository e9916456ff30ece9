"""Jetson deploy end to end on the host: files, scripts, int8 artefacts sharing one calibration,
simulated numerics, estimates. The TensorRT build/run path needs tensorrt + CUDA (skipped here)."""
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys

from pathlib import Path

import numpy as np
import onnx
import pytest

import session_cache
from conftest import need_tool
import torch
from onnx import numpy_helper

from grpo_edge.errors import TargetError
from grpo_edge.targets.jetson import deploy
from grpo_edge.targets.jetson.calib_cache import read_calib_cache
from grpo_edge.targets.jetson.quantize import fake_quant

HERE = os.path.dirname(os.path.abspath(__file__))


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    torch.manual_seed(0)
    path = str(tmp_path_factory.mktemp("onnx") / "tiny.onnx")
    torch.onnx.export(Tiny().eval(), (torch.randn(2, 1, 8, 8),), path, dynamo=False, opset_version=17,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    return path


def _calib(n=250):          # the int8 gate holds 100 out (targets/gate.py:hold_out), 150 calibrate
    return np.random.default_rng(1).random((n, 1, 8, 8), dtype=np.float32)


def test_fake_quant_rounding_and_range():
    x = np.array([0.5, 1.5, 2.5, -0.5, 300.0, -300.0], np.float32)
    assert fake_quant(x, 1.0).tolist() == [0.0, 2.0, 2.0, -0.0, 127.0, -127.0]   # half to even, +-127
    w = np.array([[1.0, -2.0], [0.1, 0.05]], np.float32)
    got = fake_quant(w, np.abs(w).max(axis=1) / 127, axis=0)
    assert got[0, 1] == -2.0 and got[1, 0] == pytest.approx(0.1)


def test_deploy_onnx_fp16_nano(tiny_onnx, tmp_path):
    out = tmp_path / "nano"
    rep = deploy(tiny_onnx, "jetson-nano", str(out), {"precision": "fp16", "calibration": _calib()})
    names = {p.name for p in out.iterdir()}
    assert {"model.onnx", "build_engine.sh", "build_engine.py", "run_engine.py", "README.md", "deploy.json",
            "sample.model.npz", "report.json", "report.md"} <= names
    assert not any(n.endswith(".calib.cache") for n in names)
    for key in ("latency", "energy_per_inference"):
        f = rep.figures[key]
        assert f.how == "estimated" and f.value > 0 and "data sheet" in f.source
    num = rep.sections["numerics (host simulation vs fp32 ONNX)"][0]
    assert num["engine"].startswith("fp16") and num["rel_err"] < 1e-2 and num["argmax_agreement"] == 1.0
    assert all(r["status"] == "supported" for r in rep.sections["op check"])
    cfg = json.loads((out / "deploy.json").read_text())
    assert cfg["trt_version"] == "8.2.1" and cfg["graphs"][0]["inputs"][0]["max"] == [8, 1, 8, 8]
    sh = (out / "build_engine.sh").read_text()
    assert "--minShapes=image:1x1x8x8 --optShapes=image:1x1x8x8 --maxShapes=image:8x1x8x8" in sh
    assert "--fp16" in sh and "do not edit" in sh
    assert subprocess.run(["bash", "-n", str(out / "build_engine.sh")]).returncode == 0
    sample = np.load(str(out / "sample.model.npz"))
    assert sample["in:image"].shape == (8, 1, 8, 8) and sample["ref:logits"].shape == (8, 5)
    report = json.loads((out / "report.json").read_text())
    assert report["target"] == "jetson-nano"


def test_device_scripts_run_without_tensorrt(tmp_path):
    """build_engine.py / run_engine.py: Python 3.6 syntax, importable and --help without tensorrt."""
    src = os.path.join(HERE, os.pardir, "grpo_edge", "runtime")
    for name in ("build_engine.py", "run_engine.py"):
        path = os.path.join(src, name)
        py_compile.compile(path, cfile=str(tmp_path / (name + "c")), doraise=True)
        r = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "--precision" in r.stdout
        assert "import grpo_edge" not in open(path).read()
    vermin = need_tool("vermin", "pip install vermin")
    r = subprocess.run([vermin, "-t=3.6-", "--no-tips", "--violations", os.path.join(src, "build_engine.py"),
                        os.path.join(src, "run_engine.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_deploy_int8_shares_one_calibration(tiny_onnx, tmp_path):
    out = tmp_path / "orin"
    rep = deploy(tiny_onnx, "jetson-orin-nano", str(out), {"precision": "int8", "calibration": _calib()})
    cache = read_calib_cache(out / "model.calib.cache")
    assert (cache.version, cache.algorithm) == (8201, "EntropyCalibration2")
    assert "image" in cache.scales and "logits" in cache.scales
    qdq = onnx.load(str(out / "model.int8.qdq.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    shared = 0
    for n in qdq.graph.node:
        if n.op_type == "QuantizeLinear":
            assert inits[n.input[2]].dtype == np.int8 and not inits[n.input[2]].any()   # TensorRT: int8, zp 0
            if n.input[0] in cache.scales:
                assert float(inits[n.input[1]]) == cache.scales[n.input[0]]
                shared += 1
    assert shared >= 2                                   # the input and at least one activation
    rows = rep.sections["numerics (host simulation vs fp32 ONNX)"]
    assert [r["engine"].endswith("<- this device") for r in rows] == [False, True]   # Orin: Q/DQ route
    assert all(r["rel_err"] < 0.1 for r in rows)
    sh = (out / "build_engine.sh").read_text()
    assert "--onnx=model.int8.qdq.onnx" in sh and "--calib=model.calib.cache" in sh and "memPoolSize" in sh
    assert rep.sections["calibration"][0]["header"] == "TRT-8201-EntropyCalibration2"


def test_int8_needs_calibration(tiny_onnx, tmp_path):
    with pytest.raises(TargetError, match="calibration data"):
        deploy(tiny_onnx, "jetson-nano", str(tmp_path), {"precision": "int8"})


def test_bad_options(tiny_onnx, tmp_path):
    with pytest.raises(TargetError, match="precision"):
        deploy(tiny_onnx, "jetson-nano", str(tmp_path), {"precision": "int4"})
    with pytest.raises(TargetError, match="TensorRT version"):
        deploy(tiny_onnx, "jetson-nano", str(tmp_path), {"trt_version": "7.1.3"})
    with pytest.raises(TargetError, match="jetson"):
        deploy(tiny_onnx, "rpi4", str(tmp_path), {})


def test_unsupported_op_fails_with_op_and_node(tmp_path):
    g = onnx.helper.make_graph([onnx.helper.make_node("NonZero", ["x"], ["y"], name="find_nonzero")], "g",
                               [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2, "n"])])
    path = tmp_path / "nz.onnx"
    onnx.save(onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(TargetError) as e:
        deploy(str(path), "jetson-nano", str(tmp_path / "out"), {"precision": "fp32"})
    assert "NonZero" in str(e.value) and "find_nonzero" in str(e.value) and "\n" not in str(e.value)
    assert (tmp_path / "out" / "report.md").exists()


def test_tensorrt_path_is_skipped_without_tensorrt(tiny_onnx, tmp_path):
    from grpo_edge.targets.jetson.device import build_and_measure, tensorrt_ready
    if tensorrt_ready():
        pytest.skip("tensorrt + CUDA present: covered by test_build_and_measure_on_gpu")
    assert build_and_measure(tmp_path, {"graphs": []}) is None


def test_build_and_measure_on_gpu(tiny_onnx, tmp_path):
    pytest.importorskip("tensorrt", reason="TensorRT is not installable on this machine (see toolchain notes)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rep = deploy(tiny_onnx, "jetson-orin-nano", str(tmp_path), {"precision": "fp16", "calibration": _calib()})
    assert rep.figures["latency_trt"].how in ("measured-device", "measured-host")
    assert rep.sections["on-device"][0]["max_abs_err_vs_fp32"] < 1e-2


# --- trained checkpoints: the simulated engines keep >= 99% of the fp32 task metric ---------------------

@pytest.mark.parametrize("task, target", [("cartpole", "jetson-nano"), ("digits", "jetson-orin-nano")])
def test_checkpoint_int8_keeps_task_metric(task, target, tmp_path):
    ckpt = str(session_cache.checkpoint(task))
    rep = deploy(ckpt, target, str(tmp_path / "out"), {"precision": "int8"})
    rows = rep.sections["task metric (host simulation)"]
    assert [r["engine"] for r in rows] == ["fp32", "int8-cache", "int8-qdq"]
    assert all(r["meets_99pct"] for r in rows), rows
    if task == "cartpole":
        assert rows[0]["return"] > 400           # the fixture balances the pole
        assert any("no fast int8" in n for n in rep.notes)   # the Nano's Maxwell GPU
    assert rep.sections["export"]["opset"] == (13 if target == "jetson-nano" else 17)


def test_deploy_int8_nano_from_calibration_file(tiny_onnx, tmp_path):
    np.save(str(tmp_path / "calib.npy"), _calib(300))
    rep = deploy(tiny_onnx, "jetson-nano", str(tmp_path / "nano"),
                 {"precision": "int8", "calibration": str(tmp_path / "calib.npy"), "calib_method": "percentile"})
    rows = rep.sections["numerics (host simulation vs fp32 ONNX)"]
    assert rows[0]["engine"].endswith("<- this device")            # Nano: the calibration-cache route
    assert rep.sections["calibration"][0]["samples"] == 200         # 100 held out to measure the gate on
    assert rep.sections["calibration"][0]["method"] == "percentile"
    assert any("no fast int8" in n for n in rep.notes)
    assert "--workspace=256" in (tmp_path / "nano" / "build_engine.sh").read_text()


@pytest.mark.parametrize("kind", ["arithmetic", "zh-en-numbers"])
def test_text_kit_profile_spans_the_decode_loop(kind, tmp_path):
    """A text model's optimisation profile follows its decode loop: micro-gpt's cache from 0 (the first
    step has none) to the last step of prompt + answer, within max_len; tiny-transformer's source at the
    prompt length and its decoder prefix from BOS to BOS + the answer (issue 29: it started at 1 and went to 64)."""
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.export.decode_calibration import text_config
    ckpt = str(session_cache.text_checkpoint(kind))
    deploy(ckpt, "jetson-orin-nano", str(tmp_path / "kit"), {"precision": "fp16", "evaluate": False})
    c = text_config(load_policy(ckpt)[1])
    cfg = json.loads((tmp_path / "kit" / "deploy.json").read_text())
    assert not os.path.isabs(cfg["source"]) and (tmp_path / "kit" / cfg["source"]).resolve() == Path(ckpt).resolve()
    dims = {(g["name"], i["name"]): i for g in cfg["graphs"] for i in g["inputs"]}
    sh = (tmp_path / "kit" / "build_engine.sh").read_text()
    if kind == "arithmetic":
        past = dims[("model", "past_keys")]
        last = min(c["max_len"], c["input_len"] + c["max_new_tokens"]) - 1
        assert past["min"][3] == 0 and past["max"][3] == last <= c["max_len"] - 1
        assert "past_keys:%s" % "x".join(map(str, past["min"])) in sh
    else:
        src, tgt = dims[("decoder_step", "src")], dims[("decoder_step", "tgt_prefix")]
        assert src["min"][1] == src["max"][1] == c["input_len"]
        assert tgt["min"][1] == 1 and tgt["max"][1] == min(c["max_len"], c["max_new_tokens"] + 1)
    _check_text_decode_loop(tmp_path / "kit", capsys=None)


class _OrtStandIn(object):
    """TensorRT cannot be installed here: this runs the engine's ONNX graph (model.fp16.engine ->
    model.onnx) in onnxruntime behind run_engine.Engine's interface (inputs, __call__ -> {name: array}), so the
    kit's decode loop, its engine plumbing and its --check run for real up to the engine itself."""

    def __init__(self, engine_path):
        import onnxruntime as ort
        self.sess = ort.InferenceSession(re.sub(r"\.\w+\.engine$", ".onnx", engine_path),
                                         providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.sess.get_inputs()]
        self.outputs = [o.name for o in self.sess.get_outputs()]

    def __call__(self, feed):
        return dict(zip(self.outputs, self.sess.run(None, feed)))


def _check_text_decode_loop(kit, capsys=None):
    """The kit has the decode loop (textgen.py, tokenizer.json, golden prompts); run_engine.py --prompts
    prompts.txt --check through the engines' graphs completes them as the checkpoint did; README says how."""
    import contextlib
    import io
    from grpo_edge.runtime import run_engine
    for name in ("textgen.py", "char_tokenizer.py", "tokenizer.json", "prompts.txt", "expected_completions.json"):
        assert (kit / name).is_file(), name
    assert "run_engine.py --prompts prompts.txt --check" in (kit / "README.md").read_text()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = run_engine.main(["--config", str(kit / "deploy.json"), "--prompts", str(kit / "prompts.txt"),
                                "--check", "--min-agreement", "1.0"], engine_cls=_OrtStandIn)
    res = json.loads(buf.getvalue())
    assert code == 0 and res["agreement_with_checkpoint"] == 1.0 and len(res["completions"]) >= 8
