"""The MLPerf Tiny architectures as int8 .tflite files (bench/tiny_models.py) through the TFLite front end: the
NumPy reference and the generated C equal TFLM on the same file, on sample inputs and random ones across the
int8 range; the small models on rv32 too (the five deployed to both chips: benchmarks/tflite_models.py)."""
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


@pytest.mark.parametrize("name", list(T.MODELS))
def test_nhwc_layout_for_esp_nn_equals_tflm(tmp_path, name):
    """Read NHWC (the S3's layout, ESP-NN's): our NHWC kernels on the host equal TFLM; where a checkout of ESP-NN
    is given ($GRPO_EDGE_ESP_NN_SRC), the same C calling ESP-NN's ANSI kernels equals it too."""
    need(tflm.available(), "pip install tflite-micro")
    from grpo_edge.targets.esp32 import esp_nn_adapters as E
    p = tmp_path / (name + ".tflite")
    T.write_model(name, p)
    g = tflite2ir(p, layout="nhwc")
    E.prepare(g)
    assert g.layout == "nhwc" and all(op.attrs.get("layout") == "nhwc" for op in g.ops if op.kind == "conv")
    x = _inputs(name, g, 10)
    y = tflm.run(p, x, tmp_path, 1 << 20).reshape(len(x), -1)
    assert np.array_equal(R.run(g, x).reshape(len(x), -1), y.astype(np.int8))
    gen = codegen.generate(g, name)
    assert gen.esp_nn_ops and "#ifdef GX_USE_ESP_NN" in gen.source
    assert simulate.host_check(g, gen, x[:6])["bit_exact"]
    src = E.source_dir()
    if src is None:
        pytest.skip("ESP-NN's source is not on the package registries: set %s to a checkout of espressif/esp-nn"
                    % E.ENV_SRC)
    r = E.host_check(g, gen, x, src)
    assert r["bit_exact"] and r["esp_nn_ops"] == len(gen.esp_nn_ops)


def test_esp_nn_scratch_rules_cover_the_kernels_paths():
    """The scratch the planner reserves for ESP-NN's S3 kernels (its size rules, checked again at run time by the
    firmware): each branch of the rules gives a positive size that grows with the shapes."""
    from grpo_edge.targets.esp32.esp_nn_adapters import conv_scratch_s3, dw_scratch_s3
    one = conv_scratch_s3(25, 5, 64, 1, 1, 25, 5, 64, (1, 1), (0, 0))            # 1x1 stride 1
    assert one == 64 * 64 + 2 * 8 * 64 + 64
    assert conv_scratch_s3(49, 10, 1, 10, 4, 25, 5, 64, (2, 2), (4, 1)) > 0      # the im2col path
    assert conv_scratch_s3(32, 32, 16, 3, 3, 32, 32, 16, (1, 1), (1, 1)) > conv_scratch_s3(8, 8, 16, 3, 3, 8, 8, 16,
                                                                                          (1, 1), (1, 1))
    assert dw_scratch_s3(48, 48, 8, 3, 3, 48, 48, 1, (1, 1), (1, 1)) == 2 * (72 + 48 * 48 * 8) + 32
    assert dw_scratch_s3(12, 12, 32, 3, 3, 12, 12, 1, (1, 1), (1, 1)) > 32 * 9
    assert dw_scratch_s3(14, 1, 32, 3, 1, 10, 1, 2, (1, 1), (0, 0)) == 32


def test_arena_half_of_tflms_where_the_layers_can_run_in_place(tmp_path):
    """NCHW (the C3, the ESP32): a 1x1 conv of stride 1 and a depthwise conv run in place (planner ANY_SIZE), the
    first conv reads the NHWC model input as it is: DS-CNN and MobileNet take less than half of TFLM's smallest
    arena (measured here by bisection), bit-exact; ResNet-8's residuals keep three maps alive (documented miss)."""
    need(tflm.available(), "pip install tflite-micro")
    for name in ("ds_cnn", "mobilenet_v1_025"):
        p = tmp_path / (name + ".tflite")
        T.write_model(name, p)
        g = tflite2ir(p)
        assert "transpose" not in [op.kind for op in g.ops]                 # the NHWC input read as it is
        gen = codegen.generate(g, name)
        tflm_arena = tflm.find_arena(p, tmp_path)["arena_bytes"]
        assert gen.plan.arena_bytes <= 0.5 * tflm_arena, (name, gen.plan.arena_bytes, tflm_arena)
        x = _inputs(name, g, 4)
        assert simulate.host_check(g, gen, x)["bit_exact"]
