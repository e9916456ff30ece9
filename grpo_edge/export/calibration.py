"""Calibration sets for int8 quantization: representative model inputs, saved as .npz.

    info = checkpoint2calibration("runs/cartpole/best.pt", "calib.npz", n=512)
    info = task2calibration("cartpole", "calibration/cartpole.npz", n=512)     # no checkpoint needed

An .npz holds one float32 (or int64) array per model input, named like the ONNX input ("obs", ...),
plus `__meta__`: a JSON string saying how the set was made (task, seed, n, policy or random actions).
onnx2int8 reads these files directly.
"""
import io
import json
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError
from grpo_edge.report import atomic_write_bytes
from grpo_edge.tasks import task_from_state

DEFAULT_N = 512


def task_inputs(task, n: int, policy=None) -> np.ndarray:
    """task.calibration_inputs(n), passing the policy when the task accepts one (states it visits)."""
    try:
        x = task.calibration_inputs(n, policy=policy) if policy is not None else task.calibration_inputs(n)
    except TypeError:  # a user task whose calibration_inputs takes only n
        x = task.calibration_inputs(n)
    if isinstance(x, dict):
        return {k: np.asarray(v) for k, v in x.items()}
    return np.asarray(x)


def save_calibration(arrays, out_path, meta: dict) -> Path:
    """Write {input name: array} (or one array under "inputs") and a JSON meta string to `out_path` (.npz)."""
    if isinstance(arrays, np.ndarray):
        arrays = {"inputs": arrays}
    out_path = Path(out_path)
    if out_path.suffix != ".npz":
        raise ExportError("calibration sets are .npz files, got %s" % out_path)
    buf = io.BytesIO()
    np.savez_compressed(buf, __meta__=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    atomic_write_bytes(out_path, buf.getvalue())
    return out_path


def open_calibration(path):
    """np.load of a .npy / .npz calibration file (no pickles), with one-line errors naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ExportError("calibration file not found: %s" % path)
    try:
        return np.load(str(path), allow_pickle=False)
    except Exception as e:
        raise ExportError("%s is not a .npy/.npz calibration file (%s)" % (path, str(e).splitlines()[0][:200]))


def load_calibration(path) -> dict:
    """{input name: array} from an .npz written by save_calibration (or a plain .npy: {"inputs": array})."""
    loaded = open_calibration(path)
    if isinstance(loaded, np.ndarray):
        arrays = {"inputs": loaded}
    else:
        arrays = {k: loaded[k] for k in loaded.files if not k.startswith("__")}
    for name, a in arrays.items():
        if a.ndim == 0 or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise ExportError("calibration file %s: array %r is %s of %s, not samples along a first axis (N, ...) "
                              "of numbers" % (path, name, "a single value" if a.ndim == 0 else "shape %s"
                                              % (tuple(a.shape),), a.dtype))
    return arrays


def calibration_meta(path) -> dict:
    loaded = np.load(str(path), allow_pickle=False)
    if isinstance(loaded, np.ndarray) or "__meta__" not in loaded.files:
        return {}
    return json.loads(str(loaded["__meta__"]))


def task2calibration(task_name: str, out_path, n: int = DEFAULT_N, seed: int = 0, task_cfg: dict = None,
                     input_name: str = "inputs") -> dict:
    """A calibration set from a task alone (random actions for control tasks, training samples else)."""
    from grpo_edge.tasks import get_task
    task = get_task(task_name, task_cfg or {}, seed=seed)
    x = task_inputs(task, n)
    arrays = x if isinstance(x, dict) else {input_name: x}
    meta = {"task": task_name, "n": int(n), "seed": int(seed), "policy": "none (random actions / dataset samples)",
            "method": "%s.calibration_inputs(%d)" % (type(task).__name__, n)}
    save_calibration(arrays, out_path, meta)
    return dict(meta, path=str(out_path), shapes={k: list(v.shape) for k, v in arrays.items()})


def checkpoint2calibration(checkpoint, out_path, n: int = DEFAULT_N, seed: int = 0, use_policy: bool = True) -> dict:
    """A calibration set for a checkpoint's model: its task's calibration_inputs(n), driven by the policy.

    Arrays are named after the model's export inputs, so onnx2int8 matches them by name. Text models
    (micro-gpt, tiny-transformer) get feed sets recorded from greedy decoding instead, one .npz per
    runtime function (grpo_edge.export.decode_calibration: out_path, or out_path's stem + .encoder.npz /
    .decoder_step.npz). Other multi-input runtime functions raise an ExportError.
    """
    from grpo_edge.core.checkpoint import load_policy
    model, state = load_policy(checkpoint)
    spec = model.export_spec(batch_size=1)
    if state["arch"] in ("micro-gpt", "tiny-transformer"):
        from grpo_edge.export.decode_calibration import checkpoint2decode_calibration
        info = checkpoint2decode_calibration(checkpoint, out_path, n=n, seed=seed)
        return dict(info, shapes={k: v["shapes"] for k, v in info["files"].items()})
    if isinstance(spec, dict) or len(spec.input_names) != 1:
        raise ExportError("%s: %s has a multi-input runtime function; pass an .npz with one array per input"
                          % (checkpoint, state["arch"]))
    task = task_from_state(state, seed=seed)
    from grpo_edge.core.checkpoint import check_fits_task
    check_fits_task(model, task, checkpoint)
    x = task_inputs(task, n, policy=model if use_policy else None)
    want = spec.example_inputs[0]
    if tuple(x.shape[1:]) != tuple(want.shape[1:]):
        raise ExportError("%s: task %s gives calibration inputs of shape %s, the model takes (N, %s)"
                          % (checkpoint, state.get("task"), tuple(x.shape), ", ".join(map(str, want.shape[1:]))))
    meta = {"task": state.get("task"), "n": int(n), "seed": int(seed), "checkpoint": str(checkpoint),
            "arch": state["arch"], "policy": "checkpoint policy (greedy)" if use_policy else "none",
            "method": "%s.calibration_inputs(%d)" % (type(task).__name__, n)}
    arrays = {spec.input_names[0]: x.astype(np.float32) if x.dtype == np.float64 else x}
    save_calibration(arrays, out_path, meta)
    return dict(meta, path=str(out_path), shapes={k: list(v.shape) for k, v in arrays.items()})


def builtin_calibration(task_name: str):
    """Path of the shipped calibration set for a built-in task (calibration/<task>.npz), or None."""
    here = Path(__file__).resolve().parent.parent          # grpo_edge/
    for d in (here / "calibration", here.parent / "calibration"):
        p = d / ("%s.npz" % task_name)
        if p.is_file():
            return p
    return None
