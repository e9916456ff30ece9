"""ESP-NN from the generated C: the S3 firmware calls Espressif's kernels (its SIMD versions on the S3) for the ops
ESP-NN computes with TFLite's arithmetic, while our planner keeps the arena and our C runs the rest.

The C of a graph with `esp_nn` set (a .tflite deployed to the S3, read NHWC: ESP-NN's layout) holds both paths:
  #ifdef GX_USE_ESP_NN   esp_nn_conv_s8(...)      the firmware: ESP-NN is an ESP-IDF component dependency
  #else                  gx_conv_nhwc(...)         the host and rv32 builds, and a firmware without ESP-NN
The arguments are our parameters (TFLM's Prepare, computed once): NHWC dims, OHWI / 1HWO weights, the plain
int32 bias, per-channel multipliers and shifts (as int32, ESP-NN's type), offsets, the fused activation range.
Which ops (and why not the others):
  conv (groups 1), depthwise   esp_nn_conv_s8 / esp_nn_depthwise_conv_s8; dilation 1 only (ESP-NN's kernels have
                               no dilation); scratch from ESP-NN's own size function, checked against what the
                               planner reserved (scratch_bytes: ESP-NN 1.2.3's S3 sizes) before each call
  fc (one row)                 esp_nn_fully_connected_per_ch_s8 (our folded bias with input offset 0, or the plain
                               bias with it: the same integers)
  add (same shapes)            esp_nn_add_elementwise_s8
  avgpool / maxpool / mean     esp_nn_avg_pool_s8 (TFLite's rounded average), esp_nn_max_pool_s8, esp_nn_mean_nhwc_s8
  softmax, lut, reshape, pad   ours (tables, no arithmetic ESP-NN would speed up, or no ESP-NN kernel)
Proof here: the host build with GX_USE_ESP_NN against ESP-NN's ANSI C (its reference implementation; the S3's
assembly versions cannot run here) equals our reference bit for bit (esp_nn_host_check; ESP-NN's source is
not on the package registries, so it runs where GRPO_EDGE_ESP_NN_SRC points at a checkout of espressif/esp-nn).
"""
import os
from pathlib import Path

import numpy as np

from .codegen import c_array

ENV_SRC = "GRPO_EDGE_ESP_NN_SRC"
COMPONENT = ("espressif/esp-nn", ">=1.2.3")        # the ESP-IDF component the S3 firmware depends on
MAX_U16 = 65535


def _guard(text) -> str:
    return "#ifdef GX_USE_ESP_NN\n%s#endif" % text


def _shift32(em, i, a):
    em.data.append(_guard(c_array("int32_t", "%s_s32_%d" % (em.p, i), np.asarray(a["shift"], np.int32))))
    return "%s_s32_%d" % (em.p, i)


def _dims(w, h, c, extra=1):
    return "{ .width = %d, .height = %d, .channels = %d, .extra = %d }" % (w, h, c, extra)


def conv_call(em, i, op, name, mult):
    """ESP-NN's conv / depthwise conv for op i, or None where ESP-NN does not compute it (dilation, groups)."""
    a, p = op.attrs, em.p
    if tuple(a["dilations"]) != (1, 1):
        return None
    oc, cg, kh, kw = a["weights"].shape
    if a["group"] != 1 and not mult:
        return None
    _, H, W, C = em.g.tensors[op.inputs[0]].shape
    _, OH, OW, OC = em.g.tensors[op.output].shape
    if max(H, W, C, OH, OW, OC) > MAX_U16:
        return None
    s32 = _shift32(em, i, a)
    act = "{ .min = %d, .max = %d }" % (a["activation_min"], a["activation_max"])
    common = (".in_offset = %d, .out_offset = %d, .stride = { .width = %d, .height = %d }, .padding = { .width = %d, "
              ".height = %d }, .dilation = { .width = 1, .height = 1 }, .activation = %s"
              % (a["input_offset"], a["output_offset"], a["strides"][1], a["strides"][0], a["pads"][1], a["pads"][0], act))
    kind = "depthwise_conv" if mult else "conv"
    params = ("static const dw_conv_params_t %s_nnp%d = { .ch_mult = %d, %s };" % (p, i, mult, common) if mult else
              "static const conv_params_t %s_nnp%d = { %s };" % (p, i, common))
    em.data.append(_guard(
        "static const data_dims_t %s_nnin%d = %s;\nstatic const data_dims_t %s_nnf%d = %s;\n"
        "static const data_dims_t %s_nnout%d = %s;\n%s\n"
        "static const quant_data_t %s_nnq%d = { (int32_t *)%s, (int32_t *)%s_m%d };\n"
        % (p, i, _dims(W, H, C), p, i, _dims(kw, kh, cg, oc), p, i, _dims(OW, OH, OC), params, p, i, s32, p, i)))
    reserved = int(a.get("esp_nn_scratch", 0))
    scratch = em.scratch(i) if "scratch%d" % i in em.plan.buffers else "0"
    args = "&%s_nnin%d, &%s_nnf%d, &%s_nnout%d, &%s_nnp%d" % (p, i, p, i, p, i, p, i)
    return ("if (esp_nn_get_%s_scratch_size(%s) > %d) return %d;  /* ESP-NN wants more scratch than planned */\n"
            "    esp_nn_set_%s_scratch_buf(%s);\n"
            "    esp_nn_%s_s8(&%s_nnin%d, %s, &%s_nnf%d, %s_w%d, %s_b%d, &%s_nnout%d, %s, &%s_nnp%d, &%s_nnq%d);"
            % (kind, args, reserved, i + 1, kind, scratch, kind, p, i, em.ptr(op.inputs[0]), p, i, p, i, p, i, p, i,
               em.ptr(op.output, const=False), p, i, p, i))


def fc_call(em, i, op, in_offset):
    a, p = op.attrs, em.p
    OUT, IN = a["weights"].shape
    if em.g.tensors[op.inputs[0]].size != IN or max(IN, OUT) > MAX_U16:
        return None
    s32 = _shift32(em, i, a)
    return ("esp_nn_fully_connected_per_ch_s8(%s, %d, %d, %s_w%d, 0, %s_b%d, %s, %d, %d, %s, %s_m%d, %d, %d);"
            % (em.ptr(op.inputs[0]), in_offset, IN, p, i, p, i, em.ptr(op.output, const=False), OUT,
               a["output_offset"], s32, p, i, a["activation_min"], a["activation_max"]))


def add_call(em, i, op):
    a = op.attrs
    g = em.g
    if a.get("constants") or a.get("subtract") or g.tensors[op.inputs[0]].size != g.tensors[op.inputs[1]].size:
        return None
    return ("esp_nn_add_elementwise_s8(%s, %s, %d, %d, %d, %d, %d, %d, %d, %s, %d, %d, %d, %d, %d, %d);"
            % (em.ptr(op.inputs[0]), em.ptr(op.inputs[1]), a["input1_offset"], a["input2_offset"],
               a["input1_multiplier"], a["input2_multiplier"], a["input1_shift"], a["input2_shift"], a["left_shift"],
               em.ptr(op.output, const=False), a["output_offset"], a["output_multiplier"], a["output_shift"],
               a["activation_min"], a["activation_max"], g.tensors[op.output].size))


def pool_call(em, i, op):
    a, g = op.attrs, em.g
    _, H, W, C = g.tensors[op.inputs[0]].shape
    out = g.tensors[op.output].shape
    OH, OW = out[1:3] if len(out) == 4 else (1, 1)
    x, y = em.ptr(op.inputs[0]), em.ptr(op.output, const=False)
    if op.kind == "avgpool" and a["mode"] == "mean":
        if tuple(a["kernel"]) != (H, W) or any(a["pads"]) or (a["activation_min"], a["activation_max"]) != (-128, 127):
            return None
        return ("esp_nn_mean_nhwc_s8(%s, %s, %d, %d, %d, %d, %d, %d, %d);"
                % (x, y, H, W, C, a["input_zero_point"], a["output_offset"], a["mean_multiplier"], a["mean_shift"]))
    if max(H, W, C, OH, OW) > MAX_U16:
        return None
    fn = "esp_nn_max_pool_s8" if op.kind == "maxpool" else "esp_nn_avg_pool_s8"
    return ("%s(%s, %d, %d, %s, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d);"
            % (fn, x, W, H, y, OW, OH, a["strides"][1], a["strides"][0], a["kernel"][1], a["kernel"][0],
               a["pads"][1], a["pads"][0], a["activation_min"], a["activation_max"], C))


# -- the scratch ESP-NN's S3 kernels ask for (ESP-NN 1.2.3, esp_nn_get_*_scratch_size_esp32s3), so the planner
#    reserves it inside the arena; the firmware checks ESP-NN's own figure before each call.

def conv_scratch_s3(H, W, C, KH, KW, OH, OW, OC, stride, pad) -> int:
    """Bytes of ESP-NN's S3 conv scratch for these shapes (its size rule, re-derived; checked at run time)."""
    align = 64
    if (KH, KW) == (1, 1) and pad == (0, 0) and stride == (1, 1):
        c8 = (C + 7) & ~7
        transpose = 0 if W * H < 8 else 2 * 8 * c8
        inp = W * H * c8 if C % 8 else 0
        return inp + c8 * OC + transpose + align
    row, window = KW * C, KW * KH * C
    if row < 16 and window >= 16:
        wa = (window + 15) & ~15
        return OC * 4 + 16 + OC * wa + 16 + wa + align
    c16 = (C + 15) & ~15
    inp = 0 if pad == (0, 0) else (W + 2 * pad[1]) * (H + 2 * pad[0]) * C
    filt = KW * KH * c16 * OC
    filt_align = ((row + 15) // 16) * 16 * KH * OC
    pr = max(0, OW * stride[1] + KW - 1 - W)
    pb = max(0, OH * stride[0] + KH - 1 - H)
    border = (W + pr) * (H + pb) * C if (pr or pb) else 0
    return inp + filt + filt_align + border + align + OC * 4


def dw_scratch_s3(H, W, C, KH, KW, OH, OW, mult, stride, pad) -> int:
    """Bytes of ESP-NN's S3 depthwise scratch for these shapes (its size rule, re-derived; checked at run time)."""
    filt = KW * KH * C * mult
    if mult == 1 and C % 8 == 0:
        if (KH, KW) == (3, 3):
            if C % 16 == 0:
                if pad != (0, 0):
                    pw, ph = 2 * pad[1], 2 * pad[0]
                else:
                    pw, ph = OW * stride[1] + KW - 1 - W, OH * stride[0] + KH - 1 - H
                if pw or ph:
                    full = (W + pw) * (H + ph) * C
                    return filt + (full if full <= 40 * 1024 else (W + pw) * KH * C) + 16
                return filt + 16
            if C >= 12:
                c16 = (C + 15) & ~15
                tpw = 2 * pad[1] + max(0, OW * stride[1] + 2 - W)
                tph = 2 * pad[0] + max(0, OH * stride[0] + 2 - H)
                return 9 * c16 + (W + tpw) * (H + tph) * c16 + OW * OH * c16 + 64
            return 2 * (filt + W * H * C) + 32
        s16 = 2 * (filt + W * H * C)
        return s16 + 32 if s16 <= 48 * 1024 else 2 * filt + 2 * W * KH * C + 32
    if mult == 1 and C > 3:
        c8 = (C + 7) & ~7

        def up(v):
            return (v + 15) & ~15
        inp_start = up(2 * KW * KH * c8)
        out_start = up(inp_start + 2 * W * H * c8)
        bias_start = up(out_start + OW * OH * c8)
        return bias_start + 3 * 4 * c8 + 16
    if mult % 4 == 0:
        return 2 * (filt + W * H * C) + 32
    return 32


def prepare(graph) -> None:
    """Mark the graph for ESP-NN and reserve each conv's ESP-NN scratch (attrs["esp_nn_scratch"]) before planning."""
    graph.esp_nn = True
    for op in graph.ops:
        a = op.attrs
        if op.kind != "conv" or a.get("layout") != "nhwc" or tuple(a["dilations"]) != (1, 1):
            continue
        oc, cg, kh, kw = a["weights"].shape
        _, H, W, C = graph.tensors[op.inputs[0]].shape
        _, OH, OW, OC = graph.tensors[op.output].shape
        stride, pad = tuple(a["strides"]), (a["pads"][0], a["pads"][1])
        if a["group"] == 1:
            a["esp_nn_scratch"] = conv_scratch_s3(H, W, C, kh, kw, OH, OW, OC, stride, pad)
        elif cg == 1:
            a["esp_nn_scratch"] = dw_scratch_s3(H, W, C, kh, kw, OH, OW, OC // C, stride, pad)


def source_dir():
    """A checkout of espressif/esp-nn ($GRPO_EDGE_ESP_NN_SRC), or None."""
    d = os.environ.get(ENV_SRC)
    if d and (Path(d) / "include" / "esp_nn.h").is_file():
        return Path(d)
    return None


def ansi_sources(src):
    """ESP-NN's portable C (its ANSI versions and the generic optimised ones it lists for every chip)."""
    return sorted(str(p) for p in (Path(src) / "src").rglob("*_ansi.c"))


def host_check(graph, gen, x_q, src) -> dict:
    """The generated C built with GX_USE_ESP_NN against ESP-NN's ANSI C at `src` (gcc, this host), run on x_q and
    compared with our reference: the ESP-NN calls' arguments, layouts and requantization, proven bit for bit."""
    import subprocess
    import tempfile
    from grpo_edge.errors import TargetError
    from . import reference as R
    from .cc import gcc
    from .simulate import build_host, run_host
    ref = R.run(graph, x_q).reshape(len(x_q), -1)
    inc = ["-I", str(Path(src) / "include"), "-I", str(Path(src) / "src" / "common")]
    with tempfile.TemporaryDirectory(prefix="espnn_") as d:
        objs = []
        for k, c in enumerate(ansi_sources(src)):
            o = str(Path(d) / ("espnn%d.o" % k))
            r = subprocess.run([gcc(), "-std=c99", "-O2", "-c", c, "-o", o] + inc, capture_output=True, text=True)
            if r.returncode != 0:
                raise TargetError("ESP-NN's %s does not compile here: %s" % (Path(c).name, r.stderr.strip()[:200]))
            objs.append(o)
        exe = build_host([gen], d, "O2", extra=["-DGX_USE_ESP_NN"] + inc + objs + ["-lm"])
        y = run_host(exe, [gen], [x_q])[0]
    calls = gen.source.count("#ifdef GX_USE_ESP_NN\n    esp_nn_") + gen.source.count("#ifdef GX_USE_ESP_NN\n    if (esp_nn_")
    return {"n_inputs": int(len(x_q)), "bit_exact": bool(np.array_equal(y, ref)),
            "max_lsb": int(np.abs(y.astype(np.int64) - ref).max()) if y.size else 0, "esp_nn_ops": calls,
            "esp_nn_version": _version(src), "how": "gcc -O2 -DGX_USE_ESP_NN, ESP-NN's ANSI C (%d files)" % len(objs)}


def _version(src):
    import re
    m = re.search(r'^version:\s*"?([^"\s]+)', (Path(src) / "idf_component.yml").read_text(), re.M) \
        if (Path(src) / "idf_component.yml").is_file() else None
    return m.group(1) if m else "?"
