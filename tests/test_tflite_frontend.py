"""The TFLite front end (targets/esp32/parse_tflite.py): int8 .tflite files -> the IR, bit-exact with TFLite Micro
on the very same file (real TFLM, generated C really compiled); bad files refused in one line, nothing written."""
import os

import numpy as np
import pytest

from conftest import cli_in, need, one_error_line

import session_cache

from grpo_edge.errors import ExportError
from grpo_edge.targets.esp32 import codegen, simulate, tflm
from grpo_edge.targets.esp32 import reference as R
from grpo_edge.targets.esp32.parse_tflite import tflite2ir



def _need_tflm():
    need(tflm.available(), "pip install tflite-micro")


def _schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
    return tfl


def _pack(model) -> bytes:
    import flatbuffers
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _unpack(buf):
    return _schema().ModelT.InitFromPackedBuf(bytearray(buf), 0)


@pytest.fixture(scope="module")
def resnet_tflite(tmp_path_factory):
    """The session's small ResNet (conv, depthwise, residual add, pad, pools, mean, fc) as an int8 .tflite written
    by the project's TFLM writer (tflm.to_tflite)."""
    _need_tflm()
    from grpo_edge.targets.esp32 import parse
    g = parse.parse(session_cache.sample("resnet"))
    path = tmp_path_factory.mktemp("tfl") / "resnet.tflite"
    path.write_bytes(tflm.to_tflite(g)[0])
    return path


def _tflm_equal(path, g, n=40, seed=0):
    """Our NumPy reference vs TFLM on the same file, on n random inputs across the input range."""
    t = g.tensors[g.input]
    x = np.random.default_rng(seed).integers(t.qmin, t.qmax + 1, size=(n,) + t.shape[1:]).astype(t.np_dtype)
    y = tflm.run(path, x, os.path.dirname(str(path)), 1 << 18).reshape(n, -1)
    ref = R.run(g, x).reshape(n, -1)
    return x, int(np.abs(y.astype(np.int64) - ref.astype(np.int64)).max())


def test_resnet_tflite_is_bit_exact_with_tflm_and_its_c(resnet_tflite):
    g = tflite2ir(resnet_tflite)
    assert g.io_layout == "tflite" and g.tensors[g.input].shape == (1, 8, 8, 1)
    assert {"conv", "add", "pad", "maxpool", "avgpool", "fc"} <= {op.kind for op in g.ops}
    assert len(g.owners) == len(_unpack(resnet_tflite.read_bytes()).subgraphs[0].operators)
    x, diff = _tflm_equal(resnet_tflite, g)
    assert diff == 0
    gen = codegen.generate(g, "rt")
    assert simulate.host_check(g, gen, x)["bit_exact"]


def test_per_tensor_fc_uses_tflms_float_product(tmp_path, resnet_tflite):
    """A per-tensor FULLY_CONNECTED filter scale: TFLM's multiplier is double(float(s_in * s_w)) / s_out, not the
    per-channel double product; the front end reads which one the file asks for."""
    m = _unpack(resnet_tflite.read_bytes())
    sg = m.subgraphs[0]
    names = {i: k for k, i in vars(_schema().BuiltinOperator).items() if not k.startswith("_")}
    fc = [op for op in sg.operators if names[m.operatorCodes[op.opcodeIndex].builtinCode] == "FULLY_CONNECTED"][0]
    for i in fc.inputs[1:]:                     # one scale for the filter and the bias
        q = sg.tensors[i].quantization
        q.scale, q.zeroPoint = [float(np.float32(q.scale[0]))], [0]
    p = tmp_path / "per_tensor.tflite"
    p.write_bytes(_pack(m))
    g = tflite2ir(p)
    op = [o for o in g.ops if o.kind == "fc"][0]
    assert len(set(op.attrs["multiplier"].tolist())) == 1
    assert _tflm_equal(p, g)[1] == 0


def _bad(tmp_path, edit, name="bad.tflite", src=None):
    m = _unpack(src.read_bytes())
    edit(m)
    p = tmp_path / name
    p.write_bytes(_pack(m))
    return p


def _conv_filter(m):
    sg = m.subgraphs[0]
    names = {i: k for k, i in vars(_schema().BuiltinOperator).items() if not k.startswith("_")}
    conv = [op for op in sg.operators if names[m.operatorCodes[op.opcodeIndex].builtinCode] == "CONV_2D"][0]
    return sg, conv


def _zero_scale(m):
    sg, conv = _conv_filter(m)
    sg.tensors[conv.outputs[0]].quantization.scale = [0.0]


def _nan_scale(m):
    sg, conv = _conv_filter(m)
    sg.tensors[conv.inputs[1]].quantization.scale[0] = float("nan")


def _missing_buffer(m):
    sg, conv = _conv_filter(m)
    sg.tensors[conv.inputs[1]].buffer = len(m.buffers) + 5


def _bad_shape(m):
    sg, conv = _conv_filter(m)
    t = sg.tensors[conv.outputs[0]]
    t.shape = [1, 3, 3, int(t.shape[3])]


def _two_subgraphs(m):
    m.subgraphs = [m.subgraphs[0], m.subgraphs[0]]


@pytest.mark.parametrize("edit,words", [
    (_zero_scale, "zero, negative or non-finite scale"), (_nan_scale, "non-finite scale"),
    (_missing_buffer, "buffer"), (_bad_shape, "but the operator computes"), (_two_subgraphs, "2 subgraphs")])
def test_bad_files_one_line_naming_the_tensor_nothing_written(tmp_path, resnet_tflite, edit, words):
    p = _bad(tmp_path, edit, src=resnet_tflite)
    with pytest.raises(ExportError) as e:
        tflite2ir(p)
    assert words in str(e.value) and "\n" not in str(e.value)
    if edit is not _two_subgraphs:
        assert "tensor" in str(e.value) or "operator" in str(e.value)
    r = cli_in(tmp_path, "deploy", "--target", "esp32c3", "--tflite", p, "--out", tmp_path / "out")
    assert words in one_error_line(r)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_truncated_and_foreign_files(tmp_path, resnet_tflite):
    raw = resnet_tflite.read_bytes()
    (tmp_path / "half.tflite").write_bytes(raw[:len(raw) // 2])
    (tmp_path / "model.tflite").write_bytes(open(session_cache.sample("resnet"), "rb").read())   # an ONNX file
    (tmp_path / "empty.tflite").write_bytes(b"")
    for name, words in (("half.tflite", "truncated or corrupt"), ("model.tflite", "not a TFLite model"),
                        ("empty.tflite", "not a TFLite model")):
        r = cli_in(tmp_path, "deploy", "--target", "esp32s3", "--tflite", name, "--out", "out_" + name)
        line = one_error_line(r)
        assert words in line and name in line
        assert not (tmp_path / ("out_" + name)).exists()


def test_unsupported_ops_all_listed_with_their_index(tmp_path, resnet_tflite):
    """Operators the compiler does not read (here the ResNet's ADD and MAX_POOL_2D turned into SQUARED_DIFFERENCE
    and L2_POOL_2D) are refused together in one line, each with its index, those behind another refusal too."""
    tfl = _schema()
    m = _unpack(resnet_tflite.read_bytes())
    swap = {tfl.BuiltinOperator.ADD: tfl.BuiltinOperator.SQUARED_DIFFERENCE,
            tfl.BuiltinOperator.MAX_POOL_2D: tfl.BuiltinOperator.L2_POOL_2D}
    names = {i: k for k, i in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
    for oc in m.operatorCodes:
        if oc.builtinCode in swap:
            oc.builtinCode = oc.deprecatedBuiltinCode = swap[oc.builtinCode]
    ops = [names[m.operatorCodes[op.opcodeIndex].builtinCode] for op in m.subgraphs[0].operators]
    unsupported = [k for k, n in enumerate(ops) if n in ("SQUARED_DIFFERENCE", "L2_POOL_2D")]
    assert len(unsupported) >= 2
    p = tmp_path / "odd.tflite"
    p.write_bytes(_pack(m))
    r = cli_in(tmp_path, "deploy", "--target", "esp32c3", "--tflite", p, "--out", tmp_path / "out")
    line = one_error_line(r)
    assert "%d operators of odd.tflite cannot be compiled" % len(unsupported) in line
    for k in unsupported:
        assert "%d %s" % (k, ops[k]) in line
    assert not (tmp_path / "out").exists()


def test_deploy_tflite_cli_passes_its_gate_and_reports_tflm(tmp_path, resnet_tflite):
    codes = np.random.default_rng(3).integers(-128, 128, size=(5, 8, 8, 1)).astype(np.int8)
    np.save(tmp_path / "inputs.npy", codes)
    r = cli_in(tmp_path, "deploy", "--target", "esp32c3", "--tflite", resnet_tflite, "--out", "out",
               "--calibration", "inputs.npy", "--option", "rv32=false", "--option", "callgrind=false")
    assert r.returncode == 0, r.stderr
    assert "outputs equal to TFLM's 1.0000" in r.stdout and "the 5 of --calibration" in r.stdout
    import json
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    tb = rep["sections"]["tflm_baseline"]
    assert tb["model"] == "the source .tflite itself" and tb["outputs"]["bit_exact"]
    assert rep["figures"]["tflm_arena_bytes"]["value"] > rep["figures"]["arena_bytes"]["value"]
    r = cli_in(tmp_path, "deploy", "--target", "rpi4", "--tflite", resnet_tflite, "--out", "pi")
    assert "--tflite deploys to the esp32 targets" in one_error_line(r)


def test_s3_deploy_reports_the_esp_nn_estimate_labelled(tmp_path):
    """On the S3 the report puts ours beside TFLM's reference kernels and TFLM + ESP-NN, per op and in all, every
    figure labelled an estimate with its sources (espnn_estimate.py)."""
    _need_tflm()
    from conftest import need_tool
    need_tool("valgrind")
    from grpo_edge.bench import tiny_models as T
    from grpo_edge.targets import deploy
    p = tmp_path / "kws.tflite"
    T.write_model("kws_streaming", p)
    rep = deploy("esp32s3", tflite=str(p), out_dir=str(tmp_path / "out"), options={"n_callgrind": 3})
    e = rep.sections["s3_estimate"]
    assert e["label"].startswith("ESTIMATE") and "esp-nn" in e["sources"]
    assert {r["class"] for r in e["ops"]} >= {"conv", "conv1x1", "fc", "reference"}
    dilated = [r for r in e["ops"] if r["kind"] == "conv" and r["class"] == "reference"]
    assert len(dilated) == 1 and dilated[0]["esp_nn_speedup"] == 1.0 and not dilated[0]["esp_nn_in_ours"]
    m = e["model"]
    assert m["tflm_esp_nn_us"] < m["tflm_reference_us"] and m["ours_us"] > 0
    assert rep.figures["s3_estimate_tflm_esp_nn_us"].how == "estimated"
    assert "person detection" in rep.figures["s3_estimate_tflm_esp_nn_us"].source
    md = (tmp_path / "out" / "report.md").read_text()
    assert "ESTIMATE, ESP32-S3" in md
    # the lever: the S3 firmware calls ESP-NN (an ESP-IDF component) for the conv, depthwise, pool and fc ops
    assert rep.figures["esp_nn_ops"].value >= 4 and m["ours_esp_nn_us"] < m["ours_us"]
    comp = tmp_path / "out" / "firmware" / "components" / "grpo_model"
    assert "espressif/esp-nn" in (comp / "idf_component.yml").read_text()
    assert "GX_USE_ESP_NN" in (comp / "CMakeLists.txt").read_text()
    assert "CONFIG_NN_OPTIMIZED=y" in (tmp_path / "out" / "firmware" / "sdkconfig.defaults").read_text()
    assert rep.sections["tflm_baseline"]["test_vectors"]["equal_tflm"]


def test_bench_tflite_cli_writes_the_comparison(tmp_path):
    """`grpo-edge bench --tflite M --targets esp32c3`: the deploy's figures, ours vs TFLM, as a table and JSON."""
    _need_tflm()
    from grpo_edge.bench import tiny_models as T
    T.write_model("kws_streaming", tmp_path / "kws.tflite")
    r = cli_in(tmp_path, "bench", "--tflite", "kws.tflite", "--targets", "esp32c3", "--out", "b")
    assert r.returncode == 0, r.stderr
    assert "| kws | esp32c3 | True / True / True |" in r.stdout
    import json
    rows = json.loads((tmp_path / "b" / "bench.json").read_text())["rows"]
    assert rows[0]["tflm_bit_exact"] and rows[0]["arena_bytes"] < rows[0]["tflm_arena_bytes"]
    r = cli_in(tmp_path, "bench", "--tflite", "kws.tflite", "--targets", "rpi4", "--out", "b2")
    assert "esp32 targets" in one_error_line(r)
    r = cli_in(tmp_path, "bench", "--tflite", "nope.tflite")
    assert "nope.tflite" in one_error_line(r)
