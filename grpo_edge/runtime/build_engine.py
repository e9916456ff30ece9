#!/usr/bin/env python3
"""Build TensorRT engines from this folder's ONNX files with the TensorRT Python API.

    python3 build_engine.py                      # every graph in deploy.json, at its precision
    python3 build_engine.py --precision fp16 --workspace-mb 256

For machines without trtexec (build_engine.sh is the trtexec route). Written for both TensorRT APIs
the Jetsons ship: 8.2 (JetPack 4.6, Jetson Nano) and 10.x (JetPack 6, Orin); runs on Python 3.6+.
- int8 on TensorRT < 10: the fp32 ONNX + the calibration cache, read back by a calibrator whose class
  matches the cache header (IInt8EntropyCalibrator2 for "EntropyCalibration2"); no calibration runs.
- int8 on TensorRT >= 10: the Q/DQ ONNX (explicit quantization; calibrators are deprecated since 10.1).
grpo_edge/runtime/build_engine.py, copied unchanged by `grpo-edge deploy`; no grpo_edge import.
THIS FILE IS NOT TESTED AGAINST TENSORRT where it was written (TensorRT cannot be installed there).
"""
import argparse
import json
import os
import sys
import time


def trt_major(trt):
    return int(trt.__version__.split(".")[0])


def make_calibrator(trt, cache_path):
    """A calibrator that only hands TensorRT the cache file (get_batch returns None: if TensorRT rejects
    the cache -- other version or algorithm in its header -- the build fails instead of calibrating)."""
    with open(cache_path, "rb") as f:
        cache = f.read()
    header = cache.split(b"\n", 1)[0].decode("ascii", "replace")
    algo = header.rsplit("-", 1)[-1]
    base = {"EntropyCalibration2": trt.IInt8EntropyCalibrator2,
            "EntropyCalibration": trt.IInt8EntropyCalibrator,
            "MinMaxCalibration": trt.IInt8MinMaxCalibrator}.get(algo)
    if base is None:
        raise SystemExit("%s: unsupported calibration algorithm in header %r" % (cache_path, header))
    print("calibration cache %s: %s (TensorRT %s in use)" % (cache_path, header, trt.__version__))

    class CacheCalibrator(base):
        def __init__(self):
            base.__init__(self)

        def get_batch_size(self):
            return 1

        def get_batch(self, names):
            return None

        def read_calibration_cache(self):
            return cache

        def write_calibration_cache(self, data):
            return None

    return CacheCalibrator()


def build(graph, precision, workspace_mb=256, folder=".", verbose=False):
    """Build one engine; returns (engine path, seconds). `graph` is one entry of deploy.json's graphs."""
    import tensorrt as trt
    logger = trt.Logger(trt.Logger.VERBOSE if verbose else trt.Logger.WARNING)
    major = trt_major(trt)
    use_qdq = precision == "int8" and major >= 10
    onnx_path = os.path.join(folder, graph["onnx_qdq"] if use_qdq else graph["onnx"])
    builder = trt.Builder(logger)
    flags = 0
    if major < 10:   # explicit batch is the only mode in 10.x; 8.x needs the flag for ONNX
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    with open(onnx_path, "rb") as f:
        if not parser.parse(f.read()):
            errs = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise SystemExit("TensorRT %s cannot parse %s: %s" % (trt.__version__, onnx_path, "; ".join(errs)))
    config = builder.create_builder_config()
    if hasattr(config, "set_memory_pool_limit"):          # TensorRT >= 8.4
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mb << 20)
    else:                                                  # TensorRT 8.2
        config.max_workspace_size = workspace_mb << 20
    profile = builder.create_optimization_profile()
    for inp in graph["inputs"]:
        profile.set_shape(inp["name"], inp["min"], inp["opt"], inp["max"])
    config.add_optimization_profile(profile)
    if precision in ("fp16", "int8"):
        if not getattr(builder, "platform_has_fast_fp16", True):
            print("warning: this GPU has no fast fp16")
        config.set_flag(trt.BuilderFlag.FP16)   # also the fallback for layers without an int8 kernel
    if precision == "int8":
        if not getattr(builder, "platform_has_fast_int8", True):
            print("warning: this GPU has no fast int8 (Jetson Nano / Maxwell): expect fp16 speed at best")
        config.set_flag(trt.BuilderFlag.INT8)
        if not use_qdq:
            config.int8_calibrator = make_calibrator(trt, os.path.join(folder, graph["calib_cache"]))
            if hasattr(config, "set_calibration_profile"):
                config.set_calibration_profile(profile)
    t0 = time.time()
    if hasattr(builder, "build_serialized_network"):      # TensorRT >= 8.0
        plan = builder.build_serialized_network(network, config)
    else:
        engine = builder.build_engine(network, config)
        plan = engine.serialize() if engine is not None else None
    if plan is None:
        raise SystemExit("TensorRT %s failed to build %s (run with --verbose)" % (trt.__version__, onnx_path))
    out = os.path.join(folder, graph["engine"].replace("{precision}", precision))
    with open(out, "wb") as f:
        f.write(bytes(plan))
    return out, time.time() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="deploy.json")
    ap.add_argument("--precision", choices=["fp32", "fp16", "int8"], default=None)
    ap.add_argument("--workspace-mb", type=int, default=None)
    ap.add_argument("--graph", default=None, help="build only this graph")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(a.config))
    with open(a.config) as f:
        cfg = json.load(f)
    precision = a.precision or cfg["precision"]
    import tensorrt as trt
    expected = cfg.get("trt_version", "")
    if expected and trt.__version__.split(".")[:2] != expected.split(".")[:2]:
        print("note: files were prepared for TensorRT %s, this is %s" % (expected, trt.__version__))
    for g in cfg["graphs"]:
        if a.graph and g["name"] != a.graph:
            continue
        path, secs = build(g, precision, a.workspace_mb or cfg.get("workspace_mb", 256), folder, a.verbose)
        print("built %s in %.1f s" % (path, secs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
