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
from grpo_edge.targets.jetson.deploy import OPTIONS, deploy  # noqa: F401
