"""Estimated TensorRT latency and energy per inference on a Jetson GPU (no device here: a model).

    latency = host_overhead + kernels * per_kernel + max(2 * MACs / (peak * efficiency), weight_bytes / bandwidth)

- MACs: grpo_edge.export.onnx_utils.count_macs (MatMul/Gemm/Conv, shapes from a real onnxruntime run).
- kernels: ONNX nodes left after TensorRT's usual fusions (shape-only ops vanish; an activation or
  bias/scale op right after Conv/Gemm/MatMul fuses into it) -- a heuristic count.
- peak: the profile figure gpu_<precision>_ops_per_s (from the data sheet); efficiency, host overhead
  and per-kernel cost are our assumptions (tiny batch-1 models are launch-bound, not FLOP-bound).
- energy = latency * active_power_w (the profile's power-mode budget: an upper bound).
Replace all of it by run_engine.py's measured numbers on the device.
"""
from grpo_edge.errors import TargetError

# The GPU model reads these profile figures (targets/<name>.yaml): a new Jetson profile needs data, not code.
GPU_FIGURES = ("gpu_host_overhead_s", "gpu_kernel_s", "gpu_efficiency", "memory_bandwidth_Bps")

_SHAPE_OPS = {"Shape", "Constant", "ConstantOfShape", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity",
              "Dropout", "Cast", "Gather", "Slice", "Concat", "Range", "QuantizeLinear", "DequantizeLinear"}
_FUSABLE = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Add", "Mul", "BatchNormalization", "Elu", "Softplus"}


def peak_ops(profile: dict, precision: str):
    """(peak multiply-add ops per second counted as 2 ops, source) for `precision` on the profile's GPU:
    the profile figure gpu_<precision>_ops_per_s."""
    from grpo_edge.targets.profiles import figure_source
    key = "gpu_%s_ops_per_s" % precision
    return _figure(profile, key), "[%s]" % figure_source(profile, key)


def _figure(profile, key) -> float:
    from grpo_edge.targets.profiles import figure
    v = figure(profile, key)
    if v is None:
        raise TargetError("no Jetson GPU model for profile %r: it has no figure %s (see targets/jetson-nano.yaml)"
                          % (profile.get("name"), key))
    return float(v)


def gpu_model(profile: dict) -> dict:
    """{host_overhead_s, per_kernel_s, efficiency, bandwidth_Bps, why} from the profile's figures."""
    from grpo_edge.targets.profiles import figure_source
    vals = [_figure(profile, k) for k in GPU_FIGURES]
    why = "; ".join(figure_source(profile, k) for k in GPU_FIGURES)
    return dict(zip(("host_overhead_s", "per_kernel_s", "efficiency", "bandwidth_Bps"), vals), why=why)


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
    g = gpu_model(profile)
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
