"""Jetson target (TensorRT): deploy() and its parts.

    calib_cache   TensorRT calibration cache (text) writer/reader
    trt_ops       ONNX ops per TensorRT parser version (data) ; opcheck: the check
    quantize      calibration ranges, Q/DQ model, fake-quant model
    simulate      host numerics (onnxruntime fp16 / int8 simulation), comparisons
    estimate      latency / energy model
    scripts       build_engine.sh + README; build_engine.py / run_engine.py / tegrastats.py are shipped
                  unchanged from grpo_edge/runtime
    device        the TensorRT + CUDA path (build, check, time, power) -- untested here
"""
OPTIONS = ("precision", "trt_version", "calibration", "calib_samples", "calib_method", "cache_trt_version",
           "max_batch", "dims", "workspace_mb", "evaluate", "build")


def deploy(source, profile, out_dir, options=None):
    """See grpo_edge.targets.jetson.deploy.deploy."""
    from grpo_edge.targets.jetson.deploy import deploy as _deploy
    return _deploy(source, profile, out_dir, options)
