"""The buffer-lifetime planner never lets two live buffers share bytes, and it does reuse memory."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import session_cache
from grpo_edge.targets.esp32 import parse, planner


@st.composite
def buffers(draw):
    n = draw(st.integers(1, 25))
    out = []
    for i in range(n):
        first = draw(st.integers(0, 30))
        last = first + draw(st.integers(0, 10))
        out.append(planner.Buffer("b%d" % i, draw(st.integers(1, 3000)), first, last))
    return out


@settings(max_examples=150, deadline=None)
@given(buffers())
def test_placement_never_overlaps_live_buffers(bufs):
    planner.place(bufs)
    assert planner.check(bufs) == []
    # never worse than no reuse at all
    assert max(b.offset + b.size for b in bufs) <= sum(planner._align(b.size) for b in bufs)


def test_check_reports_an_overlap():
    a = planner.Buffer("a", 100, 0, 2, offset=0)
    b = planner.Buffer("b", 100, 1, 3, offset=64)
    c = planner.Buffer("c", 100, 3, 4, offset=0)          # a is dead by then: fine
    problems = planner.check([a, b, c])
    assert len(problems) == 2 and "a" in problems[0] and "b" in problems[0]


def test_model_plans_reuse_and_respect_lifetimes():
    for name in ("mlp", "resnet"):
        g = parse.parse(session_cache.sample(name))
        plan = planner.plan(g)
        bufs = list(plan.buffers.values())
        assert planner.check(bufs) == []
        assert plan.arena_bytes < plan.naive_bytes                   # buffers are reused or written over
        # every arena buffer is alive exactly from its producer to its last reader
        for i, op in enumerate(g.ops):
            for t in op.inputs:
                r = plan.root.get(t)
                if r in plan.buffers:
                    assert plan.buffers[r].first < i <= plan.buffers[r].last
        # input and output live in the caller's buffers, not the arena
        assert plan.root[g.input] not in plan.buffers and plan.root[g.output] not in plan.buffers


def test_reshape_aliases_share_storage():
    g = parse.parse(session_cache.sample("resnet"))
    plan = planner.plan(g)
    flat = [op for op in g.ops if op.kind == "reshape"][0]
    assert plan.root[flat.output] == plan.root[flat.inputs[0]]
    sizes = {g.tensors[t].size for t in (flat.output, flat.inputs[0])}
    assert len(sizes) == 1 and np.prod(g.tensors[flat.output].shape) in sizes



def test_in_place_ops_write_over_inputs_nothing_reads_later():
    """An elementwise table lookup or add takes its input's storage only when nothing reads that input
    afterwards (a residual's skip input keeps its own bytes), never the model input; it shrinks the arena."""
    for name in ("mlp", "resnet"):
        g = parse.parse(session_cache.sample(name))
        plan = planner.plan(g)
        written = {op.output: i for i, op in enumerate(g.ops)}
        shared = kept = 0
        for i, op in enumerate(g.ops):
            if op.kind not in ("lut", "add"):
                continue
            r = plan.root[op.output]
            overwritten = [t for t in op.inputs if plan.root.get(t) == r]     # stored where op i writes
            if overwritten:
                shared += 1
                assert r != plan.root[g.input] and op.output != g.output
                before = {t for t, j in written.items() if plan.root[t] == r and j < i}
                assert not any(t in before for later in g.ops[i + 1:] for t in later.inputs), (name, op.name)
            elif any(t in plan.root and t != g.input and any(t in later.inputs for later in g.ops[i + 1:])
                     for t in op.inputs):
                kept += 1                       # its input is read again later: it keeps its own bytes
        assert shared >= 1, name
        assert planner.check(list(plan.buffers.values())) == []


def test_an_input_read_again_later_is_not_written_over_and_the_c_stays_bit_exact(tmp_path):
    """h = fc(x); y = fc(tanh(sigmoid(h) + h)): the sigmoid's table may not write over h (the add reads h after it),
    the add may write over the sigmoid's output; the generated C equals the reference on the host and rv32."""
    import torch
    from test_esp32_common_ops import _calibration, _export, _ort_host_rv32
    from grpo_edge.export.onnx2int8 import onnx2int8

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 16), torch.nn.Linear(16, 3)

        def forward(self, x):
            h = self.a(x)
            return self.b(torch.tanh(torch.sigmoid(h) + h))
    q = tmp_path / "m.int8.onnx"
    onnx2int8(_export(M(), tmp_path / "m.onnx"), _calibration(tmp_path / "c.npy"), q)
    g = parse.parse(q)
    plan = planner.plan(g)
    kinds = [op.kind for op in g.ops]
    assert kinds == ["fc", "lut", "add", "lut", "fc"], kinds
    fc, sig, add, tanh = g.ops[:4]
    assert plan.root[sig.output] != plan.root[fc.output]          # h is read again by the add
    assert plan.root[add.output] in (plan.root[sig.output], plan.root[fc.output])
    assert plan.root[tanh.output] == plan.root[add.output]
    assert plan.arena_bytes == 2 * 16                             # h and the sigmoid's output, nothing else
    _ort_host_rv32(g, q, (4,), "inplace")


def test_concat_parts_written_in_place_and_a_depthwise_1x1_over_its_input(tmp_path):
    """samples' bn_cnn (two conv branches concatenated, then a batch norm as a depthwise 1x1 conv): both
    branches write straight into their blocks of the concat's output, the depthwise conv writes over it, and
    the arena's peak is the stem's output + the concat's output + the largest scratch; bit-exact C."""
    from test_esp32_common_ops import _ort_host_rv32
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.onnx_fuse import fuse_onnx
    from grpo_edge.targets.esp32 import samples
    src, calib = samples.export_kind("bn_cnn", tmp_path)
    fuse_onnx(src, tmp_path / "f.onnx")
    q = tmp_path / "q.onnx"
    onnx2int8(tmp_path / "f.onnx", calib, q)
    g = parse.parse(q)
    plan = planner.plan(g)
    kinds = [op.kind for op in g.ops]
    cat = g.ops[kinds.index("concat")]
    bn = g.ops[kinds.index("concat") + 1]
    assert [plan.offsets.get(t) for t in cat.inputs] == [0, g.tensors[cat.inputs[0]].nbytes]
    assert {plan.root[t] for t in cat.inputs + [cat.output, bn.output]} == {plan.root[cat.output]}
    assert plan.arena_bytes <= 8 * 144 + 12 * 144 + max(planner.scratch_bytes(op, g) for op in g.ops)
    assert planner.check(list(plan.buffers.values())) == []
    _ort_host_rv32(g, q, (1, 12, 12), "bncnn")


def test_a_concat_input_read_elsewhere_keeps_its_own_bytes(tmp_path):
    """cat([a, tanh(a)]): a is read by the tanh too, so it is copied into the concat; tanh(a) is written in
    its place; the C equals the reference."""
    import torch
    from test_esp32_common_ops import _calibration, _export, _ort_host_rv32
    from grpo_edge.export.onnx2int8 import onnx2int8

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc = torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.Linear(6 * 36, 4)

        def forward(self, x):
            a = self.c(x)
            return self.fc(torch.cat([a, torch.tanh(a)], dim=1).flatten(1))
    q = tmp_path / "m.int8.onnx"
    onnx2int8(_export(M(), tmp_path / "m.onnx", shape=(1, 1, 6, 6)), _calibration(tmp_path / "c.npy", shape=(1, 6, 6)), q)
    g = parse.parse(q)
    plan = planner.plan(g)
    cat = [op for op in g.ops if op.kind == "concat"][0]
    a, ta = cat.inputs
    assert a not in plan.offsets and plan.root[a] != plan.root[cat.output]
    assert plan.offsets[ta] == 3 * 36 and plan.root[ta] == plan.root[cat.output]
    _ort_host_rv32(g, q, (1, 6, 6), "catread")


def test_a_concat_of_a_concat_copies_the_inner_one():
    """cat([cat([a, b]), d]): a and b go into the inner concat's output in place; that output, whose own
    parts point into it, is copied into the outer one (d goes in place); every part's offset is its block's."""
    from grpo_edge.targets.esp32.ir import Graph, Op, TensorInfo
    shapes = {"x": (1, 4), "a": (1, 4), "b": (1, 4), "c1": (1, 8), "d": (1, 4), "c2": (1, 12), "y": (1, 12)}
    ops = [Op("lut", "A", ["x"], "a"), Op("lut", "B", ["x"], "b"),
           Op("concat", "C1", ["a", "b"], "c1", {"axis": 1, "constants": {}, "tables": [None, None]}),
           Op("lut", "D", ["x"], "d"),
           Op("concat", "C2", ["c1", "d"], "c2", {"axis": 1, "constants": {}, "tables": [None, None]}),
           Op("lut", "Y", ["c2"], "y")]
    g = Graph({n: TensorInfo(n, s) for n, s in shapes.items()}, ops, "x", "y")
    plan = planner.plan(g)
    assert plan.offsets == {"a": 0, "b": 4, "d": 8}
    assert plan.root["a"] == plan.root["b"] == plan.root["c1"] != plan.root["c2"] == plan.root["d"]
    assert planner.check(list(plan.buffers.values())) == []
