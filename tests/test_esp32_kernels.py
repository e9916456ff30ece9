"""Per-op bit-exactness: generated C (gcc -O2 and -O0) == NumPy reference, random shapes and params.

Dozens of single-op models, each with its own symbol prefix, are linked into ONE harness binary
(which also proves the prefixes keep models apart).
"""
import numpy as np
import pytest

from conftest import unavailable_here

from grpo_edge.targets.esp32 import codegen, simulate
from grpo_edge.targets.esp32 import reference as R
from grpo_edge.targets.esp32.ir import Graph, Op, TensorInfo
from grpo_edge.targets.esp32.ops.add import add_params
from grpo_edge.targets.esp32.ops.lut import float_table, requant_table

SEED = 1234


def _t(name, shape, rng, scale=None, zp=None):
    return TensorInfo(name, tuple(shape), float(np.float32(scale if scale else rng.uniform(0.002, 0.1))),
                      int(zp if zp is not None else rng.integers(-128, 128)))


def _requant(rng, s_in, s_w, out):
    mult, shift = zip(*[R.quantize_multiplier(float(s_in) * float(w) / out.scale) for w in s_w])
    lo, hi = sorted(rng.integers(-128, 128, size=2)) if rng.random() < 0.3 else (-128, 127)
    return {"multiplier": np.array(mult, np.int32), "shift": np.array(shift, np.int32),
            "output_offset": out.zero_point, "activation_min": int(lo), "activation_max": int(max(hi, lo))}


def _graph(x, ops, tensors):
    ts = {t.name: t for t in tensors}
    ts[x.name] = x
    return Graph(ts, ops, x.name, ops[-1].output, model_hash="test")


def make_fc(rng):
    n_in, n_out = int(rng.integers(1, 70)), int(rng.integers(1, 40))
    x, y = _t("x", (1, n_in), rng), _t("y", (1, n_out), rng)
    w = rng.integers(-127, 128, size=(n_out, n_in)).astype(np.int8)
    s_w = rng.uniform(0.001, 0.05, n_out).astype(np.float32)
    # occasionally a multiplier > 1 (positive shift)
    if rng.random() < 0.3:
        y.scale = float(np.float32(x.scale * s_w.min() * 0.5))
    a = {"weights": w, "bias": rng.integers(-20000, 20000, n_out).astype(np.int32),
         "input_offset": -x.zero_point, "weight_scales": s_w}
    a.update(_requant(rng, x.scale, s_w, y))
    return _graph(x, [Op("fc", "fc", ["x"], "y", a)], [y])


def make_conv(rng):
    C = int(rng.integers(1, 5))
    kind = rng.choice(["conv", "depthwise", "grouped"])
    G = 1 if kind == "conv" else (C if kind == "depthwise" else (2 if C % 2 == 0 else 1))
    OC = G * int(rng.integers(1, 4))
    KH, KW = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    DH, DW = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) if rng.random() < 0.3 else (1, 1)
    SH, SW = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pads = tuple(int(v) for v in rng.integers(0, 3, size=4)) if rng.random() < 0.7 else (0, 0, 0, 0)
    H = int(rng.integers(DH * (KH - 1) + 1, 10))
    W = int(rng.integers(DW * (KW - 1) + 1, 10))
    OH = (H + pads[0] + pads[2] - DH * (KH - 1) - 1) // SH + 1
    OW = (W + pads[1] + pads[3] - DW * (KW - 1) - 1) // SW + 1
    x, y = _t("x", (1, C, H, W), rng), _t("y", (1, OC, OH, OW), rng)
    s_w = rng.uniform(0.001, 0.05, OC).astype(np.float32)
    a = {"weights": rng.integers(-127, 128, size=(OC, C // G, KH, KW)).astype(np.int8),
         "bias": rng.integers(-5000, 5000, OC).astype(np.int32), "input_offset": -x.zero_point,
         "strides": (SH, SW), "dilations": (DH, DW), "pads": pads, "group": G, "weight_scales": s_w}
    a.update(_requant(rng, x.scale, s_w, y))
    return _graph(x, [Op("conv", "conv", ["x"], "y", a)], [y])


def make_add(rng):
    shape = (1, int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    x, b, y = _t("x", shape, rng), _t("b", shape, rng), _t("y", shape, rng)
    consts = {}
    if rng.random() < 0.4:                             # constant operand, broadcast over H, W
        consts["b"] = rng.integers(-128, 128, size=(1, shape[1], 1, 1)).astype(np.int8)
    a = add_params(x, b, y, consts)
    a["activation_min"], a["activation_max"] = (int(y.zero_point), 127) if rng.random() < 0.3 else (-128, 127)
    if consts:
        return _graph(x, [Op("add", "add", ["x", "b"], "y", a)], [y])
    # two activations: make b from x with an elementwise table first
    t = Op("lut", "mk_b", ["x"], "b", {"table": rng.integers(-128, 128, 256).astype(np.int8), "function": "random"})
    return _graph(x, [t, Op("add", "add", ["x", "b"], "y", a)], [b, y])


def make_lut(rng):
    shape = (1, int(rng.integers(1, 100)))
    x, y = _t("x", shape, rng), _t("y", shape, rng)
    f = rng.choice(["tanh", "sigmoid", "relu", "random"])
    if f == "relu":
        table = requant_table(x, y, *R.activation_range("relu", y.scale, y.zero_point))
    elif f == "random":
        table = rng.integers(-128, 128, 256).astype(np.int8)
    else:
        table = float_table(x, y, f)
    return _graph(x, [Op("lut", "lut", ["x"], "y", {"table": table, "function": str(f)})], [y])


def make_pool(rng):
    C, H, W = int(rng.integers(1, 4)), int(rng.integers(2, 9)), int(rng.integers(2, 9))
    kind = rng.choice(["maxpool", "avg_round", "avg_mean", "global"])
    KH, KW = (H, W) if kind == "global" else (int(rng.integers(1, min(H, 3) + 1)), int(rng.integers(1, min(W, 3) + 1)))
    SH, SW = (1, 1) if kind == "global" else (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    pads = (0, 0, 0, 0) if kind in ("avg_mean", "global") else tuple(
        int(v) for v in rng.integers(0, 2, size=4) * (np.array([KH, KW, KH, KW]) > 1))
    OH = (H + pads[0] + pads[2] - KH) // SH + 1
    OW = (W + pads[1] + pads[3] - KW) // SW + 1
    x = _t("x", (1, C, H, W), rng)
    same = kind in ("maxpool", "avg_round")
    y = _t("y", (1, C, OH, OW), rng, x.scale if same else None, x.zero_point if same else None)
    a = {"kernel": (KH, KW), "strides": (SH, SW), "pads": pads, "activation_min": -128, "activation_max": 127}
    if kind == "maxpool":
        return _graph(x, [Op("maxpool", "mp", ["x"], "y", a)], [y])
    a["mode"] = "round_div" if kind == "avg_round" else "mean"
    a["count"] = KH * KW
    a["mean_multiplier"], a["mean_shift"] = R.mean_params(x.scale, y.scale, KH * KW)
    a["input_zero_point"], a["output_offset"] = x.zero_point, y.zero_point
    return _graph(x, [Op("avgpool", "ap", ["x"], "y", a)], [y])


def make_softmax(rng):
    from grpo_edge.targets.esp32.softmax_ref import softmax_params
    rows, n = int(rng.integers(1, 4)), int(rng.integers(1, 20))
    x = _t("x", (1, rows, n), rng, scale=float(rng.uniform(0.005, 0.5)))
    tfl = rng.random() < 0.5
    y = _t("y", (1, rows, n), rng, 1 / 256.0 if tfl else 1 / 255.0, -128)
    return _graph(x, [Op("softmax", "sm", ["x"], "y", softmax_params(x, y))], [y])


def make_chain(rng):
    """conv -> reshape (flatten, aliasing) -> fc -> argmax: exercises the planner and aliases."""
    g = make_conv(rng)
    conv = g.ops[0]
    flat = TensorInfo("flat", (1, g.tensors["y"].size), g.tensors["y"].scale, g.tensors["y"].zero_point)
    n_out = int(rng.integers(2, 12))
    z = _t("z", (1, n_out), rng)
    s_w = rng.uniform(0.001, 0.05, n_out).astype(np.float32)
    a = {"weights": rng.integers(-127, 128, size=(n_out, flat.size)).astype(np.int8),
         "bias": rng.integers(-2000, 2000, n_out).astype(np.int32), "input_offset": -flat.zero_point}
    a.update(_requant(rng, flat.scale, s_w, z))
    am = TensorInfo("am", (1, 1))
    ops = [conv, Op("reshape", "flatten", ["y"], "flat", {}), Op("fc", "fc", ["flat"], "z", a),
           Op("argmax", "argmax", ["z"], "am", {})]
    return _graph(g.tensors["x"], ops, [g.tensors["y"], flat, z, am])


MAKERS = {"fc": make_fc, "conv": make_conv, "add": make_add, "lut": make_lut, "pool": make_pool, "softmax": make_softmax,
          "chain": make_chain}


def _cases(n_per_kind=12):
    rng = np.random.default_rng(SEED)
    out = []
    for kind, make in MAKERS.items():
        for i in range(n_per_kind):
            out.append(("%s_%d" % (kind, i), make(rng)))
    return out


def _sanitizers_work(tmp_path):
    import subprocess
    src = tmp_path / "t.c"
    src.write_text("int main(void) { return 0; }\n")
    r = subprocess.run([simulate.gcc(), "-fsanitize=address,undefined", "-o", str(tmp_path / "t"), str(src)],
                       capture_output=True)
    return r.returncode == 0


def build_level(tmp_path, opt):
    """(simulate build level, extra gcc flags) for "O2", "O0-novec" or "sanitize" (-O1 with ASan + UBSan;
    skips when the sanitizer runtimes are missing)."""
    if opt != "sanitize":
        return opt, ()
    if not _sanitizers_work(tmp_path):
        unavailable_here("gcc sanitizer runtimes not installed (apt-get install libasan8 libubsan1)")
    return "O0-novec", ("-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")


@pytest.mark.parametrize("opt", ["O2", "O0-novec", "sanitize"])
def test_every_kernel_matches_reference_bit_for_bit(tmp_path, opt):
    """'sanitize': -O1 with AddressSanitizer + UBSan (no out-of-bounds read, no signed overflow)."""
    opt, extra = build_level(tmp_path, opt)
    rng = np.random.default_rng(SEED + 1)
    cases = _cases()
    gens, inputs, refs = [], [], []
    for name, g in cases:
        x = rng.integers(-128, 128, size=(16,) + g.tensors[g.input].shape[1:]).astype(np.int8)
        gens.append(codegen.generate(g, "k_" + name))
        inputs.append(x)
        refs.append(R.run(g, x).reshape(len(x), -1))
    exe = simulate.build_host(gens, tmp_path, opt, extra=extra)
    outs = simulate.run_host(exe, gens, inputs)
    bad = [name for (name, _), y, r in zip(cases, outs, refs) if not np.array_equal(y, r)]
    assert not bad, "C differs from the reference for %s" % bad


EDGE_C = r"""
#include <stdio.h>
#include <stdint.h>
#include "gx_kernels.h"
int main(void) {
    int64_t a, m; int s;
    while (scanf("%lld %lld %d", (long long *)&a, (long long *)&m, &s) == 3) {
        printf("%ld %ld %ld\n", (long)gx_srdhm((int32_t)a, (int32_t)m),
               (long)gx_rdbpot((int32_t)a, s < 0 ? -s : 0), (long)gx_mbqm((int32_t)a, (int32_t)m, s));
    }
    return 0;
}
"""


def _scalar_srdhm(a, b):
    # Straight from the notes, with Python ints: an independent check of the vectorized reference.
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) // (1 << 31)
    return q if ab + nudge >= 0 else -q


def _scalar_rdbpot(x, e):
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def _scalar_mbqm(x, m, s):
    left, right = max(s, 0), max(-s, 0)
    xs = (x << left) & 0xFFFFFFFF
    xs = xs - (1 << 32) if xs >= (1 << 31) else xs
    return _scalar_rdbpot(_scalar_srdhm(xs, m), right)


EDGE_CASES = [
    (-(1 << 31), -(1 << 31), 0), (-(1 << 31), (1 << 31) - 1, -1), ((1 << 31) - 1, (1 << 31) - 1, -31),
    (1, 1 << 30, -1), (-1, 1 << 30, -1), (3, 1 << 30, -1), (-3, 1 << 30, -1),        # ties
    (6, 1 << 30, -2), (-6, 1 << 30, -2), (-10, 1 << 30, -2), (10, 1 << 30, -2),
    (5, 1 << 30, 0), (-5, 1 << 30, 0), (12345, 1518500250, -7), (-12345, 1518500250, -7),
    (100, 1 << 30, 3), (-100, 1 << 30, 3), (1 << 28, 1 << 30, 4), (-(1 << 28), 1 << 30, 4),  # left shift wraps
    (0, 0, 0), (-1, 1, -31), (1 << 20, 1073741825, -20), (-(1 << 20), 1073741825, -20),
]


def test_fixed_point_edge_cases_c_python_and_numpy_agree(tmp_path):
    rng = np.random.default_rng(7)
    cases = list(EDGE_CASES) + [(int(rng.integers(-(1 << 31), 1 << 31)), int(rng.integers(1 << 30, 1 << 31)),
                                 int(rng.integers(-31, 8))) for _ in range(300)]
    (tmp_path / "edge.c").write_text(EDGE_C)
    import subprocess
    exe = tmp_path / "edge"
    subprocess.run([simulate.gcc(), "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-format",
                    "-I", str(codegen.CSRC), "-o", str(exe), str(tmp_path / "edge.c")], check=True)
    text = "\n".join("%d %d %d" % c for c in cases) + "\n"
    got = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout.split("\n")
    a = np.array([c[0] for c in cases], np.int64)
    m = np.array([c[1] for c in cases], np.int64)
    s = np.array([c[2] for c in cases], np.int64)
    np_srdhm = R.srdhm(a, m)
    np_rd = R.rounding_divide_by_pot(a, np.maximum(-s, 0))
    np_mbqm = R.mbqm(a, m, s)
    for i, (x, mm, ss) in enumerate(cases):
        want = (_scalar_srdhm(x, mm), _scalar_rdbpot(x, max(-ss, 0)), _scalar_mbqm(x, mm, ss))
        assert tuple(int(v) for v in got[i].split()) == want, (x, mm, ss)
        assert (int(np_srdhm[i]), int(np_rd[i]), int(np_mbqm[i])) == want, (x, mm, ss)


def test_rounding_rules_known_values():
    assert _scalar_srdhm(-(1 << 31), -(1 << 31)) == (1 << 31) - 1          # the one saturating case
    assert [_scalar_rdbpot(v, 1) for v in (1, -1, 3, -3, 5, -5)] == [1, -1, 2, -2, 3, -3]   # ties away from 0
    assert R.round_half_away(2.5) == 3 and R.round_half_away(-2.5) == -3 and R.round_half_away(0.49999999) == 0
    m, s = R.quantize_multiplier(1.0 - 2.0 ** -40)      # rounds up to 2^31: halved, shift + 1
    assert (m, s) == (1 << 30, 1)
    assert R.quantize_multiplier(2.0 ** -40) == (0, 0)  # shift < -31 -> zero multiplier
    assert R.quantize_multiplier(0.75) == (1610612736, 0)
    assert list(R.round_f32(np.float32([0.49999997, 0.5, -0.5, 1.5, -2.5]))) == [0.0, 1.0, -1.0, 2.0, -3.0]
