"""16x8 .tflite models (int16 activations, int8 weights, int64 biases, as TensorFlow's converter writes them in
its 16x8 mode) through the TFLite front end (parse_tflite.py + tflite16.py): the NumPy reference and the
generated C equal TFLite Micro on the very same file; what cannot be compiled is one line."""
import json

import numpy as np
import pytest

from conftest import cli_in, need, one_error_line

from grpo_edge.bench import tiny_models as T
from grpo_edge.errors import ExportError
from grpo_edge.targets.esp32 import codegen, rv32, simulate, tflm
from grpo_edge.targets.esp32 import reference as R
from grpo_edge.targets.esp32.parse_tflite import tflite2ir


def _schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
    return tfl


def _write(tmp_path, name, edit=None):
    p = tmp_path / (name + "16.tflite")
    buf = T.build(name, activations="int16")
    if edit is not None:
        import flatbuffers
        m = _schema().ModelT.InitFromPackedBuf(bytearray(buf), 0)
        edit(m)
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        buf = bytes(b.Output())
    p.write_bytes(buf)
    return p


def _inputs(name, g, n_random=20):
    t = g.tensors[g.input]
    x = np.random.default_rng(1).integers(-32768, 32768, size=(n_random,) + t.shape[1:]).astype(np.int16)
    return np.concatenate([T.sample_inputs(name, 5, activations="int16"), x])


@pytest.mark.parametrize("name", list(T.MODELS))
def test_16x8_reference_and_host_c_equal_tflm(tmp_path, name):
    need(tflm.available(), "pip install tflite-micro")
    p = _write(tmp_path, name)
    g = tflite2ir(p)
    assert g.activation_dtype == "int16" and g.tensors[g.input].dtype == "int16"
    weighted = [op for op in g.ops if op.kind in ("fc16", "conv16")]
    assert weighted and all(op.attrs["requant64"] for op in weighted)
    x = _inputs(name, g)
    y = tflm.run(p, x, tmp_path, 1 << 22).reshape(len(x), -1)
    ref = R.run(g, x).reshape(len(x), -1)
    assert ref.dtype == np.int16 and np.array_equal(ref, y)
    assert len(np.unique(ref, axis=0)) > 1
    gen = codegen.generate(g, name)
    assert "_r64(" in gen.source
    assert simulate.host_check(g, gen, x[:8])["bit_exact"]


def test_16x8_int64_rule_is_what_makes_it_exact(tmp_path):
    """The int32 requantization instead of TFLM's int64 one (what a 16x8 ONNX model's int32 bias selects) is
    measurably off on the same file: the test above could fail."""
    need(tflm.available(), "pip install tflite-micro")
    p = _write(tmp_path, "fc_autoencoder")
    g = tflite2ir(p)
    x = _inputs("fc_autoencoder", g)
    y = tflm.run(p, x, tmp_path, 1 << 22).reshape(len(x), -1)
    for op in g.ops:
        op.attrs["requant64"] = False
    assert np.abs(R.run(g, x).reshape(len(x), -1).astype(np.int64) - y).max() >= 1


@pytest.mark.parametrize("name", ["kws_streaming", "fc_autoencoder"])
def test_16x8_rv32_equals_tflm(tmp_path, name):
    need(tflm.available(), "pip install tflite-micro")
    need(rv32.available(), rv32.missing_reason())
    p = _write(tmp_path, name)
    g = tflite2ir(p)
    x = _inputs(name, g, 3)
    assert rv32.rv32_check(g, codegen.generate(g, name), x)["bit_exact"]


def _bias_to_int32(m):
    tfl = _schema()
    for t in m.subgraphs[0].tensors:
        if t.type == tfl.TensorType.INT64:
            b = m.buffers[t.buffer]
            b.data = list(np.frombuffer(bytes(bytearray(b.data)), np.int64).astype(np.int32).tobytes())
            t.type = tfl.TensorType.INT32


def _huge_bias(m):
    tfl = _schema()
    t = [t for t in m.subgraphs[0].tensors if t.type == tfl.TensorType.INT64][0]
    b = m.buffers[t.buffer]
    v = np.frombuffer(bytes(bytearray(b.data)), np.int64).copy()
    v[0] = 1 << 40
    b.data = list(v.tobytes())


def _one_int8_activation(m):
    """The softmax's input as int8: a model mixing int8 and int16 activations."""
    tfl = _schema()
    sg = m.subgraphs[0]
    names = {i: k for k, i in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
    sm = [op for op in sg.operators if names[m.operatorCodes[op.opcodeIndex].builtinCode] == "SOFTMAX"][0]
    sg.tensors[sm.inputs[0]].type = tfl.TensorType.INT8


@pytest.mark.parametrize("edit,words", [
    (_bias_to_int32, "an int64 bias expected in a 16x8 model"),
    (_huge_bias, "beyond int32"),
    (_one_int8_activation, "int8")])
def test_16x8_refusals_are_one_line_nothing_written(tmp_path, edit, words):
    p = _write(tmp_path, "kws_streaming", edit)
    with pytest.raises(ExportError) as e:
        tflite2ir(p)
    assert words in str(e.value) and "\n" not in str(e.value)
    r = cli_in(tmp_path, "deploy", "--target", "esp32c3", "--tflite", p, "--out", tmp_path / "out")
    assert words in one_error_line(r)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_16x8_deploy_to_the_s3_says_esp_nn_is_not_used_and_passes(tmp_path):
    """On the S3 a 16x8 model is compiled for the plain C kernels (ESP-NN has none for 16x8), which the report
    says; the gate is TFLM's outputs, the form int16; the firmware's API takes int16."""
    need(tflm.available(), "pip install tflite-micro")
    p = _write(tmp_path, "kws_streaming")
    r = cli_in(tmp_path, "deploy", "--target", "esp32s3", "--tflite", p, "--out", "out",
               "--option", "rv32=false", "--option", "callgrind=false")
    assert r.returncode == 0, r.stderr
    assert "outputs equal to TFLM's 1.0000" in r.stdout and "passed (int16)" in r.stdout
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    notes = " ".join(rep["notes"])
    assert "ESP-NN has no 16x8 kernels" in notes and "int64 biases" in notes
    header = next((tmp_path / "out" / "firmware").rglob("*.h"))
    assert "int16_t" in header.read_text()
