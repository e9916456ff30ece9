"""The path that needs TensorRT and a CUDA GPU: build the engines here, check, time, sample power.

Runs only when `import tensorrt` works and torch sees a CUDA device (a Jetson, or any NVIDIA machine);
it calls the same build_engine.py / run_engine.py functions the user runs on the board.
NOT EXERCISED BY THE TEST SUITE: TensorRT cannot be installed on the machines the tests run on.
"""
import json
from pathlib import Path


def tensorrt_ready() -> bool:
    try:
        import tensorrt  # noqa: F401
        import torch
        return bool(torch.cuda.is_available())
    except Exception:  # ImportError, or a broken CUDA install
        return False


def on_jetson() -> bool:
    return Path("/etc/nv_tegra_release").exists() or Path("/sys/module/tegra_fuse").exists()


def build_and_measure(out_dir, cfg: dict):
    """None when TensorRT/CUDA are absent; else {'rows': [...], 'figures': {key: (value, unit, how, source)}}."""
    if not tensorrt_ready():
        return None
    import numpy as np
    from grpo_edge.runtime import build_engine, run_engine
    out = Path(out_dir)
    how = "measured-device" if on_jetson() else "measured-host"
    rows, figures = [], {}
    for g in cfg["graphs"]:
        path, secs = build_engine.build(g, cfg["precision"], cfg["workspace_mb"], str(out))
        engine = run_engine.Engine(path)
        sample = np.load(str(out / g["sample"]))
        errors, _ = run_engine.check(engine, sample)
        feed = {k[6:]: sample[k] for k in sample.files if k.startswith("bench:")}
        bench = run_engine.benchmark(engine, feed, 500, tegrastats=on_jetson())
        rows.append({"graph": g["name"], "engine": Path(path).name, "build_s": secs,
                     "max_abs_err_vs_fp32": max(errors.values()) if errors else None, **bench})
        (out / ("results.%s.%s.json" % (g["name"], cfg["precision"]))).write_text(json.dumps(rows[-1], indent=2))
        key = "" if len(cfg["graphs"]) == 1 else "." + g["name"]
        src = "run_engine.benchmark: median of %d runs (enqueue + sync, batch 1)" % bench["iters"]
        figures["latency_trt%s" % key] = (bench["median_s"] * 1e3, "ms", how, src)
        if bench.get("energy_j") is not None:
            figures["energy_trt%s" % key] = (bench["energy_j"] * 1e3, "mJ", how,
                                             "mean %s over %d tegrastats samples x median latency (board power)"
                                             % (bench["power_rail"], bench["power_samples"]))
    return {"rows": rows, "figures": figures}
