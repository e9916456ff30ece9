"""The front half of `deploy --target esp32*` for a checkpoint: export, calibrate, quantize to int8 QDQ.

checkpoint --torch2onnx--> OUT/model.onnx --onnx2int8 (calibration from the task)--> OUT/model.int8.onnx
The ESP32 generator (grpo_edge.targets.esp32) then takes the int8 model; the fp32 model and the states
the fp32 policy visits in an evaluation are passed along so the report can state decision agreement.
"""
from pathlib import Path

import numpy as np

EVAL_SEED = 4242          # evaluation states come from another seed than the calibration set


def prepare_int8(source: Path, out_dir: Path, options: dict, from_checkpoint: bool):
    """Returns (int8 onnx path, esp32 options). A plain ONNX source must already be int8 QDQ."""
    options = dict(options)
    calib = options.pop("calibration", None)
    n_calib = int(options.pop("calibration_samples", 512))
    method = options.pop("method", "minmax")
    if not from_checkpoint:
        return source, options
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.export.calibration import checkpoint2calibration, task_from_state, task_inputs
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.torch2onnx import torch2onnx

    out_dir.mkdir(parents=True, exist_ok=True)
    model, state = load_policy(source)
    fp32 = out_dir / "model.onnx"
    torch2onnx(model, fp32)
    if calib is None:
        calib = out_dir / "calibration.npz"
        checkpoint2calibration(source, calib, n=n_calib)
    int8 = out_dir / "model.int8.onnx"
    onnx2int8(fp32, calib, int8, method=method)
    options.setdefault("fp32_onnx", str(fp32))
    options.setdefault("prefix", str(state.get("task", "model")).replace("-", "_"))
    if options.get("eval_inputs") is None:
        task = task_from_state(state, seed=EVAL_SEED)
        options["eval_inputs"] = np.asarray(task_inputs(task, 1000, policy=model), dtype=np.float32)
    return int8, options
