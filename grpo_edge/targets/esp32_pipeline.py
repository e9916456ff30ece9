"""The front half of `deploy --target esp32*` for a checkpoint: export, calibrate, quantize, choose.

checkpoint --torch2onnx--> OUT/model.onnx --onnx2int8 (calibration from the task)--> OUT/model.int8.onnx
                                          (and, when int8 flips decisions)      --> OUT/model.a16w8.onnx

Quantization is chosen by measurement ("activations": "auto", the default): int8 everywhere first; if
its decisions (argmax of the integer reference) agree with the fp32 model on fewer than
`min_agreement` of the calibration states, the 16x8 form (int16 activations, int8 weights rounded
with GPTQ, TFLite's 16x8 mode) is built too and kept when it agrees more. Small control policies need
it: a balancing CartPole policy's logits are nearly tied most of the time (docs/esp32.md). The choice
is made on the calibration states; the report's agreement figure comes from other states (an
evaluation with another seed), so it is not the number the choice was tuned on.
The ESP32 generator (grpo_edge.targets.esp32) then takes the chosen model.
"""
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError, TargetError

EVAL_SEED = 4242          # evaluation states come from another seed than the calibration set
ACTIVATIONS = ("auto", "int8", "int16")
MIN_AGREEMENT = 0.99
OPTIONS = ("calibration", "calibration_samples", "method", "activations", "weight_rounding", "min_agreement",
           "min_retention")


def prepare_int8(source: Path, out_dir: Path, options: dict, from_checkpoint: bool):
    """Returns (quantized onnx path, esp32 options). An ONNX source is used as it is when already quantized
    (QDQ), else quantized with options['calibration']."""
    options = dict(options)
    calib = options.pop("calibration", None)
    n_calib = int(options.pop("calibration_samples", 512))
    method = options.pop("method", "minmax")
    activations = str(options.pop("activations", "auto"))
    rounding = options.pop("weight_rounding", None)
    from grpo_edge.targets import gate
    min_agreement = gate.check_threshold("min_agreement", options.pop("min_agreement", gate.MIN_AGREEMENT))
    options["gate"] = {"min_agreement": min_agreement, "min_retention": gate.check_threshold(
        "min_retention", options.pop("min_retention", gate.MIN_RETENTION))}
    if activations not in ACTIVATIONS:
        raise TargetError("option activations must be one of %s, got %r" % ("|".join(ACTIVATIONS), activations))
    if not from_checkpoint:
        return _prepare_onnx(source, out_dir, options, calib, activations, rounding, method, min_agreement)
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.export.calibration import checkpoint2calibration, load_calibration, task_inputs
    from grpo_edge.export.torch2onnx import torch2onnx
    from grpo_edge.targets.contract import check_calibration

    out_dir.mkdir(parents=True, exist_ok=True)
    model, state = load_policy(source)
    task = _task_or_none(state, calib)      # before any work: a task that cannot be rebuilt needs --calibration
    fp32 = out_dir / "model.onnx"
    torch2onnx(model, fp32)
    check_compilable(fp32)
    if calib is None:
        calib = out_dir / "calibration.npz"
        checkpoint2calibration(source, calib, n=n_calib)
    data = load_calibration(calib)
    check_calibration(data, calib)
    from grpo_edge.core.distributions import action_range
    if options.get("eval_inputs") is None and task is None:      # the calibration inputs (no task to sample)
        options["eval_inputs"] = np.asarray(_single_input(data), dtype=np.float32)
        options["gate"]["on"] = "calibration inputs (the checkpoint has no task to draw held-out states from)"
    if options.get("eval_inputs") is None:
        options["eval_inputs"] = np.asarray(task_inputs(task, 1000, policy=model), dtype=np.float32)
        options["gate"]["on"] = "held-out task states (seed %d, not the calibration episodes)" % EVAL_SEED
    held_out = options["eval_inputs"] if task is not None else None
    choice = choose_quantization(fp32, calib, data, out_dir, activations, rounding, method, min_agreement,
                                 action_range(model), judge=held_out)
    options.setdefault("fp32_onnx", str(fp32))
    options.setdefault("source", str(source))
    from grpo_edge.tasks import task_slug
    options.setdefault("prefix", task_slug(state))
    options.setdefault("quantization", choice)
    if options.get("task") is None and getattr(task, "kind", None) == "control":
        options["task"] = task            # closed-loop score of the integer model (control tasks: fast)
    return Path(choice["chosen_path"]), options




def _task_or_none(state, calib):
    """The checkpoint's task; None for one no command can rebuild (the online trainer's record stream) when
    --calibration gives the inputs instead; else its one-line error."""
    from grpo_edge.errors import CheckpointError
    from grpo_edge.tasks import task_from_state
    try:
        return task_from_state(state, seed=EVAL_SEED)
    except CheckpointError:
        if calib is None:
            raise
        return None


def _prepare_onnx(source, out_dir, options, calib, activations, rounding, method, min_agreement):
    """An ONNX source: a QDQ model goes on as it is; an fp32 one is quantized with the given calibration set,
    chosen as for a checkpoint (decision agreement measured on the calibration inputs)."""
    from grpo_edge.export.onnx_utils import copy_onnx, is_qdq
    from grpo_edge.export.calibration import load_calibration
    from grpo_edge.targets.contract import check_calibration
    from grpo_edge.targets.esp32.deploy import default_prefix
    if is_qdq(source):
        return source, options
    check_compilable(source)
    if calib is None:
        raise TargetError("%s is an fp32 ONNX model: give --calibration (.npy or .npz) to quantize it for the "
                          "ESP32, or pass an int8 QDQ model" % source)
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / "model.onnx"
    copy_onnx(source, fp32)
    data = load_calibration(calib)
    check_calibration(data, calib)
    calib, data, held_out = split_held_out(data, calib, out_dir, min_agreement)
    # an ONNX file does not say its action bounds: decisions compare by argmax (several output columns), or
    # every output within 1% of its range (one column: export/evaluate.py:agreement)
    choice = choose_quantization(fp32, calib, data, out_dir, activations, rounding, method, min_agreement,
                                 judge=held_out)
    options.setdefault("fp32_onnx", str(fp32))
    options.setdefault("source", str(source))
    options.setdefault("prefix", default_prefix(source))
    options.setdefault("quantization", choice)
    x = held_out if held_out is not None else _single_input(data)
    if options.get("eval_inputs") is None and x is not None:
        options["eval_inputs"] = x if x.dtype.kind in "iu" else np.asarray(x, dtype=np.float32)
        options["gate"]["on"] = ("calibration inputs held out of calibration" if held_out is not None
                                 else "calibration inputs (all of them: no gate asked for)")
    return Path(choice["chosen_path"]), options


def split_held_out(data, calib, out_dir, min_agreement):
    """A single-input calibration set -> (path, data) of what calibrates and the inputs held out of it to
    measure the gate on: max(100, n // 5) of them, a seeded draw; the rest is written to
    out_dir/calibration.npz. Fewer than 200 inputs: one line (exit 2), unless the gate is 0 (all calibrate,
    and the figure is measured on them). A set of several inputs is kept whole (random inputs measure)."""
    from grpo_edge.export.calibration import save_calibration
    from grpo_edge.targets import gate
    x = _single_input(data)
    if x is None:
        return calib, data, None
    keep, held = gate.hold_out(len(x), min_agreement, calib)
    if held is None:
        return calib, data, None
    name = next(key for key in data if not key.startswith("__"))
    rest = {name: x[keep]}
    path = save_calibration(rest, Path(out_dir) / "calibration.npz",
                            {"from": str(calib), "n": int(len(keep)), "held_out": int(len(held)), "seed": 0})
    return path, rest, x[held]


def check_compilable(fp32) -> None:
    """Before any other work: every op of the fp32 model (its decomposed activations and layer norms fused
    first, as choose_quantization will) has an ESP32 rule, and its input shape is one the compiler takes;
    else one TargetError listing all of them, one line each."""
    from grpo_edge.export.onnx_fuse import fuse_model
    from grpo_edge.export.onnx_utils import load_onnx
    from grpo_edge.targets.esp32.ops import ONNX_RULES
    from grpo_edge.targets.esp32.parse import compile_refusal, unsupported_ops
    model = load_onnx(fp32)
    fuse_model(model)
    problems = unsupported_ops(model)
    if problems:
        raise TargetError(compile_refusal(problems, ONNX_RULES))


def choose_quantization(fp32, calib, data, out_dir, activations="auto", rounding=None, method="minmax",
                        min_agreement=MIN_AGREEMENT, action_range=None, judge=None) -> dict:
    """Quantize `fp32` as asked (or int8, then 16x8 when int8 agrees on < min_agreement of the decisions),
    after fusing its decomposed activations (export/onnx_fuse.py; model.fused.onnx when any). The decisions
    are judged on `judge` (inputs held out of calibration: the quality gate's) when given, else on the
    calibration inputs. Returns {chosen, chosen_path, candidates: [{activations, weight_rounding, path,
    agreement_calibration, agreement_held_out | error}], rule, fusions}."""
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.onnx_fuse import fuse_onnx
    fused = Path(out_dir) / "model.fused.onnx"
    fusions = fuse_onnx(fp32, fused)         # decomposed GELUs -> one node each (a table once quantized)
    src = fused if fusions else fp32
    if not fusions:
        fused.unlink()
    forms = {"int8": ("int8", rounding or "nearest", "model.int8.onnx"),
             "int16": ("int16", rounding or "gptq", "model.a16w8.onnx")}
    order = ["int8", "int16"] if activations == "auto" else [activations]
    x = _single_input(data)
    cands = []
    for key in order:
        acts, wr, name = forms[key]
        path = Path(out_dir) / name
        cand = {"activations": acts, "weight_rounding": wr, "path": str(path)}
        try:
            onnx2int8(src, calib, path, method=method, activations=acts, weight_rounding=wr)
            cand["agreement_calibration"] = decision_agreement(path, fp32, x, action_range) if x is not None else None
            if judge is not None:
                cand["agreement_held_out"] = decision_agreement(path, fp32, judge, action_range)
        except (ExportError, TargetError) as e:
            if activations != "auto":
                raise
            cand["error"] = str(e)
        cands.append(cand)
        agree = _judged(cand)
        if activations == "auto" and (agree is None or agree >= min_agreement):
            break                        # int8 is good enough (or not measurable): no 16x8 needed
    ok = [c for c in cands if "error" not in c]
    if not ok:
        raise TargetError("quantization failed: %s" % "; ".join(c["error"] for c in cands))
    best = ok[0]
    for c in ok[1:]:                     # a wider form must earn its place by agreeing more
        if (_judged(c) or 0) > (_judged(best) or 0):
            best = c
    rule = ("asked for %s" % activations if activations != "auto" else
            "int8 first; 16x8 (int16 activations, GPTQ-rounded int8 weights) when int8 decisions agree with "
            "fp32 on < %.3g of the %s, kept if it agrees more" % (min_agreement, "held-out inputs" if judge is
                                                                  not None else "calibration states"))
    return {"chosen": best["activations"], "chosen_path": best["path"], "candidates": cands, "rule": rule,
            "fusions": fusions}


def _judged(cand):
    """The agreement a candidate is chosen by: on the held-out inputs when measured there."""
    return cand.get("agreement_held_out", cand.get("agreement_calibration"))


def decision_agreement(qdq_path, fp32_path, x, action_range=None) -> float:
    """Share of inputs x where the integer reference decides as the fp32 model (the ESP32 arithmetic): same
    argmax, or for a continuous policy (action_range) every action within 1% of its range."""
    from grpo_edge.targets.esp32 import parse
    from grpo_edge.targets.esp32.deploy import fp32_agreement
    graph = parse.parse(qdq_path)
    x = np.asarray(x)
    return fp32_agreement(graph, fp32_path, (x if x.dtype.kind in "iu" else x.astype(np.float32))[:1000],
                          action_range)


def _single_input(data):
    """The calibration array of a single-input model (None for feed lists / several inputs)."""
    if isinstance(data, dict) and len([k for k in data if not k.startswith("__")]) == 1:
        k = next(k for k in data if not k.startswith("__"))
        a = np.asarray(data[k])
        return a if a.dtype.kind in "fiu" else None
    if isinstance(data, np.ndarray) and data.dtype.kind in "fiu":     # floats, or token ids
        return data
    return None
