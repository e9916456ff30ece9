"""One device model per target: `grpo-edge deploy` and `grpo-edge bench` take their device estimates from
here, so the same model on the same device gets the same figure in both, and each says what code it
assumes and where its figures come from (targets/<name>.yaml).

    est = format_estimate(profile, "onnx int8", macs, rv32_instructions=24490)
    # {"latency_s", "energy_j", "code", "source"}, or None when the format does not run there

- ESP32 family. What deploy ships is the generated int8 C, plain C (no ESP-NN): its rv32imc instruction
  count x CPI / clock (esp32_c_latency; the Xtensa chips are assumed to need as many instructions). A
  TFLite int8 model would run in TFLite Micro, which uses ESP-NN's kernels on the S3: MACs x the profile's
  int8 cycles per MAC (which includes ESP-NN's published speed-up) / clock. A float model: TFLite Micro's
  float kernels, MACs x fp32 cycles per MAC.
- Jetson family. The ONNX formats are what deploy builds TensorRT engines from: the GPU model of
  jetson/estimate.py, at fp16 for fp32 ONNX (deploy's default precision) and int8 for the int8 one. A
  TFLite file would run on the CPU: one Cortex core with onnxruntime / LiteRT, MACs / the profile's rate.
- Raspberry Pi. onnxruntime (or LiteRT) on one core: MACs / the profile's rate + the call overhead.
Every figure here is an ESTIMATE: no such device is attached.
"""
from grpo_edge.targets.profiles import estimate_energy, estimate_latency, figure, figure_source

def esp32_c_latency(name, clock_hz, clock_source, rv32_instructions) -> dict:
    """The generated int8 C on the ESP32 chip `name` at clock_hz: {"value": seconds, "source"}."""
    from grpo_edge.targets.esp32.rv32 import CPI_RV32 as cpi
    value = float(rv32_instructions) * cpi / float(clock_hz)
    src = ("the generated C (int8 weights), plain C with no ESP-NN: %d rv32imc instructions x CPI %.1f (assumed) / %s clock %.0f MHz"
           % (int(rv32_instructions), cpi, name, float(clock_hz) / 1e6))
    if name != "esp32c3":
        src += "; Xtensa assumed to need the same instruction count as rv32imc (no Xtensa compiler here)"
    return {"value": value, "source": src + " [%s]" % clock_source}


def format_estimate(profile, fmt, macs, calls=None, rv32_instructions=None, onnx_model=None):
    """The device estimate of one bench format ('onnx fp32', 'onnx int8', 'tflite fp32', 'tflite int8'):
    {"latency_s", "energy_j", "code", "source"}, or None (torch does not run on these devices; the ESP32's
    int8 C needs its rv32 count). calls: a text model's MACs per model call (a completion sums them)."""
    if fmt == "torch" or not macs:
        return None
    family, dtype = profile.get("family"), ("int8" if "int8" in fmt else "fp32")
    if family == "esp32":
        if fmt == "onnx int8":
            if not rv32_instructions:
                return None
            if not figure(profile, "clock_hz"):
                return None
            lat = esp32_c_latency(profile["name"], figure(profile, "clock_hz"), figure_source(profile, "clock_hz"),
                                  rv32_instructions)
            return _with_energy(profile, lat["value"], "the generated C (plain C, no ESP-NN)", lat["source"])
        code = ("TFLite Micro int8 kernels (ESP-NN where the chip has it: the profile's cycles per MAC)"
                if dtype == "int8" else "TFLite Micro float kernels")
        return _macs_model(profile, macs, calls, dtype, code)
    if family == "jetson" and fmt.startswith("onnx") and onnx_model is not None and not calls:
        from grpo_edge.targets.jetson.estimate import estimate
        precision = "int8" if dtype == "int8" else "fp16"
        e = estimate(onnx_model, profile, precision, macs)
        return {"latency_s": e["latency_s"], "energy_j": e["energy_j"],
                "code": "TensorRT %s engine on the GPU (what deploy builds)" % precision, "source": e["latency_source"]}
    code = {"jetson": "onnxruntime / LiteRT on one CPU core (not TensorRT)",
            "rpi": "onnxruntime / LiteRT on one core"}.get(family, "the profile's MAC rate")
    return _macs_model(profile, macs, calls, dtype, code)


def _macs_model(profile, macs, calls, dtype, code):
    parts = [estimate_latency(profile, c, dtype) for c in (calls or [macs])]
    lat = sum(p["value"] for p in parts)
    src = parts[0]["source"] + (" (x %d model calls per completion)" % len(parts) if calls else "")
    return _with_energy(profile, lat, code, src)


def _with_energy(profile, latency, code, source):
    e = estimate_energy(profile, latency)
    return {"latency_s": latency, "energy_j": e["value"], "code": code, "source": source}
