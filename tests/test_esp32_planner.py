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
        assert plan.arena_bytes < plan.naive_bytes                   # buffers are reused
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
