"""Estimated TensorRT latency and energy per inference on a Jetson GPU (no device here: a model).

    latency = host_overhead + kernels * per_kernel + max(2 * MACs / (peak * efficiency), weight_bytes / bandwidth)

- MACs: grpo_edge.export.onnx_utils.count_macs (MatMul/Gemm/Conv, shapes from a real onnxruntime run).
- kernels: ONNX nodes left after TensorRT's usual fusions (shape-only ops vanish; an activation or
  bias/scale op right after Conv/Gemm/MatMul fuses into it) -- a heuristic count.
- peak: from the device profile's data-sheet figure, per precision (below); efficiency, host overhead
  and per-kernel cost are our assumptions (tiny batch-1 models are launch-bound, not FLOP-bound).
- energy = latency * active_power_w (the profile's power-mode budget: an upper bound).
Replace all of it by run_engine.py's measured numbers on the device.
"""
from grpo_edge.errors import TargetError

# Our assumptions, per device; each with its reasoning. Peaks are derived from the profile's figures.
GPU_MODEL = {
    "jetson-nano": {
        "host_overhead_s": 1.5e-4, "per_kernel_s": 1.0e-5, "efficiency": 0.3, "bandwidth_Bps": 25.6e9,
        "why": "assumed: ~150 us per enqueue+copies+sync and ~10 us per kernel on the Cortex-A57 host (CUDA "
               "launches cost ~5 us on desktop CPUs), 30% of peak for small GEMMs; 25.6 GB/s LPDDR4 (data sheet)",
    },
    "jetson-orin-nano": {
        "host_overhead_s": 6.0e-5, "per_kernel_s": 5.0e-6, "efficiency": 0.3, "bandwidth_Bps": 68e9,
        "why": "assumed: ~60 us per enqueue+copies+sync and ~5 us per kernel on the Cortex-A78AE host, 30% of "
               "peak for small GEMMs; 68 GB/s LPDDR5 (data sheet, 15 W mode)",
    },
}

_SHAPE_OPS = {"Shape", "Constant", "ConstantOfShape", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity",
              "Dropout", "Cast", "Gather", "Slice", "Concat", "Range", "QuantizeLinear", "DequantizeLinear"}
_FUSABLE = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Add", "Mul", "BatchNormalization", "Elu", "Softplus"}


def peak_ops(profile: dict, precision: str):
    """(peak multiply-add ops per second counted as 2 ops, source) for `precision` on the profile's GPU."""
    from grpo_edge.targets.profiles import figure, figure_source
    name = profile["name"]
    if name == "jetson-nano":
        fp16 = float(figure(profile, "gpu_fp16_flops"))
        src = figure_source(profile, "gpu_fp16_flops")
        if precision == "fp32":
            return fp16 / 2, "FP16 peak / 2 (Maxwell: FP16 is 2x FP32) [%s]" % src
        # Maxwell (sm_53) has no DP4A/int8 tensor cores: TensorRT runs int8-requested layers in fp16/fp32.
        return fp16, ("FP16 peak (int8 has no fast path on Maxwell; fp16 rate assumed) [%s]" % src
                      if precision == "int8" else "[%s]" % src)
    if name == "jetson-orin-nano":
        int8_sparse = float(figure(profile, "gpu_int8_ops"))
        src = figure_source(profile, "gpu_int8_ops")
        if precision == "int8":
            return int8_sparse / 2, "dense INT8 = sparse TOPS / 2 [%s]" % src
        if precision == "fp16":
            return int8_sparse / 4, "dense FP16 tensor-core = sparse INT8 TOPS / 4 (Ampere ratios) [%s]" % src
        return 1024 * 2 * 625e6, ("FP32 CUDA cores: 1024 cores x 2 x 625 MHz (Orin Nano 8GB data sheet GPU "
                                  "max frequency, 15 W mode)")
    raise TargetError("no Jetson GPU model for profile %r (have %s)" % (name, ", ".join(GPU_MODEL)))


def kernel_count(model) -> int:
    """Kernels TensorRT is likely to launch for `model` after fusing (heuristic, see module doc)."""
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    count = 0
    for n in model.graph.node:
        if n.op_type in _SHAPE_OPS:
            continue
        if n.op_type in _FUSABLE and n.input and producers.get(n.input[0]) in ("Conv", "Gemm", "MatMul",
                                                                               "ConvTranspose"):
            continue
        count += 1
    return max(count, 1)


def weight_bytes(model, precision: str) -> int:
    import numpy as np
    n = sum(int(np.prod(i.dims)) for i in model.graph.initializer if i.data_type in (1, 10, 3))
    return n * {"fp32": 4, "fp16": 2, "int8": 1}[precision]


def estimate(model, profile: dict, precision: str, macs: int) -> dict:
    """{'latency_s', 'latency_source', 'energy_j', 'energy_source', 'parts'} for one batch-1 inference."""
    from grpo_edge.targets.profiles import estimate_energy, figure_source
    g = GPU_MODEL.get(profile["name"])
    if g is None:
        raise TargetError("no Jetson GPU model for profile %r (have %s)" % (profile["name"], ", ".join(GPU_MODEL)))
    peak, peak_src = peak_ops(profile, precision)
    kernels = kernel_count(model)
    wb = weight_bytes(model, precision)
    compute_s = 2.0 * macs / (peak * g["efficiency"])
    memory_s = wb / g["bandwidth_Bps"]
    latency = g["host_overhead_s"] + kernels * g["per_kernel_s"] + max(compute_s, memory_s)
    src = ("%s %s: %.3g s host + %d kernels x %.3g s + max(2 x %d MACs / (%.3g op/s x %.2f), %d B / %.3g B/s); "
           "peak: %s; %s" % (profile["name"], precision, g["host_overhead_s"], kernels, g["per_kernel_s"], macs,
                             peak, g["efficiency"], wb, g["bandwidth_Bps"], peak_src, g["why"]))
    e = estimate_energy(profile, latency, "the latency estimate above")
    e_src = "%s; power figure: %s" % (e["source"], figure_source(profile, "active_power_w"))
    return {"latency_s": latency, "latency_source": src, "energy_j": e["value"], "energy_source": e_src,
            "parts": {"host_s": g["host_overhead_s"], "kernels": kernels, "kernel_s": kernels * g["per_kernel_s"],
                      "compute_s": compute_s, "memory_s": memory_s, "macs": int(macs), "weight_bytes": wb}}
