"""ESTIMATE, per op: the model on an ESP32-S3 as our plain C, as TFLite Micro's reference kernels, and as TFLite
Micro with ESP-NN (the S3's SIMD kernels, what a user's esp-tflite-micro runs). No S3 is attached and its SIMD
cannot run here, so every figure below is an estimate, built only from what is measured here and published:

  ours, plain C    our rv32imc instructions of the op (exact, unicorn) x Xtensa/rv32 1.17 (the profile's
                   xtensa_instr_per_rv32_instr: one FC measured with GCC for the ESP32 core) x CPI 1.2 (assumed)
  TFLM reference   TFLM's host (x86-64 callgrind) instructions of the op, taken one for one as rv32 instructions
                   (assumed: our own C measures 0.87 rv32 per x86-64 instruction NCHW and 2.0 NHWC, where gcc
                   vectorises the x86 build, so this figure is uncertain by up to 2x either way); then as above
  TFLM + ESP-NN    TFLM reference / (ANSI_OVER_REFERENCE x ESP-NN's S3 speed-up of the op's kind over its own
                   ANSI C), the interpreter's own instructions (Invoke's entry) unchanged
  ours with ESP-NN the S3 firmware (esp_nn_adapters.py): the ops it hands to ESP-NN cost what they cost TFLM +
                   ESP-NN (the same kernels), the rest our plain C, and no interpreter

ESP-NN's S3 speed-ups over its ANSI C (espressif/esp-nn README): 1x1 conv about 10x, other conv 3.3x (the low
end of its 3.3-10x), depthwise 4.6-6.2x (5.4), fully connected 2.8x; add, pools and softmax are taken as 1x
(no figure published; ESP-NN's ANSI factor only); ops without an ESP-NN kernel in esp-tflite-micro (tables,
reshapes, pads, transposes, and dilated convs: ESP-NN has no dilation) run TFLM's reference kernels, 1x.
ESP-NN's ANSI C is about 2x TFLM's reference kernels (esp-nn issue 1, plain ESP32). The 16x8 kinds (conv16, fc16,
...) fall in the last group: ESP-NN's kernels are int8 (s8), so TFLM is taken to run its int16 reference kernels
(assumed from ESP-NN's function list, not read in esp-tflite-micro's source here).
Check against the one end-to-end figure published: esp-tflite-micro's person detection (MobileNetV1 0.25,
96x96) runs 2300 ms with TFLM's reference kernels and 54 ms with ESP-NN on an S3, 42.6x; the model's factor
for the MobileNet row of docs/results.md is printed beside it (`anchor_check`), so the reader sees how far off
the model is.
"""
CPI = 1.2
RV32_PER_X86 = 1.0            # TFLM's host instructions read as rv32 instructions (assumed; see above)
XTENSA_PER_RV32 = 1.17
ANSI_OVER_REFERENCE = 2.0
SIMD_OVER_ANSI = {"conv1x1": 10.0, "conv": 3.3, "depthwise": 5.4, "fc": 2.8}
SOURCES = ("espressif/esp-nn README (S3 speed-ups over its ANSI C: 1x1 conv ~10x, conv 3.3-10x, depthwise "
           "4.6-6.2x, fully connected 2.8x); esp-nn issue 1 (ANSI C ~2x TFLM reference kernels); targets/esp32s3.yaml "
           "(240 MHz, Xtensa/rv32 1.17); CPI 1.2 assumed")
PERSON_DETECTION = {"tflm_reference_ms": 2300.0, "esp_nn_ms": 54.0,
                    "source": "esp-tflite-micro README, person detection invoke() on an ESP32-S3"}


ESP_NN_ELEMENTWISE = ("add", "mul", "avgpool", "maxpool", "softmax")   # ESP-NN kernels with no S3 figure


def op_class(kind, attrs) -> str:
    """Which speed-up TFLM + ESP-NN gets on the op: conv1x1, conv, depthwise, fc, esp_nn (ESP-NN's ANSI factor
    only) or reference (1x: no ESP-NN kernel; a dilated conv too, ESP-NN's kernels having no dilation)."""
    if kind == "conv":
        if tuple(attrs.get("dilations", (1, 1))) != (1, 1):
            return "reference"
        oc, cg, kh, kw = attrs["weights"].shape
        if attrs["group"] > 1:
            return "depthwise" if cg == 1 else "reference"
        return "conv1x1" if (kh, kw) == (1, 1) else "conv"
    if kind == "fc":
        return "fc"
    return "esp_nn" if kind in ESP_NN_ELEMENTWISE else "reference"


def estimate(graph, per_op, totals, clock_hz=240e6, esp_nn_ops=()) -> dict:
    """Per op and for the model: S3 microseconds of ours, TFLM reference and TFLM + ESP-NN (ESTIMATES), from the
    deploy's per-op profile with its host columns (profile.add_host_columns). None when those are missing."""
    if totals.get("tflm_host_instructions_ops") is None:
        return None
    to_rv32 = RV32_PER_X86
    us = XTENSA_PER_RV32 * CPI / clock_hz * 1e6           # microseconds per rv32-equivalent instruction
    rows, sums = [], {"ours_us": 0.0, "ours_esp_nn_us": 0.0, "tflm_reference_us": 0.0, "tflm_esp_nn_us": 0.0}
    esp_nn_ops = set(esp_nn_ops)
    for r in per_op:
        op = graph.ops[r["op"]]
        cls = op_class(op.kind, op.attrs)
        speedup = 1.0 if cls == "reference" else ANSI_OVER_REFERENCE * SIMD_OVER_ANSI.get(cls, 1.0)
        ours = (r.get("rv32_instructions") or 0) * us
        ref = (r.get("tflm_host_instructions") or 0) * to_rv32 * us
        row = {"op": r["op"], "kind": op.kind, "class": cls, "ours_us": ours, "tflm_reference_us": ref,
               "tflm_esp_nn_us": ref / speedup, "esp_nn_speedup": speedup, "esp_nn_in_ours": r["op"] in esp_nn_ops}
        row["ours_esp_nn_us"] = row["tflm_esp_nn_us"] if row["esp_nn_in_ours"] else ours
        rows.append(row)
        for k in sums:
            sums[k] += row[k]
    entry = (totals.get("tflm_host_instructions_entry") or 0) * to_rv32 * us
    sums["tflm_reference_us"] += entry
    sums["tflm_esp_nn_us"] += entry
    sums["ours_over_esp_nn"] = sums["ours_us"] / sums["tflm_esp_nn_us"] if sums["tflm_esp_nn_us"] else None
    sums["ours_esp_nn_over_esp_nn"] = sums["ours_esp_nn_us"] / sums["tflm_esp_nn_us"] if sums["tflm_esp_nn_us"] else None
    sums["esp_nn_over_reference"] = sums["tflm_reference_us"] / sums["tflm_esp_nn_us"] if sums["tflm_esp_nn_us"] else None
    return {"label": "ESTIMATE (no ESP32-S3 here)", "ops": rows, "model": sums, "sources": SOURCES,
            "how": __doc__.split("\n\n")[1].strip()}


def anchor_check(model_speedup) -> str:
    a = PERSON_DETECTION
    return ("the model gives TFLM + ESP-NN %.1fx over TFLM's reference kernels here; %s: %.0f -> %.0f ms, %.1fx"
            % (model_speedup, a["source"], a["tflm_reference_ms"], a["esp_nn_ms"], a["tflm_reference_ms"] / a["esp_nn_ms"]))
