"""TFLite Micro's int8 elementwise kernels as 256-entry tables (targets/esp32/tflite_luts.py): each table equals
TFLM's output on all 256 input codes, for random scales and zero points (one-operator .tflite files, real TFLM)."""
import numpy as np
import pytest

from conftest import need

from grpo_edge.errors import ExportError
from grpo_edge.targets.esp32 import tflm
from grpo_edge.targets.esp32.tflite_luts import TABLE_OPS, tflite_table


def _one_op(op, s_in, zp_in, s_out, zp_out):
    """TFLM's output of a single `op` over a (1, 256) input holding every int8 code once."""
    from tflite_micro import runtime
    from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

    def q(s, z):
        return me.Quantization(scales=[float(s)], zero_points=[int(z)])
    x = me.Tensor(shape=(1, 256), dtype=tfl.TensorType.INT8, quantization=q(s_in, zp_in), name="x")
    y = me.Tensor(shape=(1, 256), dtype=tfl.TensorType.INT8, quantization=q(s_out, zp_out), name="y")
    o = me.Operator(opcode=getattr(tfl.BuiltinOperator, op), inputs=[x], outputs=[y])
    buf = bytes(me.Model(subgraphs=[me.Subgraph(operators=[o], inputs=[x], outputs=[y])]).build())
    ip = runtime.Interpreter.from_bytes(buf, arena_size=1 << 14)
    ip.set_input(np.arange(-128, 128, dtype=np.int8).reshape(1, 256), 0)
    ip.invoke()
    return np.array(ip.get_output(0)).reshape(-1)


@pytest.mark.parametrize("op", TABLE_OPS)
def test_table_equals_tflm_on_every_code(op):
    need(tflm.available(), "pip install tflite-micro")
    rng = np.random.default_rng(sum(map(ord, op)))
    checked = 0
    for _ in range(10):
        s_in = float(np.float32(10 ** rng.uniform(-3, 0)))
        s_out = float(np.float32(s_in * 10 ** rng.uniform(-0.7, 0.7)))      # outputs of a similar range
        zp_in, zp_out = (int(rng.integers(-128, 128)) for _ in range(2))
        if op == "TANH":
            s_out, zp_out = 1 / 128, 0
        if op == "LOGISTIC":
            s_out, zp_out = 1 / 256, -128
        try:
            ours = tflite_table(op, s_in, zp_in, s_out, zp_out)
        except ExportError:                  # HARD_SWISH with too small an output scale: TFLM refuses it too
            continue
        theirs = _one_op(op, s_in, zp_in, s_out, zp_out)
        assert np.array_equal(ours, theirs), (op, s_in, zp_in, s_out, zp_out, np.nonzero(ours != theirs)[0][:8])
        assert len(np.unique(ours)) > 1 or op == "QUANTIZE"
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_every_other_operator_bit_exact_with_tflm(tmp_path, layout):
    """The hand-made zoo (tests/tflite_zoo.py): float QUANTIZE in and DEQUANTIZE out, HARD_SWISH, LOGISTIC, TANH,
    RELU, RELU6, MUL (two activations and by a scalar), ADD of a broadcast constant, SUB, CONCATENATION,
    TRANSPOSE, STRIDED_SLICE with strides, MEAN, QUANTIZE, MAX_POOL_2D, PAD: reference and host C equal TFLM's
    floats on the same file, both layouts, and rv32 too."""
    need(tflm.available(), "pip install tflite-micro")
    import tflite_zoo
    from grpo_edge.targets.esp32 import codegen, rv32, simulate
    from grpo_edge.targets.esp32 import reference as R
    from grpo_edge.targets.esp32.parse_tflite import RULES, tflite2ir
    p = tmp_path / "zoo.tflite"
    p.write_bytes(tflite_zoo.build())
    g = tflite2ir(p, layout=layout)
    assert g.float_edges == (True, True)
    t, to = g.tensors[g.input], g.tensors[g.output]
    x = np.random.default_rng(0).integers(-128, 128, size=(40,) + t.shape[1:]).astype(np.int8)
    y = tflm.run(p, tflm.to_tflm_input(g, x), tmp_path, 1 << 18).reshape(len(x), -1)
    ref = R.run(g, x).reshape(len(x), -1)
    assert np.array_equal(R.dequantize(ref, to.scale, to.zero_point), y)
    assert len(np.unique(ref, axis=0)) > 20
    gen = codegen.generate(g, "zoo")
    assert simulate.host_check(g, gen, x)["bit_exact"]
    if rv32.available():
        assert rv32.rv32_check(g, gen, x[:4])["bit_exact"]
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
    m = tfl.ModelT.InitFromPackedBuf(bytearray(p.read_bytes()), 0)
    names = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
    used = {names[m.operatorCodes[o.opcodeIndex].builtinCode] for o in m.subgraphs[0].operators}
    assert used >= {"HARD_SWISH", "LOGISTIC", "TANH", "RELU", "RELU6", "MUL", "ADD", "SUB", "CONCATENATION",
                    "TRANSPOSE", "STRIDED_SLICE", "MEAN", "QUANTIZE", "DEQUANTIZE", "MAX_POOL_2D", "PAD"}
    assert used - {"QUANTIZE", "DEQUANTIZE"} <= set(RULES)


def test_float_model_refused_in_one_line_saying_how_to_quantize(tmp_path):
    from conftest import cli_in, one_error_line
    from grpo_edge.bench import tiny_models as T
    p = tmp_path / "float.tflite"
    p.write_bytes(T.build("kws_streaming", float_model=True))
    r = cli_in(tmp_path, "deploy", "--target", "esp32c3", "--tflite", p, "--out", tmp_path / "out")
    line = one_error_line(r)
    assert "float model" in line and "representative_dataset" in line and "TFLITE_BUILTINS_INT8" in line
    assert not (tmp_path / "out").exists()
