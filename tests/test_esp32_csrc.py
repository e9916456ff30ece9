"""The ESP32 kernels as real C, on their own: each header in grpo_edge/targets/esp32/csrc compiles alone
(-std=c99 -Wall -Wextra -Werror -pedantic, host gcc and rv32 when installed), and a small C test written
here (params structs filled by hand, not by the code generator) calls each kernel on random data and
prints its outputs, which must equal the NumPy reference bit for bit."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from grpo_edge.targets.esp32 import codegen, rv32, simulate
from grpo_edge.targets.esp32 import reference as R
from grpo_edge.targets.esp32.ops import OPS
from grpo_edge.targets.esp32.int16_ref import SIGMOID_TABLE_UINT16, tanh_params

FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
OWN = [h for h in codegen.KERNEL_HEADERS if (codegen.CSRC / h).is_file()]


def need(ok, reason):
    if not ok:
        if os.environ.get("GRPO_EDGE_REQUIRE_TOOLS") == "1":
            pytest.fail("required tool missing: " + reason)
        pytest.skip(reason)


def _arr(ctype, name, v):
    vals = ", ".join(str(int(x)) for x in np.asarray(v).reshape(-1)) or "0"
    return "static const %s %s[] = {%s};\n" % (ctype, name, vals.replace("-2147483648", "(-2147483647 - 1)"))


def _compile_run(tmp_path, name, body, opt="-O2"):
    src = tmp_path / (name + ".c")
    src.write_text("#include <stdio.h>\n" + body)
    exe = tmp_path / name
    subprocess.run([simulate.gcc()] + FLAGS + [opt, "-I", str(codegen.CSRC), "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return np.array([int(t) for t in out.split()], dtype=np.int64)


@pytest.mark.parametrize("header", OWN)
def test_header_compiles_on_its_own(tmp_path, header):
    src = tmp_path / "only.c"
    src.write_text('#include "%s"\n#include "%s"\nint gx_only(void);\nint gx_only(void) { return 0; }\n'
                   % (header, header))                                   # and twice: include guard
    subprocess.run([simulate.gcc()] + FLAGS + ["-O2", "-c", "-I", str(codegen.CSRC), "-o", str(tmp_path / "o.o"),
                                               str(src)], check=True)
    need(shutil.which(rv32.CROSS) is not None, "%s not installed" % rv32.CROSS)
    subprocess.run([rv32.CROSS] + rv32.RV_FLAGS + ["-c", "-I", str(codegen.CSRC), "-o", str(tmp_path / "r.o"),
                                                   str(src)], check=True)


def _requant(rng, n, lo=-128, hi=127):
    mult, shift = zip(*[R.quantize_multiplier(float(m)) for m in rng.uniform(0.0005, 0.05, n)])
    if rng.random() < 0.3:                                   # a multiplier > 1 (positive shift)
        mult, shift = zip(*[R.quantize_multiplier(float(m)) for m in rng.uniform(1.0, 3.0, n)])
    return {"multiplier": np.array(mult, np.int32), "shift": np.array(shift, np.int32),
            "output_offset": int(rng.integers(-128, 128)) if lo == -128 else 0,
            "activation_min": lo, "activation_max": hi}


def _conv_case(rng, k):
    kind = k % 5                      # 0 3x3 pad, 1 1x1, 2 1x1 stride 2, 3 depthwise, 4 random
    C = int(rng.integers(1, 9))
    G = C if kind == 3 else (2 if kind == 4 and C % 2 == 0 else 1)
    OC = G * int(rng.integers(1, 4)) if kind in (3, 4) else int(rng.integers(1, 11))
    KH, KW = (1, 1) if kind in (1, 2) else ((3, 3) if kind in (0, 3) else tuple(int(v) for v in rng.integers(1, 4, 2)))
    S = (2, 2) if kind == 2 else ((1, 1) if kind in (0, 1) else tuple(int(v) for v in rng.integers(1, 3, 2)))
    D = tuple(int(v) for v in rng.integers(1, 3, 2)) if kind == 4 else (1, 1)
    pads = (0, 0, 0, 0) if kind in (1, 2) else ((1, 1, 1, 1) if kind in (0, 3) else
                                                  tuple(int(v) for v in rng.integers(0, 3, 4)))
    H = int(rng.integers(D[0] * (KH - 1) + 1, 10))
    W = int(rng.integers(D[1] * (KW - 1) + 1, 10))
    OH = (H + pads[0] + pads[2] - D[0] * (KH - 1) - 1) // S[0] + 1
    OW = (W + pads[1] + pads[3] - D[1] * (KW - 1) - 1) // S[1] + 1
    zp = int(rng.integers(-128, 128))
    p = {"weights": rng.integers(-127, 128, (OC, C // G, KH, KW)).astype(np.int8),
         "bias": rng.integers(-5000, 5000, OC).astype(np.int32), "input_offset": -zp, "strides": S, "dilations": D,
         "pads": pads, "group": G}
    p.update(_requant(rng, OC))
    x = rng.integers(-128, 128, (1, C, H, W)).astype(np.int8)
    return p, x, (C, H, W, OC, OH, OW, KH, KW)


def test_conv_kernel_alone_matches_reference(tmp_path):
    rng = np.random.default_rng(11)
    body, calls, want = '#include "gx_kernels.h"\n', [], []
    for k in range(40):
        p, x, (C, H, W, OC, OH, OW, KH, KW) = _conv_case(rng, k)
        folded = p["bias"].astype(np.int64) + p["input_offset"] * p["weights"].reshape(OC, -1).astype(np.int64).sum(1)
        body += (_arr("int8_t", "w%d" % k, p["weights"]) + _arr("int32_t", "b%d" % k, folded) +
                 _arr("int32_t", "m%d" % k, p["multiplier"]) + _arr("int8_t", "s%d" % k, p["shift"]) +
                 _arr("int8_t", "x%d" % k, x))
        body += ("static const gx_conv_t p%d = {%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, w%d, "
                 "{b%d, m%d, s%d, %d, %d, %d}, 0, 0};\n"
                 % (k, C, H, W, OC, OH, OW, KH, KW, p["strides"][0], p["strides"][1], p["dilations"][0],
                    p["dilations"][1], p["pads"][0], p["pads"][1], p["group"], -p["input_offset"], k, k, k, k,
                    p["output_offset"], p["activation_min"], p["activation_max"]))
        calls.append("    { static int8_t y[%d]; static int8_t scratch[GX_CONV_SCRATCH(%d, %d, %d) + 1];\n"
                     "      gx_conv(&p%d, x%d, y, scratch); for (i = 0; i < %d; ++i) printf(\"%%d \", y[i]); }\n"
                     % (OC * OH * OW, C // p["group"], KH, KW, k, k, OC * OH * OW))
        want.append(OPS["conv"].reference(x, p).reshape(-1))
    body += "int main(void)\n{\n    int i;\n" + "".join(calls) + "    return 0;\n}\n"
    for opt in ("-O2", "-O0"):
        assert np.array_equal(_compile_run(tmp_path, "conv", body, opt), np.concatenate(want))


def test_fc_kernel_alone_matches_reference(tmp_path):
    rng = np.random.default_rng(12)
    body, calls, want = '#include "gx_kernels.h"\n', [], []
    for k in range(30):
        n_in, n_out = int(rng.integers(1, 70)), int(rng.integers(1, 13))
        zp = int(rng.integers(-128, 128))
        p = {"weights": rng.integers(-127, 128, (n_out, n_in)).astype(np.int8),
             "bias": rng.integers(-20000, 20000, n_out).astype(np.int32), "input_offset": -zp}
        p.update(_requant(rng, n_out))
        fold = k % 2 == 0
        bias = p["bias"].astype(np.int64) + (p["input_offset"] * p["weights"].astype(np.int64).sum(1) if fold else 0)
        x = rng.integers(-128, 128, (1, n_in)).astype(np.int8)
        body += (_arr("int8_t", "w%d" % k, p["weights"]) + _arr("int32_t", "b%d" % k, bias) +
                 _arr("int32_t", "m%d" % k, p["multiplier"]) + _arr("int8_t", "s%d" % k, p["shift"]) +
                 _arr("int8_t", "x%d" % k, x))
        body += ("static const gx_fc_t p%d = {%d, %d, %d, w%d, {b%d, m%d, s%d, %d, %d, %d}};\n"
                 % (k, n_in, n_out, 0 if fold else p["input_offset"], k, k, k, k, p["output_offset"],
                    p["activation_min"], p["activation_max"]))
        calls.append("    { static int8_t y[%d]; gx_fc(&p%d, x%d, y); for (i = 0; i < %d; ++i) printf(\"%%d \", y[i]); }\n"
                     % (n_out, k, k, n_out))
        want.append(OPS["fc"].reference(x, p).reshape(-1))
    body += "int main(void)\n{\n    int i;\n" + "".join(calls) + "    return 0;\n}\n"
    for opt in ("-O2", "-O0"):
        assert np.array_equal(_compile_run(tmp_path, "fc", body, opt), np.concatenate(want))


def test_16x8_kernels_alone_match_reference(tmp_path):
    rng = np.random.default_rng(13)
    body = '#include "gx_kernels16.h"\n' + _arr("uint16_t", "sig", SIGMOID_TABLE_UINT16)
    calls, want = [], []
    for k in range(20):
        n_in, n_out = int(rng.integers(1, 70)), int(rng.integers(1, 13))
        p = {"weights": rng.integers(-127, 128, (n_out, n_in)).astype(np.int8),
             "bias": rng.integers(-20000, 20000, n_out).astype(np.int32)}
        p.update(_requant(rng, n_out, -32768, 32767))
        x = rng.integers(-32768, 32768, (1, n_in)).astype(np.int16)
        body += (_arr("int8_t", "w%d" % k, p["weights"]) + _arr("int32_t", "b%d" % k, p["bias"]) +
                 _arr("int32_t", "m%d" % k, p["multiplier"]) + _arr("int8_t", "s%d" % k, p["shift"]) +
                 _arr("int16_t", "x%d" % k, x))
        body += ("static const gx_fc16_t p%d = {%d, %d, w%d, {b%d, m%d, s%d, 0, -32768, 32767}};\n"
                 % (k, n_in, n_out, k, k, k, k))
        calls.append("    { static int16_t y[%d]; gx_fc16(&p%d, x%d, y); for (i = 0; i < %d; ++i) printf(\"%%d \", y[i]); }\n"
                     % (n_out, k, k, n_out))
        want.append(OPS["fc16"].reference(x, p).reshape(-1))
    every = np.arange(-32768, 32768).astype(np.int16).reshape(1, -1)
    body += _arr("int16_t", "every", every)
    for k, scale in enumerate([2.0 ** -12, 2.0 ** -10, 3.2e-5, 8.0]):
        tp = tanh_params(scale)
        m, ls = tp["input_multiplier"], tp["input_left_shift"]
        if m == 0:
            m, ls = 3 << ls, 0
        wide = int(32768 * m + ((1 << (ls - 1)) if ls else 0) > (1 << 31) - 1)
        body += "static const gx_tanh16_t t%d = {%d, %d, %d, %d, sig};\n" % (k, every.size, m, ls, wide)
        calls.append("    { static int16_t y[%d]; gx_tanh16(&t%d, every, y); for (i = 0; i < %d; ++i) printf(\"%%d \", y[i]); }\n"
                     % (every.size, k, every.size))
        want.append(OPS["tanh16"].reference(every, tp).reshape(-1))
    body += "int main(void)\n{\n    int i;\n" + "".join(calls) + "    return 0;\n}\n"
    assert np.array_equal(_compile_run(tmp_path, "k16", body), np.concatenate(want))


def test_isqrt64_is_the_exact_floor_square_root(tmp_path):
    """gx_isqrt64 (the layer norms' standard deviation) equals math.isqrt, and so does its NumPy mirror
    fixedpoint.isqrt64 below 2^62, on edges and random 64-bit values."""
    import math
    rng = np.random.default_rng(7)
    vals = [0, 1, 2, 3, 4, 15, 16, 17, (1 << 32) - 1, 1 << 32, (1 << 62) - 1, 1 << 62, (1 << 64) - 1]
    vals += [int(v) for v in rng.integers(0, 1 << 62, size=50, dtype=np.int64)]
    vals += [k * k + d for k in (3, 65535, 3037000499) for d in (-1, 0, 1)]
    body = ('#include "gx_fixedpoint.h"\nstatic const uint64_t v[] = {%s};\nint main(void)\n{\n    size_t i;\n'
            '    for (i = 0; i < sizeof v / sizeof v[0]; ++i) printf("%%lu\\n", (unsigned long)gx_isqrt64(v[i]));\n'
            '    return 0;\n}\n' % ", ".join("%dULL" % v for v in vals))
    got = _compile_run(tmp_path, "isqrt", body)
    assert [int(g) for g in got] == [math.isqrt(v) for v in vals]
    from grpo_edge.targets.esp32.fixedpoint import isqrt64
    small = [v for v in vals if v < 1 << 62]
    assert isqrt64(np.array(small, np.int64)).tolist() == [math.isqrt(v) for v in small]
