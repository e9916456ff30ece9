"""The MLPerf Tiny architectures as int8 .tflite files (bench/tiny_models.py) through the TFLite front end: the
NumPy reference and the generated C equal TFLM on the same file, on sample inputs and random ones across the
int8 range; the small models on rv32 too (the five on both chips run in tests/test_tflite_deploy.py)."""
import numpy as np
import pytest

from conftest import need

from grpo_edge.bench import tiny_models as T
from grpo_edge.targets.esp32 import codegen, rv32, simulate, tflm
from grpo_edge.targets.esp32 import reference as R
from grpo_edge.targets.esp32.parse_tflite import tflite2ir


def _inputs(name, g, n_random=20):
    t = g.tensors[g.input]
    x = np.random.default_rng(1).integers(-128, 128, size=(n_random,) + t.shape[1:]).astype(np.int8)
    return np.concatenate([T.sample_inputs(name, 5), x])


@pytest.mark.parametrize("per_channel_fc", [False, True])
@pytest.mark.parametrize("name", list(T.MODELS))
def test_reference_and_host_c_equal_tflm(tmp_path, name, per_channel_fc):
    need(tflm.available(), "pip install tflite-micro")
    p = tmp_path / (name + ".tflite")
    T.write_model(name, p, per_channel_fc=per_channel_fc)
    g = tflite2ir(p)
    x = _inputs(name, g)
    y = tflm.run(p, x, tmp_path, 1 << 20).reshape(len(x), -1)
    ref = R.run(g, x).reshape(len(x), -1)
    assert np.array_equal(ref, y.astype(ref.dtype))
    assert len(np.unique(ref, axis=0)) > 1
    if per_channel_fc and name not in ("fc_autoencoder", "kws_streaming"):
        return                                    # the C of the rest is the same as without per-channel FC
    gen = codegen.generate(g, name)
    assert simulate.host_check(g, gen, x)["bit_exact"]


@pytest.mark.parametrize("name", ["ds_cnn", "fc_autoencoder", "kws_streaming"])
def test_rv32_equals_tflm(tmp_path, name):
    need(tflm.available(), "pip install tflite-micro")
    need(rv32.available(), rv32.missing_reason() if hasattr(rv32, "missing_reason") else "rv32 toolchain")
    p = tmp_path / (name + ".tflite")
    T.write_model(name, p)
    g = tflite2ir(p)
    x = _inputs(name, g, 5)
    r = rv32.rv32_check(g, codegen.generate(g, name), x)
    assert r["bit_exact"]
    y = tflm.run(p, x, tmp_path, 1 << 20).reshape(len(x), -1)
    assert np.array_equal(R.run(g, x).reshape(len(x), -1), y.astype(np.int8))
