"""16x8 (int16 activations, int8 weights) on the C side: generated C == NumPy reference bit for bit.

Per op (fully connected, tanh over all 65,536 int16 inputs, argmax over int16), a whole 16x8 MLP at
-O2 and -O0, the rv32imc simulation, the header's int16 API, the firmware app, and the export-time
rejections (int32 accumulator overflow, mixed int8/int16 activations).
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import need

import session_cache

from grpo_edge.errors import ExportError
from grpo_edge.targets.esp32 import codegen, firmware, parse, rv32, samples, simulate
from grpo_edge.targets.esp32 import reference as R
from grpo_edge.targets.esp32.int16_ref import TANH_OUTPUT_SCALE, sigmoid_params, tanh_params, to_16x8
from grpo_edge.targets.esp32.ir import Graph, Op, TensorInfo
from test_esp32_kernels import build_level

SEED = 1616


def _t16(name, shape, scale):
    return TensorInfo(name, tuple(shape), float(np.float32(scale)), 0, "int16")


def _graph(tensors, ops):
    ts = {t.name: t for t in tensors}
    return Graph(ts, ops, tensors[0].name, ops[-1].output, model_hash="test16")


def _int16(rng, shape):
    """Full-range int16 inputs, with the extremes (-32768, 32767, 0) in the first rows."""
    x = rng.integers(-32768, 32768, size=shape).astype(np.int16)
    for row, v in enumerate((-32768, 32767, 0)):
        if row < len(x):
            x[row] = v
    return x


def _fc16_params(rng, s_in, n_in, n_out, out_scale):
    w = rng.integers(-127, 128, size=(n_out, n_in)).astype(np.int8)
    s_w = rng.uniform(0.001, 0.05, n_out).astype(np.float32)
    mult, shift = zip(*[R.quantize_multiplier(float(s_in) * float(s) / out_scale) for s in s_w])
    lo, hi = sorted(int(v) for v in rng.integers(-32768, 32768, size=2)) if rng.random() < 0.3 else (-32768, 32767)
    return {"weights": w, "bias": rng.integers(-(1 << 20), 1 << 20, n_out).astype(np.int32), "weight_scales": s_w,
            "multiplier": np.array(mult, np.int32), "shift": np.array(shift, np.int32),
            "input_offset": 0, "output_offset": 0, "activation_min": lo, "activation_max": hi}


def make_fc16(rng):
    n_in, n_out = int(rng.integers(1, 70)), int(rng.integers(1, 40))
    s_in = float(np.float32(rng.uniform(1e-5, 1e-3)))
    # output scale around the accumulator's spread (x a random factor): saturating, tiny and mid outputs;
    # sometimes a multiplier > 1 (positive shift)
    spread = np.sqrt(n_in) * 73 * 18900 * s_in * 0.025 / 8000
    out_scale = float(np.float32(spread * 10 ** rng.uniform(-1.5, 1.5)))
    if rng.random() < 0.2:
        out_scale = float(np.float32(s_in * 0.001 * 0.5))
    x, y = _t16("x", (1, n_in), s_in), _t16("y", (1, n_out), out_scale)
    return _graph([x, y], [Op("fc16", "fc", ["x"], "y", _fc16_params(rng, s_in, n_in, n_out, out_scale))])


def make_tanh16(scale, n):
    x, y = _t16("x", (1, n), scale), _t16("y", (1, n), TANH_OUTPUT_SCALE)
    return _graph([x, y], [Op("tanh16", "tanh", ["x"], "y", tanh_params(x.scale))])


def make_sigmoid16(scale, n):
    x, y = _t16("x", (1, n), scale), _t16("y", (1, n), TANH_OUTPUT_SCALE)
    return _graph([x, y], [Op("sigmoid16", "sigmoid", ["x"], "y", sigmoid_params(x.scale))])


def make_fc16_argmax(rng, ties):
    """fc16 -> argmax (int16 logits, int8 index); with ties: repeated weight rows give equal logits."""
    n_in, n_out = int(rng.integers(2, 20)), int(rng.integers(2, 12))
    s_in = 1e-4
    x, h = _t16("x", (1, n_in), s_in), _t16("h", (1, n_out), 1e-3)
    a = _fc16_params(rng, s_in, n_in, n_out, h.scale)
    a["activation_min"], a["activation_max"] = -32768, 32767
    if ties:
        a["weights"][1::2] = a["weights"][0]
        a["bias"][:] = a["bias"][0]
        a["multiplier"][:], a["shift"][:] = a["multiplier"][0], a["shift"][0]
    y = TensorInfo("y", (1, 1), 1.0, 0, "int8")
    return _graph([x, h, y], [Op("fc16", "fc", ["x"], "h", a), Op("argmax", "argmax", ["h"], "y", {})])


def make_requant16(rng, n=None):
    """A relu / clip / requantize between int16 tensors: random scales (ratios either side of 1) and bounds."""
    n = n or int(rng.integers(1, 60))
    s_in, s_out = (float(np.float32(10 ** rng.uniform(-5, -1))) for _ in range(2))
    m, shift = R.quantize_multiplier(s_in / s_out)
    lo, hi = [(-32768, 32767), (0, 32767), tuple(sorted(int(v) for v in rng.integers(-32768, 32768, 2)))][
        int(rng.integers(0, 3))]
    x, y = _t16("x", (1, n), s_in), _t16("y", (1, n), s_out)
    return _graph([x, y], [Op("requant16", "clip", ["x"], "y", {"function": "clip", "multiplier": m, "shift": shift,
                                                                 "act_min": lo, "act_max": hi})])


LUT16_PARAMS = {"hardsigmoid": {"alpha": 0.2, "beta": 0.5}, "leakyrelu": {"alpha": -0.3}, "elu": {"alpha": 0.7},
                "celu": {"alpha": 1.5}, "selu": {"alpha": 1.6732632, "gamma": 1.050701}, "scale": {"k": -0.37}}


def make_lut16(function, s_in, s_out, n):
    """A 16x8 table of one function (ops/lut.py lut16) between int16 tensors."""
    from grpo_edge.targets.esp32.ops.lut import lut16_table
    x, y = _t16("x", (1, n), s_in), _t16("y", (1, n), s_out)
    t = lut16_table(x, y, function, LUT16_PARAMS.get(function, {}))
    return _graph([x, y], [Op("lut16", function, ["x"], "y", dict(t, function=function))])


def make_leakyrelu16(rng, n=None):
    from grpo_edge.targets.esp32.ops.lut import leakyrelu16_params
    n = n or int(rng.integers(1, 60))
    x, y = (_t16(k, (1, n), 10 ** rng.uniform(-5, -2)) for k in "xy")
    return _graph([x, y], [Op("leakyrelu16", "lrelu", ["x"], "y",
                              leakyrelu16_params(x, y, float(rng.uniform(0.005, 3.0))))])


def make_mul16(rng):
    """a * b with b = requant16(a) (another scale): TFLM's MUL at int16; a saturating output scale sometimes."""
    n = int(rng.integers(1, 40))
    x, h = _t16("x", (1, n), 10 ** rng.uniform(-5, -2)), _t16("h", (1, n), 10 ** rng.uniform(-5, -2))
    y = _t16("y", (1, n), float(x.scale) * float(h.scale) * 32768 * 10 ** rng.uniform(-0.5, 2))
    m, s = R.quantize_multiplier(float(x.scale) / float(h.scale))
    mm, ms = R.quantize_multiplier(float(x.scale) * float(h.scale) / float(y.scale))
    return _graph([x, h, y], [
        Op("requant16", "rq", ["x"], "h", {"function": "requantize", "multiplier": m, "shift": s,
                                          "act_min": -32768, "act_max": 32767}),
        Op("mul16", "mul", ["x", "h"], "y", {"a_offset": 0, "b_offset": 0, "multiplier": mm, "shift": ms,
                                             "output_offset": 0, "activation_min": -32768, "activation_max": 32767})])


def make_pad16(rng):
    """A constant pad of a (1, C, L) int16 tensor, rescaled (or copied) to the output's scale."""
    c, n = int(rng.integers(1, 5)), int(rng.integers(1, 12))
    w = ((0, 0), tuple(int(v) for v in rng.integers(0, 3, 2)), tuple(int(v) for v in rng.integers(0, 3, 2)))
    s_in = 10 ** rng.uniform(-5, -2)
    s_out = s_in if rng.random() < 0.5 else 10 ** rng.uniform(-5, -2)
    x = _t16("x", (1, c, n), s_in)
    y = _t16("y", (1, c + w[1][0] + w[1][1], n + w[2][0] + w[2][1]), s_out)
    m, s = (0, 0) if x.scale == y.scale else R.quantize_multiplier(float(x.scale) / float(y.scale))
    return _graph([x, y], [Op("pad16", "pad", ["x"], "y", {"widths": w, "value": int(rng.integers(-32768, 32768)),
                                                          "multiplier": m, "shift": s, "real_value": 0.0})])


def make_pool16(rng, kind):
    """A max / average pool (or a mean over the whole image) of a (1, C, H, W) int16 tensor, padded or not."""
    from grpo_edge.targets.esp32.reference import mean_params
    c, h, w = (int(v) for v in rng.integers(1, 7, 3))
    k = (int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1)))
    st = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    pads = (0, 0, 0, 0) if kind == "mean" else tuple(int(rng.integers(0, min(k) // 2 + 1)) for _ in range(4))
    if kind == "mean":
        k, st = (h, w), (1, 1)
    oh, ow = (h + pads[0] + pads[2] - k[0]) // st[0] + 1, (w + pads[1] + pads[3] - k[1]) // st[1] + 1
    s_in = 10 ** rng.uniform(-5, -2)
    s_out = s_in if kind != "mean" else s_in * 10 ** rng.uniform(-0.5, 0.5)
    x, y = _t16("x", (1, c, h, w), s_in), _t16("y", (1, c, oh, ow), s_out)
    a = {"kernel": k, "strides": st, "pads": pads, "activation_min": -32768, "activation_max": 32767}
    if kind != "max":
        m, sh = mean_params(x.scale, y.scale, k[0] * k[1])
        a.update(mode="round_div" if kind == "avg" else "mean", count=k[0] * k[1], input_zero_point=0,
                 output_offset=0, mean_multiplier=m, mean_shift=sh)
    return _graph([x, y], [Op("maxpool16" if kind == "max" else "avgpool16", kind, ["x"], "y", a)])


def make_layernorm16(rng):
    """A layer norm over the last axis of (1, rows, d) int16: random gamma / beta, epsilon from 0 to large, an
    output scale around the normalized range (saturating sometimes)."""
    rows, d = int(rng.integers(1, 5)), int(rng.choice([1, 2, 3, 8, 17, 64, 300, 1024]))
    s_in = 10 ** rng.uniform(-5, -2)
    eps = int(rng.choice([0, 1, int(d ** 3 * 1e-5 / s_in ** 2)]))
    s_g = rng.uniform(0.001, 0.02, d)
    mult, shift = zip(*[R.quantize_multiplier(float(sg) / 65536.0 / (4 * 127 * 0.02 / 32767 * 10 ** rng.uniform(-1, 0.5)))
                        for sg in s_g])
    x, y = _t16("x", (1, rows, d), s_in), _t16("y", (1, rows, d), 1.0)
    a = {"d": d, "eps": eps, "gamma": rng.integers(-127, 128, d).astype(np.int8),
         "bias": rng.integers(-(1 << 22), 1 << 22, d).astype(np.int32), "multiplier": np.array(mult, np.int32),
         "shift": np.array(shift, np.int32), "output_offset": 0, "activation_min": -32768, "activation_max": 32767}
    return _graph([x, y], [Op("layernorm16", "ln", ["x"], "y", a)])


def make_moves16(rng, kind):
    """transpose16 / slice16 of a random (1, a, b, c) int16 tensor, or concat16 of it and its requantized copy
    along a random axis (one part rescaled, one copied)."""
    shape = (1,) + tuple(int(v) for v in rng.integers(1, 6, 3))
    s_in = 10 ** rng.uniform(-5, -2)
    x = _t16("x", shape, s_in)
    if kind == "transpose":
        perm = (0,) + tuple(int(v) + 1 for v in rng.permutation(3))
        y = _t16("y", tuple(shape[k] for k in perm), s_in)
        return _graph([x, y], [Op("transpose16", "tr", ["x"], "y", {"perm": perm})])
    axis = int(rng.integers(1, 4))
    if kind == "slice":
        start = int(rng.integers(0, shape[axis]))
        length = int(rng.integers(1, shape[axis] - start + 1))
        y = _t16("y", tuple(length if k == axis else d for k, d in enumerate(shape)), s_in)
        return _graph([x, y], [Op("slice16", "sl", ["x"], "y", {"axis": axis, "start": start, "length": length})])
    h = _t16("h", shape, s_in * 10 ** rng.uniform(-1, 1))
    y = _t16("y", tuple(2 * d if k == axis else d for k, d in enumerate(shape)), float(h.scale))
    m, sh = R.quantize_multiplier(float(x.scale) / float(h.scale))
    return _graph([x, h, y], [
        Op("requant16", "rq", ["x"], "h", {"function": "requantize", "multiplier": m, "shift": sh,
                                          "act_min": -32768, "act_max": 32767}),
        Op("concat16", "cat", ["x", "h"], "y", {"axis": axis, "rescale": [(m, sh), (0, 0)], "constants": {}})])


def make_log_softmax16(rng):
    """A 16x8 log-softmax over the last axis of (1, rows, n) int16 at a random input scale (differences of
    up to 65,535 codes: beyond Q5.26's -32 for most scales)."""
    from grpo_edge.targets.esp32.log_softmax_ref import OUTPUT_SCALE16, log_softmax_params
    rows, n = int(rng.integers(1, 4)), int(rng.integers(1, 40))
    x, y = _t16("x", (1, rows, n), 10 ** rng.uniform(-5, -2)), _t16("y", (1, rows, n), OUTPUT_SCALE16)
    return _graph([x, y], [Op("log_softmax16", "lsm", ["x"], "y", log_softmax_params(x, y, int16=True))])


def make_conv16(rng):
    """A conv16 of a random (1, C, H, W) int16 input: plain, depthwise (a multiplier of 1 or 2) or grouped,
    strides, dilations, padding; weights whose accumulator bound fits int32."""
    kind = ("plain", "depthwise", "grouped")[int(rng.integers(0, 3))]
    c = int(rng.integers(1, 5)) * (2 if kind == "grouped" else 1)
    groups = {"plain": 1, "depthwise": c, "grouped": 2}[kind]
    oc = {"plain": int(rng.integers(1, 6)), "depthwise": c * int(rng.integers(1, 3)), "grouped": 2 * int(rng.integers(1, 3))}[kind]
    h, w = (int(v) for v in rng.integers(3, 8, 2))
    kh, kw = (int(v) for v in rng.integers(1, 4, 2))
    st, dl = tuple(int(v) for v in rng.integers(1, 3, 2)), tuple(int(v) for v in rng.integers(1, 3, 2))
    pads = tuple(int(v) for v in rng.integers(0, 2, 4))
    oh = (h + pads[0] + pads[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
    ow = (w + pads[1] + pads[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
    if oh < 1 or ow < 1:
        pads, st, dl = (1, 1, 1, 1), (1, 1), (1, 1)
        oh, ow = h + 3 - kh, w + 3 - kw
    s_in = 10 ** rng.uniform(-5, -2)
    weights = rng.integers(-127, 128, size=(oc, c // groups, kh, kw)).astype(np.int8)
    s_w = rng.uniform(0.001, 0.05, oc)
    taps = np.abs(weights.astype(np.int64)).reshape(oc, -1).sum(axis=1)
    s_out = float(np.float32(s_in * s_w.max() * 32768 * taps.max() / 32767 * 10 ** rng.uniform(-1.5, 0)))
    mult, shift = zip(*[R.quantize_multiplier(float(np.float32(s_in)) * float(sw) / s_out) for sw in s_w])
    x, y = _t16("x", (1, c, h, w), s_in), _t16("y", (1, oc, oh, ow), s_out)
    a = {"weights": weights, "bias": rng.integers(-(1 << 20), 1 << 20, oc).astype(np.int32), "input_offset": 0,
         "strides": st, "dilations": dl, "pads": pads, "group": groups, "weight_scales": s_w.astype(np.float32),
         "multiplier": np.array(mult, np.int32), "shift": np.array(shift, np.int32), "output_offset": 0,
         "activation_min": -32768, "activation_max": 32767}
    return _graph([x, y], [Op("conv16", "conv", ["x"], "y", a)])


def make_softmax16(rng):
    """TFLite's int16 softmax over the last axis of (1, rows, n) at a random input scale."""
    from grpo_edge.targets.esp32.textir import softmax_multiplier, softmax_tables
    rows, n = int(rng.integers(1, 4)), int(rng.integers(1, 40))
    x, y = _t16("x", (1, rows, n), 10 ** rng.uniform(-5, -2)), _t16("y", (1, rows, n), 1.0 / 32768)
    m, sh = softmax_multiplier(x.scale)
    t = softmax_tables()
    return _graph([x, y], [Op("softmax16", "sm", ["x"], "y", {"multiplier": m, "shift": sh, "exp_lut": t["exp"],
                                                             "recip_lut": t["recip"]})])


def make_matmul16(rng):
    """(1, M, K) x (1, K, N) of an int16 input and its transpose-free copy: x @ x^T needs a transpose, so the
    right side is x itself reshaped: (1, T, D) x (1, D, T) with D = T."""
    t = int(rng.integers(1, 9))
    x, y = _t16("x", (1, t, t), 10 ** rng.uniform(-5, -2)), _t16("y", (1, t, t), 1.0)
    acc_max = t * 32768.0 * 32768.0
    m, sh = R.quantize_multiplier(32767 / acc_max * 10 ** rng.uniform(0, 1.5))
    return _graph([x, y], [Op("matmul16", "mm", ["x", "x"], "y", {
        "a_offset": 0, "b_offset": 0, "multiplier": m, "shift": sh, "output_offset": 0,
        "activation_min": -32768, "activation_max": 32767})])


# scales for the exhaustive tanh: 2^-12 and 2^-11 (TFLM's input_multiplier == 0 case), 2^-10 (a power
# of two outside it), a calibrated hidden-layer scale, a coarse one, and 8.0 (the int64 rescale path)
EXHAUSTIVE_LUT16 = ("gelu", "hardswish", "softplus", "leakyrelu", "scale")
EXHAUSTIVE_TANH_SCALES = {"pot12": 2.0 ** -12, "pot11": 2.0 ** -11, "pot10": 2.0 ** -10,
                          "calib": 3.2286759960697964e-05, "coarse": 0.0123, "wide": 8.0}


def _cases():
    rng = np.random.default_rng(SEED)
    cases = [("fc%d" % i, make_fc16(rng)) for i in range(30)]
    cases += [("tanh%d" % i, make_tanh16(float(np.float32(10 ** rng.uniform(-6, 0.5))), int(rng.integers(1, 80))))
              for i in range(20)]
    cases += [("am%d" % i, make_fc16_argmax(rng, ties=i % 2 == 1)) for i in range(6)]
    cases += [("rq%d" % i, make_requant16(rng)) for i in range(20)]
    cases += [("sig%d" % i, make_sigmoid16(float(np.float32(10 ** rng.uniform(-6, 0.5))), int(rng.integers(1, 80))))
              for i in range(10)]
    from grpo_edge.targets.esp32.ops.lut import FLOAT_FUNCTIONS
    for f in sorted(FLOAT_FUNCTIONS):
        s_in = float(np.float32(10 ** rng.uniform(-5, -2)))        # the output scale as calibration sets it:
        span = np.abs(FLOAT_FUNCTIONS[f](np.linspace(-32768, 32767, 999) * s_in, LUT16_PARAMS.get(f, {}))).max()
        s_out = float(np.float32(span / 32767 * 10 ** rng.uniform(-0.3, 0.3)))     # its range, or clipped
        cases.append(("lut16_%s" % f, make_lut16(f, s_in, s_out, int(rng.integers(1, 80)))))
    cases += [("lrelu%d" % i, make_leakyrelu16(rng)) for i in range(10)]
    cases += [("mul%d" % i, make_mul16(rng)) for i in range(10)]
    cases += [("pad%d" % i, make_pad16(rng)) for i in range(10)]
    cases += [("pool_%s%d" % (k, i), make_pool16(rng, k)) for k in ("max", "avg", "mean") for i in range(6)]
    cases += [("ln%d" % i, make_layernorm16(rng)) for i in range(16)]
    cases += [("%s%d" % (k, i), make_moves16(rng, k)) for k in ("transpose", "slice", "concat") for i in range(6)]
    cases += [("lsm%d" % i, make_log_softmax16(rng)) for i in range(12)]
    cases += [("conv%d" % i, make_conv16(rng)) for i in range(20)]
    cases += [("softmax%d" % i, make_softmax16(rng)) for i in range(10)]
    cases += [("matmul%d" % i, make_matmul16(rng)) for i in range(10)]
    return cases


def test_tanh16_params_cover_both_paths():
    assert tanh_params(2.0 ** -12) == {"input_multiplier": 0, "input_left_shift": 0}
    assert tanh_params(2.0 ** -11) == {"input_multiplier": 0, "input_left_shift": 1}
    assert tanh_params(EXHAUSTIVE_TANH_SCALES["calib"])["input_multiplier"] > 0
    src = codegen.generate(make_tanh16(8.0, 4), "w").source
    assert ".wide = 1" in src                         # 32768 * multiplier does not fit int32 there
    assert ".wide = 0" in codegen.generate(make_tanh16(2.0 ** -10, 4), "n").source


@pytest.mark.parametrize("opt", ["O2", "O0-novec", "sanitize"])
def test_every_int16_kernel_matches_reference_bit_for_bit(tmp_path, opt):
    """fc16 / tanh16 / argmax over int16, random shapes and parameters, plus tanh16 over every int16
    input at several input scales; all single-op models linked into one harness.
    'sanitize': -O1 with AddressSanitizer + UBSan (no signed overflow in the int32 arithmetic)."""
    opt, extra = build_level(tmp_path, opt)
    rng = np.random.default_rng(SEED + 1)
    every = np.arange(-32768, 32768, dtype=np.int64).astype(np.int16).reshape(1, -1)
    cases = _cases() + [("all_" + n, make_tanh16(s, every.size)) for n, s in EXHAUSTIVE_TANH_SCALES.items()]
    cases += [("allsig_" + n, make_sigmoid16(s, every.size)) for n, s in EXHAUSTIVE_TANH_SCALES.items()]
    cases += [("alllut_%s_%d" % (f, k), make_lut16(f, s_in, s_out, every.size)) for f in EXHAUSTIVE_LUT16
              for k, (s_in, s_out) in enumerate(((8 / 32768, 8 / 32768), (1e-3, 4e-4), (0.01, 0.003)))]
    cases += [("alllrelu", make_leakyrelu16(rng, every.size))]
    names = [n for n, _ in cases]
    graphs = [g for _, g in cases]
    gens = [codegen.generate(g, "k16_" + n) for n, g in cases]
    inputs = [every if n.startswith("all") else _int16(rng, (24,) + g.tensors[g.input].shape[1:]) for n, g in cases]
    refs = [R.run(g, x).reshape(len(x), -1) for g, x in zip(graphs, inputs)]
    exe = simulate.build_host(gens, tmp_path, opt, extra=extra)
    outs = simulate.run_host(exe, gens, inputs)
    for y, r, g in zip(outs, refs, graphs):
        assert y.dtype == g.tensors[g.output].np_dtype
    bad = [n for n, y, r in zip(names, outs, refs) if not np.array_equal(y, r)]
    assert not bad, "C differs from the reference for %s" % bad
    # the tanh outputs span the whole range and the argmax ties really occur
    tanh_all = outs[names.index("all_pot12")]
    assert tanh_all.min() == -32767 and tanh_all.max() == 32767
    sig_all = outs[names.index("allsig_pot12")]              # inputs +-8: sigmoid(+-8) * 2^15 = 32757, 11
    assert (sig_all.min(), sig_all.max()) == (11, 32757)
    sig_wide = outs[names.index("allsig_wide")]              # saturated both ways
    assert (sig_wide.min(), sig_wide.max()) == (1, 32767)


def test_16x8_relu_and_clip_deploy_bit_exact_within_one_lsb_of_onnxruntime(tmp_path):
    """A Linear -> ReLU -> Linear -> Clip(-1, 1) policy head (a continuous policy's bounded mean) in 16x8: the
    relu and the clip are requant16 ops, every op within 1 LSB of onnxruntime, the C bit-exact on the host
    (and rv32 where it is installed)."""
    import torch
    from grpo_edge.targets import deploy
    torch.manual_seed(0)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(6, 24), torch.nn.Linear(24, 2)

        def forward(self, x):
            return torch.clamp(self.b(torch.relu(self.a(x))) * 3.0, -1.0, 1.0)
    torch.onnx.export(Head().eval(), (torch.zeros(1, 6),), str(tmp_path / "h.onnx"), input_names=["x"],
                      output_names=["y"], dynamo=False, opset_version=17)
    np.save(tmp_path / "c.npy", np.random.default_rng(0).normal(size=(400, 6)).astype(np.float32) * 2)
    rep = deploy("esp32c3", onnx=str(tmp_path / "h.onnx"), out_dir=str(tmp_path / "out"), options={
        "calibration": str(tmp_path / "c.npy"), "activations": "int16", "callgrind": False, "tflm": False,
        "min_agreement": 0})
    f = rep.figures
    kinds = [r["op"] for r in rep.sections["onnxruntime_check"]["per_op"]]
    assert kinds.count("requant16") >= 2, kinds                 # the relu and the clip
    assert f["activations"].value == "int16" and f["host_bit_exact"].value is True
    assert f["ort_max_lsb_per_op"].value <= 1
    if rv32.available():
        assert f["rv32_bit_exact"].value is True
    assert f["decision_agreement_fp32"].value >= 0.99


def test_16x8_residual_add_and_constant_sub_bit_exact_and_equal_to_tflm(tmp_path):
    """h + tanh(fc(h)) and h - k (a constant vector) in 16x8: add16 is TFLM's ADD / SUB rule with left shift
    15; the C bit-exact on host and rv32, TFLM's outputs equal ours, each add within 1 LSB of onnxruntime."""
    import torch
    from grpo_edge.targets import deploy
    from grpo_edge.targets.esp32 import tflm
    torch.manual_seed(0)

    class Res(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = torch.nn.Linear(6, 24), torch.nn.Linear(24, 24), torch.nn.Linear(24, 3)
            self.k = torch.nn.Parameter(torch.randn(24) * 0.3)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            h = h + torch.tanh(self.b(h))
            return self.c(h - self.k)
    torch.onnx.export(Res().eval(), (torch.zeros(1, 6),), str(tmp_path / "r.onnx"), input_names=["x"],
                      output_names=["y"], dynamo=False, opset_version=17)
    np.save(tmp_path / "c.npy", np.random.default_rng(0).normal(size=(400, 6)).astype(np.float32))
    rep = deploy("esp32c3", onnx=str(tmp_path / "r.onnx"), out_dir=str(tmp_path / "out"), options={
        "calibration": str(tmp_path / "c.npy"), "activations": "int16", "callgrind": False, "min_agreement": 0,
        "tflm": tflm.available()})
    f = {k: v.value for k, v in rep.figures.items()}
    per_op = {}
    for r in rep.sections["onnxruntime_check"]["per_op"]:
        per_op.setdefault(r["op"], []).append(r["max_lsb"])
    assert len(per_op["add16"]) == 2 and max(per_op["add16"]) <= 1, per_op
    assert f["activations"] == "int16" and f["host_bit_exact"] is True
    if rv32.available():
        assert f["rv32_bit_exact"] is True
    if tflm.available():
        assert f["tflm_outputs_max_lsb"] == 0
    assert f["decision_agreement_fp32"] >= 0.99


@pytest.mark.parametrize("scales", [(8 / 32768, 8 / 32768), (3e-4, 1e-4), (2e-5, 2e-5), (0.01, 0.003)])
def test_lut16_is_within_one_lsb_of_the_function_rounded_in_float32_on_every_code(scales):
    """Every function FLOAT_FUNCTIONS has, as a 16x8 table: on all 65,536 input codes within 1 LSB of
    quantize(f(dequantize(q))) computed in float32 as onnxruntime does, at most 17 KB, and some functions need
    the segments stored code by code (the kinks)."""
    from grpo_edge.targets.esp32.ops.lut import FLOAT_FUNCTIONS, reference_lut16
    every = np.arange(-32768, 32768, dtype=np.int64).astype(np.int16)
    exact_used = 0
    for f in FLOAT_FUNCTIONS:
        op = make_lut16(f, scales[0], scales[1], 4).ops[0]
        got = reference_lut16(every, op.attrs).astype(np.int64)
        real = np.float32(FLOAT_FUNCTIONS[f](R.dequantize(every, scales[0], 0).astype(np.float64),
                                             LUT16_PARAMS.get(f, {})))
        ort = R.quantize(real, scales[1], 0, "int16").astype(np.int64)
        assert np.abs(got - ort).max() <= 1, (f, scales, np.abs(got - ort).max())
        assert op.attrs["bytes"] <= 17 * 1024, (f, op.attrs["bytes"])
        exact_used += len(op.attrs["exact_segments"])
    assert exact_used > 0


def test_lut16_refuses_in_one_line_when_no_table_fits(monkeypatch):
    from grpo_edge.targets.esp32.ops import lut
    monkeypatch.setattr(lut, "LUT16_MAX_EXACT", 0)
    monkeypatch.setattr(lut, "LUT16_STEPS", (7,))
    x, y = _t16("x", (1, 4), 1e-3), _t16("y", (1, 4), 4e-4)
    g = _graph([x, y], [Op("lut", "/blk/Gelu", ["x"], "y", {"function": "gelu", "table": None})])
    with pytest.raises(ExportError, match=r"op gelu at node '/blk/Gelu': no int16 table within 1 LSB"):
        lut.to_lut16(g, g.ops[0])


def _deploy16(tmp_path, module, name, tflm_on):
    """Export module, deploy it in 16x8 to esp32c3 with calibration: every op within 1 LSB of onnxruntime."""
    f, per_op = _deploy16_bounded(tmp_path, module, name, tflm_on)
    assert f["ort_max_lsb_per_op"] <= 1, per_op
    return f, per_op


def test_16x8_elementwise_functions_mul_and_pad_deploy_bit_exact_within_one_lsb(tmp_path):
    """GELU, leaky relu, hard swish, a gate (a product of two activations), ELU, softplus times a negative
    constant and a constant pad, all in 16x8: tables (lut16), TFLM's LEAKY_RELU and MUL rules, pad16."""
    import torch
    F = torch.nn.functional
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c, self.g = (torch.nn.Linear(n, 24) for n in (6, 24, 24, 24))
            self.d = torch.nn.Linear(27, 3)

        def forward(self, x):
            h = F.hardswish(self.c(F.leaky_relu(self.b(F.gelu(self.a(x))), 0.1)))
            h = h * torch.sigmoid(self.g(h))
            h = F.elu(h) + F.softplus(h) * (-0.5)
            return self.d(F.pad(h, (1, 2), value=0.25))
    f, per_op = _deploy16(tmp_path, Net(), "fn", False)
    assert len(per_op["lut16"]) == 5 and {"leakyrelu16", "mul16", "pad16"} <= set(per_op), per_op
    assert f["decision_agreement_fp32"] >= 0.99


def test_16x8_leakyrelu_broadcast_mul_and_pad_equal_tflm(tmp_path):
    """LEAKY_RELU, MUL (one operand broadcast) and PADV2 at int16: TFLM's outputs equal ours."""
    import torch
    from grpo_edge.targets.esp32 import tflm
    if not tflm.available():
        pytest.skip("the tflite-micro package is not installed (the tflite extra)")
    F = torch.nn.functional
    torch.manual_seed(1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.g = torch.nn.Linear(6, 24), torch.nn.Linear(24, 24), torch.nn.Linear(24, 1)
            self.d = torch.nn.Linear(27, 3)

        def forward(self, x):
            h = F.leaky_relu(self.a(x), 0.1)
            h = self.b(h) * self.g(h)
            return self.d(F.pad(h, (1, 2), value=0.25))
    f, per_op = _deploy16(tmp_path, Net(), "tf", True)
    assert {"leakyrelu16", "mul16", "pad16"} <= set(per_op), per_op
    assert f["tflm_outputs_max_lsb"] == 0


def test_16x8_pools_deploy_bit_exact_within_one_lsb(tmp_path):
    """MaxPool, AveragePool (padded) and a global average at int16: maxpool16 / avgpool16."""
    import torch
    torch.manual_seed(2)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.d = torch.nn.Linear(6, 96), torch.nn.Linear(6, 3)

        def forward(self, x):
            h = torch.nn.functional.max_pool2d(torch.relu(self.a(x)).view(1, 6, 4, 4), 2, 1)
            h = torch.nn.functional.avg_pool2d(h, 2, 1, padding=1, count_include_pad=False)
            return self.d(h.mean(dim=(2, 3)))
    f, per_op = _deploy16(tmp_path, Net(), "pool", False)
    assert {"maxpool16", "avgpool16"} <= set(per_op), per_op
    assert f["decision_agreement_fp32"] >= 0.99


def test_layernorm16_rows_of_equal_values_and_full_range_rows():
    """A row of equal values normalizes to 0 (sigma 0); a row of -32768 / 32767 to +-1 (times gamma)."""
    from grpo_edge.targets.esp32.ops.layer_norm import reference16
    d = 8
    p = {"d": d, "eps": 0, "gamma": np.full(d, 127, np.int8), "bias": np.zeros(d, np.int32),
         "multiplier": np.full(d, 1 << 30, np.int32), "shift": np.full(d, -10, np.int32), "output_offset": 0,
         "activation_min": -32768, "activation_max": 32767}
    x = np.array([[5] * d, [-32768, 32767] * (d // 2)], np.int16)
    y = reference16(x, p).astype(np.int64)
    assert (y[0] == 0).all()
    one = round(65536 * 127 / 2 / 1024)                        # n = +-2^16, times 127, times 2^-11
    assert (np.abs(y[1]) == one).all() and y[1][0] < 0 < y[1][1]


def test_16x8_issue_mlp_with_two_layernorm_gelu_blocks_deploys_bit_exact(tmp_path):
    """The issue's MLP (two Linear -> LayerNorm -> GELU blocks, torch's exporter) in 16x8: layernorm16 and
    lut16, bit-exact on host and rv32, every op within 1 LSB of onnxruntime."""
    import torch
    F = torch.nn.functional
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.d = torch.nn.Linear(6, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 3)
            self.n1, self.n2 = torch.nn.LayerNorm(32), torch.nn.LayerNorm(32)

        def forward(self, x):
            return self.d(F.gelu(self.n2(self.b(F.gelu(self.n1(self.a(x)))))))
    f, per_op = _deploy16(tmp_path, Net(), "ln", False)
    assert len(per_op["layernorm16"]) == 2 and len(per_op["lut16"]) == 2, per_op
    assert f["decision_agreement_fp32"] >= 0.98


class _Moves(object):
    """Concat (one part scaled by 3), a view, Transpose, Slice and a second Concat: data moves at int16."""

    def __new__(cls, act):
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b, self.c = torch.nn.Linear(6, 24), torch.nn.Linear(24, 24), torch.nn.Linear(24, 12)
                self.d = torch.nn.Linear(36, 3)

            def forward(self, x):
                h = act(self.a(x))
                u = torch.cat([self.b(h), self.c(h)], dim=1)
                w = u.view(1, 6, 6).transpose(1, 2)[:, 1:4].reshape(1, 18)
                return self.d(torch.cat([u[:, :18], w], dim=1))
        return Net()


def test_16x8_concat_transpose_and_slice_deploy_bit_exact_and_equal_tflm(tmp_path):
    """concat16 (its parts rescaled to the output's scale), transpose16, slice16: bit-exact on host and rv32,
    within 1 LSB of onnxruntime, and TFLM's CONCATENATION / TRANSPOSE / SLICE at int16 give our outputs."""
    import torch
    from grpo_edge.targets.esp32 import tflm
    torch.manual_seed(3)
    f, per_op = _deploy16(tmp_path, _Moves(lambda v: torch.nn.functional.leaky_relu(v, 0.2)), "mv",
                          tflm.available())
    assert len(per_op["concat16"]) == 2 and {"transpose16", "slice16"} <= set(per_op), per_op
    if tflm.available():
        assert f["tflm_outputs_max_lsb"] == 0


def test_16x8_concat_with_a_constant_input_is_refused_naming_the_node():
    from grpo_edge.targets.esp32.ops.concat import to_concat16
    x, y = _t16("x", (1, 2, 4), 1e-3), _t16("y", (1, 3, 4), 1e-3)
    g = _graph([x, y], [Op("concat", "/cls/Concat", ["x", "tok"], "y", {"axis": 1, "tables": [None, None],
                                                                         "constants": {"tok": np.zeros((1, 1, 4))}})])
    with pytest.raises(ExportError, match=r"concat node '/cls/Concat': a constant input \(tok\)"):
        to_concat16(g, g.ops[0])


def test_log_softmax16_is_within_one_lsb_of_the_float_log_softmax():
    """The 16x8 log-softmax against log_softmax(dequantize(x)) rounded at 2^-10 and clipped at -32: within 1
    LSB on rows of random int16 inputs at several input scales."""
    from grpo_edge.targets.esp32.log_softmax_ref import log_softmax_int16
    rng = np.random.default_rng(9)
    for s_in in (1e-5, 1e-4, 1e-3, 3e-3):
        g = make_log_softmax16(rng)
        x = _t16("x", (1, 4, 16), s_in)
        from grpo_edge.targets.esp32.log_softmax_ref import log_softmax_params
        p = log_softmax_params(x, g.tensors["y"], int16=True)
        q = rng.integers(-32768, 32768, size=(200, 16)).astype(np.int16)
        y = log_softmax_int16(q, p).astype(np.int64)
        r = q.astype(np.float64) * float(np.float32(s_in))
        r = r - r.max(-1, keepdims=True)
        ref = r - np.log(np.exp(r).sum(-1, keepdims=True))
        want = np.clip(np.round(ref * 1024), -32768, 32767)
        assert np.abs(y - want).max() <= 1, s_in


def test_16x8_log_softmax_policy_deploys_bit_exact_within_one_lsb(tmp_path):
    """A policy head written log_softmax(logits) in 16x8: onnx2int8 gives its output 2^-10 / 0, the kernel is
    log_softmax16, bit-exact on host and rv32, within 1 LSB of onnxruntime."""
    import torch
    torch.manual_seed(4)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(6, 24), torch.nn.Linear(24, 5)

        def forward(self, x):
            return torch.log_softmax(self.b(torch.relu(self.a(x))), dim=-1)
    f, per_op = _deploy16(tmp_path, Net(), "lsm", False)
    assert per_op["log_softmax16"] == [0] or per_op["log_softmax16"] == [1], per_op
    assert f["decision_agreement_fp32"] >= 0.99


def test_16x8_convs_deploy_bit_exact_and_a_plain_conv_equals_tflm(tmp_path):
    """Conv2d (padded), a depthwise conv of stride 2 after a pad, and a dilated Conv1d in 16x8: conv16, bit-exact
    on host and rv32, within 1 LSB of onnxruntime; a plain conv alone: TFLM's CONV_2D at int16 gives our outputs."""
    import torch
    from grpo_edge.targets.esp32 import tflm
    F = torch.nn.functional
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.d = torch.nn.Linear(6, 48), torch.nn.Linear(16, 3)
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=8)
            self.c3 = torch.nn.Conv1d(8, 4, 2, dilation=2, padding=1)

        def forward(self, x):
            h = F.pad(F.leaky_relu(self.c1(self.a(x).view(1, 3, 4, 4)), 0.1), (1, 1, 1, 1))
            return self.d(self.c3(self.c2(h).view(1, 8, 4)).reshape(1, -1))
    f, per_op = _deploy16(tmp_path, Net(), "conv", False)
    assert len(per_op["conv16"]) == 3, per_op
    assert f["decision_agreement_fp32"] >= 0.99
    if not tflm.available():
        return

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.c, self.d = torch.nn.Linear(6, 48), torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(128, 3)

        def forward(self, x):
            return self.d(self.c(self.a(x).view(1, 3, 4, 4)).reshape(1, -1))
    f, per_op = _deploy16(tmp_path, Plain(), "plain", True)
    assert per_op["conv16"] and f["tflm_outputs_max_lsb"] == 0


def test_conv16_accumulator_overflow_is_refused_naming_the_node():
    from grpo_edge.targets.esp32.ops.conv import to_conv16
    g = make_conv16(np.random.default_rng(0))
    op = g.ops[0]
    op.kind, op.name = "conv", "/big/Conv"
    op.attrs["weights"] = np.full((2, 400, 3, 3), 127, np.int8)
    op.attrs["bias"] = np.zeros(2, np.int32)
    with pytest.raises(ExportError, match=r"conv node '/big/Conv': the int16 x int8 accumulator could reach"):
        to_conv16(g, op)


def test_16x8_attention_block_deploys_bit_exact_within_its_bounds(tmp_path):
    """q k^T / sqrt(d), softmax, times v in 16x8: matmul16 (int64 accumulator, TFLite's int64 requantize),
    softmax16 (TFLite's SoftmaxInt16), transpose16; bit-exact on host and rv32, each op within its bound."""
    import torch
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e, self.d = torch.nn.Linear(6, 32), torch.nn.Linear(32, 3)
            self.q, self.k, self.v = (torch.nn.Linear(8, 8) for _ in range(3))

        def forward(self, x):
            h = self.e(x).view(1, 4, 8)
            a = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2) / 2.83, dim=-1)
            return self.d((a @ self.v(h)).reshape(1, 32))
    f, per_op = _deploy16_bounded(tmp_path, Net(), "att", False)
    assert len(per_op["matmul16"]) == 2 and per_op["softmax16"] and per_op["transpose16"], per_op
    assert f["decision_agreement_fp32"] >= 0.99


def test_16x8_softmax_head_equals_tflm(tmp_path):
    """A softmax policy head in 16x8: onnx2int8 pins its output at 1/32768, and TFLM's SOFTMAX at int16 gives
    our outputs."""
    import torch
    from grpo_edge.targets.esp32 import tflm
    if not tflm.available():
        pytest.skip("the tflite-micro package is not installed (the tflite extra)")
    torch.manual_seed(5)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(6, 24), torch.nn.Linear(24, 5)

        def forward(self, x):
            return torch.softmax(self.b(torch.nn.functional.leaky_relu(self.a(x), 0.2)), dim=-1)
    f, per_op = _deploy16_bounded(tmp_path, Net(), "smx", True)
    assert per_op["softmax16"], per_op
    assert f["tflm_outputs_max_lsb"] == 0


def test_softmax16_and_matmul16_bounds_hold_on_random_rows():
    """The documented distances from float: TFLite's int16 softmax within 2 n + 2 LSB of 2^-15 (the exp(-10)
    floor), the int64 matmul requantize within 2 LSB (the 16-bit reduced multiplier)."""
    from grpo_edge.targets.esp32.text_ref import mbqm64, softmax16
    from grpo_edge.targets.esp32.textir import softmax_multiplier, softmax_tables
    rng, t = np.random.default_rng(11), softmax_tables()
    for s_in in (1e-5, 3e-4, 3e-3):
        m, sh = softmax_multiplier(s_in)
        for n in (2, 16, 64):
            q = rng.integers(-32768, 32768, size=(200, n))
            q[:40] //= 100
            y = softmax16(q, m, sh, t["exp"], t["recip"]).astype(np.int64)
            r = q * np.float64(np.float32(s_in))
            e = np.exp(r - r.max(-1, keepdims=True))
            want = R.quantize(np.float32(e / e.sum(-1, keepdims=True)), 1 / 32768, 0, "int16").astype(np.int64)
            assert np.abs(y - want).max() <= 2 * n + 2, (s_in, n)
    for _ in range(200):
        k = int(rng.integers(1, 64))
        acc = rng.integers(-32768, 32768, size=(8, k)) @ rng.integers(-32768, 32768, size=(k, 8))
        real = float(np.float32(32767 / np.abs(acc).max() * 10 ** rng.uniform(-0.5, 1)))
        mm, sh = R.quantize_multiplier(real)
        y = np.clip(mbqm64(acc, mm, sh), -32768, 32767)
        assert np.abs(y - np.clip(np.round(acc * real), -32768, 32767)).max() <= 2


def _deploy16_bounded(tmp_path, module, name, tflm_on):
    """_deploy16 for graphs whose ops have bounds above 1 LSB: every op within its own (ort_ops_over_bound 0)."""
    import torch
    from grpo_edge.targets import deploy
    torch.onnx.export(module.eval(), (torch.zeros(1, 6),), str(tmp_path / (name + ".onnx")), input_names=["x"],
                      output_names=["y"], dynamo=False, opset_version=17)
    np.save(tmp_path / "c.npy", np.random.default_rng(0).normal(size=(400, 6)).astype(np.float32))
    rep = deploy("esp32c3", onnx=str(tmp_path / (name + ".onnx")), out_dir=str(tmp_path / name), options={
        "calibration": str(tmp_path / "c.npy"), "activations": "int16", "callgrind": False, "min_agreement": 0,
        "tflm": tflm_on})
    per_op = {}
    for r in rep.sections["onnxruntime_check"]["per_op"]:
        per_op.setdefault(r["op"], []).append(r["max_lsb"])
    f = {k: v.value for k, v in rep.figures.items()}
    assert f["activations"] == "int16" and f["host_bit_exact"] is True
    assert f["ort_ops_over_bound"] == 0, rep.sections["onnxruntime_check"]["per_op"]
    if rv32.available():
        assert f["rv32_bit_exact"] is True
    return f, per_op


def test_int8_constant_add_operand_becomes_int16_in_a_16x8_graph():
    """onnxruntime's 16x8 quantizer leaves a constant Add operand int8 (per channel): parse re-expresses it as
    int16 codes at one scale, each real value within half of that step."""
    from grpo_edge.targets.esp32.ops.add import _as_int16
    rng = np.random.default_rng(5)
    codes = rng.integers(-127, 128, size=(3, 8)).astype(np.int8)
    scale = rng.uniform(0.001, 0.1, 3).astype(np.float32)
    real = codes.astype(np.float64) * scale.reshape(3, 1).astype(np.float64)
    q, step, zp = _as_int16(codes, scale, np.zeros(3, np.int8), axis=0)
    assert q.dtype == np.int16 and int(zp) == 0 and step.size == 1
    assert np.abs(q * float(step) - real).max() <= float(step) / 2 + 1e-12
    assert np.abs(q).max() == 32767


def test_argmax_ties_pick_the_first_index():
    rng = np.random.default_rng(3)
    g = make_fc16_argmax(rng, ties=True)
    x = _int16(rng, (50, g.tensors["x"].shape[1]))
    h = R.run(g, x, keep=True)["h"]
    assert (h[:, 0] == h[:, 1]).all()
    assert (R.run(g, x).reshape(-1) != 1).all()


# ----------------------------------------------------------------------------- whole models

def _cartpole16(d):
    """The fixture CartPole checkpoint as deploy builds its 16x8 form (int16 activations, GPTQ weights)."""
    from session_cache import checkpoint as cached_checkpoint

    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.export.calibration import checkpoint2calibration
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.torch2onnx import torch2onnx
    ckpt = cached_checkpoint("cartpole")
    torch2onnx(load_policy(ckpt)[0], d / "m.onnx")
    checkpoint2calibration(ckpt, d / "calib.npz", n=512)
    onnx2int8(d / "m.onnx", d / "calib.npz", d / "m16.onnx", activations="int16", weight_rounding="gptq")
    return d / "m16.onnx"


@pytest.fixture(scope="module", params=["mlp16", "cartpole16"])
def model16(request, tmp_path_factory):
    if request.param == "cartpole16":
        path = _cartpole16(tmp_path_factory.mktemp("cartpole16"))
    else:
        path = session_cache.sample("mlp16")
    g = parse.parse(path)
    return request.param, g, codegen.generate(g, request.param)


def test_16x8_mlp_host_bit_exact_at_o2_and_o0(model16):
    name, g, gen = model16
    assert [op.kind for op in g.ops] == ["fc16", "tanh16", "fc16", "tanh16", "fc16"]
    assert g.activation_dtype == "int16"
    x = _int16(np.random.default_rng(7), (1000,) + g.tensors[g.input].shape[1:])
    res = simulate.host_check(g, gen, x)
    assert res["n_inputs"] == 1000
    assert set(res["builds"]) == {"O2", "O0-novec"}
    assert res["bit_exact"], res


def test_16x8_mlp_rv32_bit_exact(model16):
    need(rv32.available(), rv32.missing_reason())
    name, g, gen = model16
    x = _int16(np.random.default_rng(8), (60,) + g.tensors[g.input].shape[1:])
    res = rv32.rv32_check(g, gen, x, n_counted=2)
    assert res["bit_exact"] and res["mismatches"] == 0, res
    assert res["instructions"]["min"] > 0


def test_16x8_header_declares_int16_api(model16):
    name, g, gen = model16
    h, c = gen.header, gen.source
    assert "int %s_invoke(const int16_t *in, int16_t *out);" % name in h
    assert "typedef int16_t %s_input_t;" % name in h and "typedef int16_t %s_output_t;" % name in h
    assert "int16 values" in h and "int8 values" not in h
    assert "TFLite int16 (16x8" in h and "TFLite int16 (16x8" in c
    assert "int %s_invoke(const int16_t *in, int16_t *out)\n{" % name in c
    assert c.count("%s_sigmoid16[256]" % name) == 1            # one table for both tanh ops
    assert gen.input_dtype == gen.output_dtype == "int16"


def test_int8_header_keeps_int8_api():
    g = parse.parse(session_cache.sample("mlp"))
    gen = codegen.generate(g, "m8")
    assert "int m8_invoke(const int8_t *in, int8_t *out);" in gen.header
    assert "typedef int8_t m8_input_t;" in gen.header and "typedef int8_t m8_output_t;" in gen.header
    assert "TFLite int8 rules" in gen.header and "sigmoid16" not in gen.source and "halves" not in gen.source


def test_16x8_with_argmax_outputs_int8(tmp_path):
    """A 16x8 MLP with an argmax head: int16 input, int8 output, through host and header."""
    import copy
    g = copy.deepcopy(parse.parse(session_cache.sample("mlp16")))
    g.tensors["action"] = TensorInfo("action", (1, 1), 1.0, 0, "int8")
    g.ops.append(Op("argmax", "argmax", [g.output], "action", {}))
    g.output = "action"
    gen = codegen.generate(g, "am16")
    assert "int am16_invoke(const int16_t *in, int8_t *out);" in gen.header
    assert "typedef int8_t am16_output_t;" in gen.header
    x = _int16(np.random.default_rng(9), (300, 4))
    assert simulate.host_check(g, gen, x)["bit_exact"]


def test_16x8_firmware_app_compiles_and_runs_on_host(model16, tmp_path):
    name, g, gen = model16
    fw = firmware.assemble(g, gen, tmp_path, n_vectors=5)
    d, comp = fw["dir"], fw["component"]
    tv = (comp / (name + "_testvec.c")).read_text()
    assert "const %s_input_t %s_testvec_in[20]" % (name, name) in tv and "random int16 inputs" in tv
    x, y, checksum = firmware.test_vectors(g, 5)
    assert x.dtype == np.int16 and np.abs(x.astype(np.int64)).max() > 127
    assert checksum == fw["checksum"] == firmware.fnv1a(y.astype("<i2").tobytes())
    srcs = [d / "main" / "grpo_app.c", d / "main" / "main.c", d / "host" / "host_main.c",
            comp / (name + "_model.c"), comp / (name + "_testvec.c")]
    exe = tmp_path / "app"
    subprocess.run([simulate.gcc(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2",
                    "-DGRPO_TIMING_REPEATS=2", "-I", str(d / "host"), "-I", str(d / "main"), "-I", str(comp),
                    "-o", str(exe)] + [str(s) for s in srcs], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    from grpo_edge.targets.esp32.flash import parse_line
    res = {}
    for line in out.splitlines():
        res.update(parse_line(line))
    assert res["status"] == "OK" and res["checksum"] == res["expected"] == fw["checksum"]
    assert res["vectors"] == 5 and res["runs"] == 10 and res["done"]


def test_16x8_firmware_cross_compiles_rv32(model16, tmp_path):
    need(shutil.which(rv32.CROSS) is not None, rv32.missing_reason())
    name, g, gen = model16
    fw = firmware.assemble(g, gen, tmp_path, n_vectors=2)
    d, comp = fw["dir"], fw["component"]
    for src in (d / "main" / "grpo_app.c", comp / (name + "_model.c"), comp / (name + "_testvec.c")):
        subprocess.run([rv32.CROSS] + rv32.RV_FLAGS + ["-c", "-I", str(d / "main"), "-I", str(comp),
                                                       "-o", str(tmp_path / (src.stem + ".o")), str(src)], check=True)


# ----------------------------------------------------------------------------- rejections

def _fc_graph(n_in, w_value, dtypes=("int16", "int16")):
    """x (1, n_in) -> fc 'big_fc' -> y (1, 2), as the parser leaves an fc before to_16x8."""
    x = TensorInfo("x", (1, n_in), 1e-4, 0, dtypes[0])
    y = TensorInfo("y", (1, 2), 1e-2, 0, dtypes[1])
    a = {"weights": np.full((2, n_in), w_value, np.int8), "bias": np.zeros(2, np.int32),
         "weight_scales": np.full(2, 0.01, np.float32), "multiplier": np.full(2, 1 << 30, np.int32),
         "shift": np.full(2, -5, np.int32), "input_offset": 0, "output_offset": 0,
         "activation_min": -128, "activation_max": 127}
    return _graph([x, y], [Op("fc", "big_fc", ["x"], "y", a)])


def test_fc16_accumulator_overflow_is_rejected_naming_the_node():
    g = _fc_graph(600, 127)                           # 32768 * 127 * 600 > 2^31 - 1
    with pytest.raises(ExportError, match="big_fc.*accumulator"):
        to_16x8(g)
    ok = _fc_graph(500, 127)                          # 32768 * 127 * 500 < 2^31 - 1
    to_16x8(ok)
    assert ok.ops[0].kind == "fc16" and ok.ops[0].attrs["activation_max"] == 32767
    # codegen checks again for a hand-made fc16
    bad = _fc_graph(600, -127)
    bad.ops[0].kind = "fc16"
    with pytest.raises(ExportError, match="big_fc.*overflow"):
        codegen.generate(bad, "bad")


def test_mixed_int8_int16_activations_are_rejected():
    x = TensorInfo("x", (1, 4), 1e-4, 0, "int16")
    h = TensorInfo("h", (1, 3), 0.05, 3, "int8")
    y = TensorInfo("y", (1, 2), 1e-3, 0, "int16")
    g = _fc_graph(4, 1)
    a = dict(g.ops[0].attrs, weights=np.ones((3, 4), np.int8), bias=np.zeros(3, np.int32),
             multiplier=np.full(3, 1 << 30, np.int32), shift=np.full(3, -5, np.int32))
    g = _graph([x, h, y], [Op("fc", "fc1", ["x"], "h", a), Op("fc", "fc2", ["h"], "y", dict(g.ops[0].attrs,
               weights=np.ones((2, 3), np.int8)))])
    with pytest.raises(ExportError, match="'h'.*mixed int8/int16"):
        to_16x8(g)
