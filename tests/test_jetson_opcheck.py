"""Op compatibility check against TensorRT's ONNX-parser operator tables (8.2 and 10.x)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from grpo_edge.targets.jetson.opcheck import check_ops
from grpo_edge.targets.jetson.trt_ops import TRT_OPS, table_for


def _model(nodes, inits=(), opset=13, domains=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=ops)


W = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")


def test_tables_are_consistent():
    for t in TRT_OPS.values():
        assert not set(t["supported"]) & set(t["unsupported"])
        assert "Gemm" in t["supported"] and "QuantizeLinear" in t["supported"]
    assert table_for("8.2.1") is TRT_OPS["8.2"] and table_for("10.3.0") is TRT_OPS["10.1"]
    with pytest.raises(KeyError):
        table_for("7.1.3")


def test_supported_model():
    m = _model([helper.make_node("Gemm", ["x", "w"], ["h"], name="fc"), helper.make_node("Relu", ["h"], ["y"])], [W])
    r = check_ops(m, "8.2.1")
    assert r["ok"] and not r["problems"] and not r["warnings"]
    assert {row["op"]: row["count"] for row in r["ops"]} == {"Gemm": 1, "Relu": 1}


def test_unsupported_op_is_named_with_its_node():
    m = _model([helper.make_node("NonZero", ["x"], ["y"], name="where_nonzero")])
    r82 = check_ops(m, "8.2.1")
    assert not r82["ok"]
    assert "NonZero" in r82["problems"][0] and "where_nonzero" in r82["problems"][0] and "8.2.1" in r82["problems"][0]
    assert check_ops(m, "10.3.0")["ok"]       # imported since TensorRT 8.5 / listed in 10.x


def test_layernorm_and_opset():
    ln = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln", axis=-1)
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "s"), numpy_helper.from_array(np.zeros(4, np.float32), "b")]
    m = _model([ln], inits, opset=17)
    r = check_ops(m, "8.2.1")
    assert not r["ok"] and "LayerNormalization" in r["problems"][0] and "not in TensorRT" in r["problems"][0]
    assert any("opset 17" in w for w in r["warnings"])
    assert check_ops(m, "10.3.0")["ok"]


def test_custom_domain_needs_plugin():
    m = _model([helper.make_node("FusedGemm", ["x", "w"], ["y"], name="fg", domain="com.microsoft")], [W],
               domains=["com.microsoft"])
    r = check_ops(m, "10.3.0")
    assert not r["ok"] and "plugin" in r["problems"][0] and "fg" in r["problems"][0]


def test_qdq_zero_point_must_be_int8_zero():
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "zp")]
    m = _model([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q0"),
                helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq0")], inits)
    r = check_ops(m, "10.3.0")
    assert not r["ok"] and "zero point" in r["problems"][0] and "q0" in r["problems"][0]


def test_subgraph_ops_are_checked():
    then = helper.make_graph([helper.make_node("NonZero", ["x"], ["t"], name="inner")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.INT64, None)])
    other = helper.make_graph([helper.make_node("Shape", ["x"], ["e"], name="inner2")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.INT64, None)])
    cond = numpy_helper.from_array(np.array(True), "c")
    m = _model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)], [cond])
    r = check_ops(m, "8.2.1")
    assert not r["ok"] and "branch/then_branch/inner" in r["problems"][0]
