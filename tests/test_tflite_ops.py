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
