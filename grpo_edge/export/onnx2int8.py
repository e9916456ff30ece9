"""onnx2int8: static post-training int8 quantization with onnxruntime (QDQ format).

    info = onnx2int8("model.onnx", "calibration/cartpole.npz", "model.int8.onnx", method="minmax")

The output form is fixed because targets consume it (the ESP32 generator reads these parameters):
QDQ (QuantizeLinear/DequantizeLinear pairs around each quantized op), activations int8 asymmetric
per-tensor, weights int8 symmetric (zero point 0) per output channel, bias left to ORT (int32).

The ORT-on-this-CPU trap: on x86 without VNNI (AVX2 only), ORT's optimized int8 kernels widen with
saturating 16-bit adds and can lose accuracy (toolchain-findings: mean error 0.0104 vs 0.0015). We
therefore judge accuracy with graph optimizations DISABLED (a QDQ graph then runs as dequantize ->
fp32 op -> quantize, exactly the arithmetic the parameters describe, which is what TFLite/TFLM and the
ESP32 code implement up to 1 LSB), and report the optimized-kernel error next to it. `reduce_range=True`
(7-bit weights) avoids the saturation in ORT itself but costs precision on every target, so it is off by
default and never switched on silently.
"""
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError
from grpo_edge.report import atomic_write_bytes

METHODS = ("minmax", "entropy", "percentile")
ACTIVATIONS = ("int8", "int16")
WEIGHT_ROUNDING = ("nearest", "gptq")
# TFLite's 16x8 mode fixes these ops' int16 output parameters (scale 1/32768, zero point 0).
FIXED_INT16_OUTPUT = ("Tanh", "Sigmoid", "Softmax")
# Elementwise ops that ORT's default op list leaves out: quantized too, so that two of them in a row (Gelu then
# HardSigmoid) still get an int8 edge between them.
ACTIVATION_OPS = ("Tanh", "Sigmoid", "HardSwish", "HardSigmoid", "LeakyRelu", "Relu", "Clip", "Gelu", "FastGelu",
                  "Sub", "PRelu", "Elu", "Celu", "Selu", "Softplus", "Softsign")
LOG_SOFTMAX_OUTPUT = (16.0 / 256, 127)       # TFLite's int8 log-softmax output: scale, zero point
LOG_SOFTMAX_OUTPUT16 = (1.0 / 1024, 0)       # ours at int16 (16x8): -32 .. 0 in steps of 2^-10
INT16_HEADROOM = 2.0       # int16 activation ranges: this many times the calibration range (minmax)
MIN_SAMPLES = 100


def onnx2int8(onnx_path, calibration, out_path, method: str = "minmax", per_channel: bool = True,
              reduce_range: bool = False, max_samples: int = 2000, op_types=None, activations: str = "int8",
              weight_rounding: str = "nearest", holdout: float = 0.0, eval_data=None, eval_src: str = "") -> dict:
    """Quantize `onnx_path` to int8 QDQ at `out_path`, calibrated on `calibration`.

    calibration: np.ndarray (single-input models), {input name: array}, or a .npy / .npz path (an .npz
      holds one array per input name, or one array for a single-input model); or a list of feed dicts
      whose shapes may differ (decode steps with a growing KV cache), in memory or as a feed-set .npz
      (grpo_edge.export.decode_calibration). Feeds of varying shape support method "minmax" only.
    op_types: quantize only these op types (e.g. ["MatMul", "Gemm"]); None = every op ORT can quantize and
      every elementwise activation (ACTIVATION_OPS).
    activations: "int8" (asymmetric) or "int16" (TFLite's 16x8 mode: symmetric int16 activations, int8
      weights; tanh/sigmoid outputs fixed at scale 1/32768; other ranges INT16_HEADROOM x the calibration
      range with minmax; ORT raises the opset to 21 for it).
    weight_rounding: "nearest", or "gptq": Gemm/MatMul weights re-rounded on the same grid to keep each
      layer's output on the calibration inputs close to fp32 (grpo_edge.export.gptq).
    holdout: the share of the calibration samples kept out to measure the int8 model on (`grpo-edge
      quantize`: 0.2); 0 or too few: the calibration samples (evaluated_on says). eval_data / eval_src:
      inputs to measure on instead (the task's states).
    Returns {path, size_bytes, fp32_size_bytes, method, per_channel, reduce_range, num_samples, format,
      warnings, evaluated_on, errors: {reference: {...}, ort_optimized: {...}}}: int8-vs-fp32 output errors,
      with ORT optimizations off (reference arithmetic) and on (this CPU's kernels). warnings also name a
      degenerate calibration set (constant, zero-range inputs, huge values).
    """
    from grpo_edge.export.onnx_utils import io_specs, load_onnx
    from grpo_edge.export.validate import check_calibration
    _check_choices(method, activations, weight_rounding)
    onnx_path = Path(onnx_path)
    model = load_onnx(onnx_path)
    specs = io_specs(model, "input")
    data, src = _load_calibration(calibration, specs)
    check_calibration(data, specs, src, onnx_path)
    if isinstance(data, list):           # only the inputs the graph has (a recorder may feed more)
        data = [dict((s["name"], f[s["name"]]) for s in specs) for f in data]
    n = len(data) if isinstance(data, list) else len(next(iter(data.values())))
    notes = []
    if n < MIN_SAMPLES:
        msg = "only %d calibration samples in %s (fewer than %d): activation ranges may be off" % (n, src, MIN_SAMPLES)
        warnings.warn(msg)
        notes.append(msg)
    notes += degenerate_calibration(data, src)
    data, held, evaluated_on = _split_holdout(data, holdout, src)
    if eval_data is not None:              # checked before any work: inputs of another model are one line
        held, evaluated_on = _eval_inputs(eval_data, eval_src, specs, onnx_path)
        notes += outside_calibration(data, held, eval_src or "eval_data")
    n = len(data) if isinstance(data, list) else len(next(iter(data.values())))
    if n > max_samples:
        idx = np.sort(np.random.default_rng(0).choice(n, max_samples, replace=False))
        data = [data[i] for i in idx] if isinstance(data, list) else {k: v[idx] for k, v in data.items()}
        notes.append("used %d of %d calibration samples (max_samples)" % (max_samples, n))
        n = max_samples

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(out_path.parent), prefix="." + out_path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        _quantize(onnx_path, tmp, data, specs, method, per_channel, reduce_range, op_types, activations)
        gptq = None
        if weight_rounding == "gptq":
            if isinstance(data, list):
                raise ExportError("weight rounding gptq needs fixed-shape calibration inputs (not decode-step feeds)")
            from grpo_edge.export.gptq import onnx_gptq
            gptq = onnx_gptq(onnx_path, tmp, data)
        atomic_write_bytes(out_path, Path(tmp).read_bytes())
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    held = data if held is None else held
    errors = {"reference": compare_outputs(onnx_path, out_path, held, optimize=False),
              "ort_optimized": compare_outputs(onnx_path, out_path, held, optimize=True)}
    return {"path": str(out_path), "size_bytes": out_path.stat().st_size,
            "fp32_size_bytes": onnx_path.stat().st_size, "method": method, "per_channel": per_channel,
            "reduce_range": reduce_range, "num_samples": n, "calibration": src,
            "op_types": list(op_types) if op_types else "all ORT-quantizable ops",
            "format": "QDQ; activations %s per-tensor; weights int8 symmetric " % (
                "int8 asymmetric" if activations == "int8" else "int16 symmetric")
                      + ("per-channel" if per_channel else "per-tensor"),
            "activations": activations, "weight_rounding": weight_rounding, "gptq": gptq,
            "warnings": notes, "evaluated_on": evaluated_on, "errors": errors}


def _check_choices(method, activations, weight_rounding) -> None:
    for what, value, allowed in (("calibration method", method, METHODS), ("activations", activations, ACTIVATIONS),
                                 ("weight rounding", weight_rounding, WEIGHT_ROUNDING)):
        if value not in allowed:
            raise ExportError("%s must be one of %s, got %r" % (what, "|".join(allowed), value))


def _eval_inputs(eval_data, eval_src, specs, onnx_path):
    """({input: array in the input's dtype}, what they are) for measuring on inputs given apart; inputs that
    do not fit the model are one ExportError (calibration data's checks)."""
    from grpo_edge.export.validate import check_calibration
    held = eval_data if isinstance(eval_data, dict) else {specs[0]["name"]: np.asarray(eval_data)}
    dtypes = {s["name"]: np.dtype(s["dtype"]) for s in specs}
    held = {k: np.asarray(v, dtype=dtypes.get(k, np.float32)) for k, v in held.items()}
    try:
        check_calibration(held, specs, eval_src or "eval_data", onnx_path)
    except ExportError as e:
        raise ExportError(str(e).replace("calibration ", "evaluation inputs of ", 1))
    return held, "%d inputs of %s (not the calibration set)" % (len(next(iter(held.values()))), eval_src or "eval_data")


def outside_calibration(calib, held, src, share=0.01):
    """A note per input when more than `share` of the values of the inputs measured on lie outside the
    calibration set's range, per feature: int8 saturates there, so the int8-vs-fp32 errors measured on them
    are mostly that clipping, not rounding."""
    if isinstance(calib, list) or not isinstance(held, dict):
        return []
    notes = []
    for name, x in held.items():
        c = calib.get(name)
        if c is None or not np.issubdtype(np.asarray(c).dtype, np.floating) or len(c) == 0 or len(x) == 0:
            continue
        c2, x2 = np.asarray(c, np.float64).reshape(len(c), -1), np.asarray(x, np.float64).reshape(len(x), -1)
        lo, hi = c2.min(0), c2.max(0)
        out = (x2 < lo) | (x2 > hi)
        if out.mean() <= share:
            continue
        width = np.maximum(hi - lo, 1e-12)
        reach = np.maximum(x2.max(0) - lo, hi - x2.min(0)) / width            # how far past, in calibration ranges
        worst = int(np.argmax(reach))
        notes.append("%.0f%% of the values of %s's input %r lie outside the calibration set's range (feature %d "
                     "spans %.3g..%.3g there, %.3g..%.3g in the calibration set): int8 saturates outside it, so "
                     "the int8-vs-fp32 errors measured on them are mostly clipping; calibrate on inputs like the ones "
                     "the model will see"
                     % (100 * out.mean(), src, name, worst, x2[:, worst].min(), x2[:, worst].max(), lo[worst],
                        hi[worst]))
    return notes


MIN_HELD_OUT = 20           # held-out samples below this: measure on the calibration samples, and say so


def _split_holdout(data, holdout, src):
    """(calibration part, held-out part or None, what the figures are measured on): a seeded random
    `holdout` share of the samples is kept out of calibration."""
    if not holdout or isinstance(data, list):
        return data, None, "the calibration samples themselves"
    n = len(next(iter(data.values())))
    k = int(round(n * float(holdout)))
    if k < MIN_HELD_OUT or n - k < 1:
        return data, None, ("the calibration samples themselves: %d samples in %s are too few to hold %d%% out "
                            "(at least %d held out)" % (n, src, round(100 * holdout), MIN_HELD_OUT))
    perm = np.random.default_rng(0).permutation(n)
    keep, out = np.sort(perm[k:]), np.sort(perm[:k])
    return ({name: v[keep] for name, v in data.items()}, {name: v[out] for name, v in data.items()},
            "%d held-out samples of %s (%d%%, not used to calibrate)" % (k, src, round(100 * holdout)))


def degenerate_calibration(data, src) -> list:
    """Warnings for a calibration set that cannot set sensible int8 ranges: constant inputs (every sample the
    same: a zero-width range), inputs whose every feature is constant across samples, values beyond 1e6."""
    if isinstance(data, list):
        return []
    out = []
    for name, a in data.items():
        x = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
        if x.size and np.ptp(x) == 0:
            out.append("calibration %s input %r is constant (every value %g): int8 ranges from it are empty, and "
                       "real inputs will saturate; calibrate on inputs the model really sees" % (src, name, x.flat[0]))
        elif len(x) > 1 and np.all(np.ptp(x, axis=0) == 0):
            out.append("calibration %s input %r: every sample is the same: calibrate on inputs the model really "
                       "sees" % (src, name))
        if x.size and np.abs(x).max() > 1e6:
            out.append("calibration %s input %r reaches %.3g: int8 steps over such a range are about %.3g wide, so "
                       "typical inputs all round to a few codes" % (src, name, np.abs(x).max(), np.abs(x).max() / 127.0))
    return out


def _batches(data, specs):
    """The feeds the calibrator runs: equal-size slices of stacked arrays, or shape groups of a feed list."""
    if isinstance(data, list):
        from grpo_edge.export.decode_calibration import group_feeds
        axes = {s["name"]: next((i for i, d in enumerate(s["shape"]) if "batch" in str(d).lower()), None)
                for s in specs}
        return group_feeds(data, axes)
    firsts = [s["shape"][0] for s in specs if s["shape"]]
    fixed = firsts[0] if firsts and all(isinstance(f, int) and f > 0 and f == firsts[0] for f in firsts) else 0
    n = len(next(iter(data.values())))
    # ORT's calibrators stack per-batch outputs: every batch must have the same size. A model exported
    # with a fixed batch size gets exactly that many samples per run (a remainder is left out).
    step = fixed or max(b for b in range(1, 33) if n % b == 0)
    return [{k: v[i:i + step] for k, v in data.items()} for i in range(0, n - n % step, step)]


def _quantize(src, dst, data, specs, method, per_channel, reduce_range, op_types=None, activations="int8"):
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    batches = _batches(data, specs)
    if method != "minmax" and len(set(tuple(sorted((k, v.shape) for k, v in b.items())) for b in batches)) > 1:
        # ORT's histogram calibrators stack every run's tensors into one array: shapes must agree.
        raise ExportError("calibration method %r needs fixed-shape inputs; these feeds vary in shape (decode "
                          "steps): use minmax" % method)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(batches)

        def get_next(self):
            return next(self._it, None)

    import onnx
    from grpo_edge.export.attention_mask import masked_softmaxes
    model = onnx.load(str(src))
    extra = _extra_options(model, src, data, method, activations)
    # an attention mask of -inf (Where or Add -> Softmax) stays float between int8 scores and the softmax's Q
    masked = [n.name for p in masked_softmaxes(model) for n in (p["node"], p["softmax"])]
    cm = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
          "percentile": CalibrationMethod.Percentile}[method]
    import contextlib
    import io
    import logging
    root = logging.getLogger()
    level = root.level
    try:
        # ORT prints calibration progress to stdout and advice to the root logger: keep our output clean.
        root.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QInt16 if activations == "int16" else QuantType.QInt8,
                            weight_type=QuantType.QInt8,
                            per_channel=per_channel, reduce_range=reduce_range, calibrate_method=cm,
                            op_types_to_quantize=list(op_types) if op_types else _default_op_types(src),
                            nodes_to_exclude=masked, extra_options=extra)
    except ExportError:
        raise
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportError("int8 quantization of %s failed (%s)" % (src, msg[:300]))
    finally:
        root.setLevel(level)
    _quantize_log_softmax_outputs(dst, activations)
    if masked and not isinstance(data, list):
        from grpo_edge.export.attention_mask import quantize_scores
        quantize_scores(src, dst, data)


def _extra_options(model, src, data, method, activations) -> dict:
    """quantize_static's extra_options. ForceQuantizeNoInputCheck: a Transpose / Reshape / MaxPool that reads the
    model's float input gets a Q before it too (ORT otherwise leaves such "latent" ops float when nothing upstream
    is quantized)."""
    extra = {"ActivationSymmetric": activations == "int16", "WeightSymmetric": True, "ForceQuantizeNoInputCheck": True}
    if activations == "int16":
        extra["TensorQuantOverrides"] = _int16_overrides(src, data, method)
        return extra
    fixed = {n.output[0]: [{"scale": np.array(LOG_SOFTMAX_OUTPUT[0], np.float32),      # TFLite's log-softmax
                            "zero_point": np.array(LOG_SOFTMAX_OUTPUT[1], np.int8)}]  # output: a layer after sees it
             for n in model.graph.node if n.op_type == "LogSoftmax"}
    if fixed:
        extra["TensorQuantOverrides"] = fixed
    return extra


def _quantize_log_softmax_outputs(path, activations="int8") -> None:
    """A final LogSoftmax, which onnxruntime leaves in float, gets TFLite's fixed int8 output (LOG_SOFTMAX_OUTPUT:
    log-probabilities -15.9..0 in steps of 1/16; one that feeds a quantized op has them from _quantize's
    overrides), so that every target computes what TFLite does: its result is renamed, and a Q -> DQ pair
    gives back the original name. With int16 activations: LOG_SOFTMAX_OUTPUT16 (-32..0 in steps of 2^-10, ours:
    TFLite has no int16 log-softmax)."""
    import onnx
    from grpo_edge.export.onnx_utils import insert_qdq
    model = onnx.load(str(path))
    quantized = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    for n in [n for n in model.graph.node if n.op_type == "LogSoftmax" and n.output[0] not in quantized]:
        t = n.output[0]
        n.output[0] = t + "/float"
        if activations == "int16":
            insert_qdq(model, t + "/float", t, *LOG_SOFTMAX_OUTPUT16, after=n, name=t, dtype=np.int16)
        else:
            insert_qdq(model, t + "/float", t, *LOG_SOFTMAX_OUTPUT, after=n, name=t)
    onnx.save(model, str(path))


def _default_op_types(src) -> list:
    """ORT's own list of quantizable ops, plus the activations in the model that it leaves out."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry
    from grpo_edge.export.onnx_utils import load_onnx
    present = {n.op_type for n in load_onnx(src).graph.node}
    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry) | (present & set(ACTIVATION_OPS)))


def _int16_overrides(src, data, method) -> dict:
    """Per-tensor parameters ORT must use for int16 activations: tanh / sigmoid outputs at TFLite's fixed
    2^-15; with minmax calibration, every other activation range INT16_HEADROOM times the calibration
    range (int16 has bits to spare: 1 of 15 buys room for inputs beyond the calibration set, e.g. a cart
    that drifts further than in any calibration episode, which would otherwise clip)."""
    import onnx
    graph = onnx.load(str(src)).graph
    fixed = [n.output[0] for n in graph.node if n.op_type in FIXED_INT16_OUTPUT]
    over = {t: [{"scale": np.array(1.0 / 32768, dtype=np.float32), "zero_point": np.array(0, dtype=np.int16)}]
            for t in fixed}
    fixed += [n.output[0] for n in graph.node if n.op_type == "LogSoftmax"]
    over.update({n.output[0]: [{"scale": np.array(LOG_SOFTMAX_OUTPUT16[0], dtype=np.float32),    # ours: a layer
                                "zero_point": np.array(0, dtype=np.int16)}]                     # after sees it
                 for n in graph.node if n.op_type == "LogSoftmax"})
    if method != "minmax" or isinstance(data, list):
        return over
    from grpo_edge.export.onnx_utils import tensor_values
    inits = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in inits]
    names += [n.output[0] for n in graph.node if n.output and n.output[0] not in fixed and n.op_type != "Constant"]
    for name, v in tensor_values(src, data, names).items():
        if v.dtype.kind == "f" and v.size:
            r = INT16_HEADROOM * float(np.abs(v).max())
            over[name] = [{"rmin": np.array(-r, dtype=np.float32), "rmax": np.array(r, dtype=np.float32)}]
    return over


def _load_calibration(calibration, specs):
    """-> ({input name: array}, description of the source)."""
    names = [s["name"] for s in specs]
    if isinstance(calibration, (str, os.PathLike)):
        from grpo_edge.export.calibration import open_calibration
        from grpo_edge.export.decode_calibration import is_feeds, load_feeds
        path = Path(calibration)
        loaded = open_calibration(path)
        if is_feeds(loaded):
            return load_feeds(loaded, path), str(path)
        if isinstance(loaded, np.ndarray):
            arrays = {names[0]: loaded} if len(names) == 1 else {"?": loaded}
        else:
            keys = [k for k in loaded.files if not k.startswith("__")]   # __meta__: how the set was made
            if all(k in keys for k in names):
                arrays = {k: loaded[k] for k in names}
            elif len(names) == 1 and (len(keys) == 1 or "inputs" in keys):
                arrays = {names[0]: loaded["inputs" if "inputs" in keys else keys[0]]}
            else:
                raise ExportError("%s holds arrays %s; the model needs %s" % (path, keys, names))
        return arrays, str(path)
    if isinstance(calibration, list) and calibration and all(isinstance(f, dict) for f in calibration):
        return [dict((k, np.asarray(v)) for k, v in f.items()) for f in calibration], "in-memory feed list"
    if isinstance(calibration, dict):
        missing = [k for k in names if k not in calibration]
        if missing:
            raise ExportError("calibration data lacks model inputs %s (has %s)" % (missing, list(calibration)))
        return {k: np.asarray(calibration[k]) for k in names}, "in-memory dict"
    if isinstance(calibration, np.ndarray):
        if len(names) != 1:
            raise ExportError("the model has %d inputs %s: pass a dict or .npz with one array each"
                              % (len(names), names))
        return {names[0]: calibration}, "in-memory array"
    raise ExportError("calibration must be an array, a dict of arrays or a .npy/.npz path, got %s"
                      % type(calibration).__name__)


def compare_outputs(fp32_path, int8_path, data, optimize=False, limit: int = 512) -> dict:
    """int8-vs-fp32 errors on `data` ({input: array}): max/mean |diff| of the first output and, when it
    looks like logits (last dim > 1), the fraction of samples whose argmax agrees."""
    from grpo_edge.export.onnx_utils import session
    s32, s8 = session(fp32_path, optimize=True), session(int8_path, optimize=optimize)
    if isinstance(data, list):           # feeds of varying shape: one run each, first outputs flattened
        a, b = [], []
        for f in data[:limit]:
            a.append(s32.run(None, f)[0])
            b.append(s8.run(None, f)[0])
        a = np.concatenate([x.reshape(-1, x.shape[-1]) for x in a])
        b = np.concatenate([x.reshape(-1, x.shape[-1]) for x in b])
        return _errors(a, b, min(limit, len(data)), optimize)
    from grpo_edge.export.onnx_utils import batches_of, fixed_batch
    n = min(limit, len(next(iter(data.values()))))
    batch = fixed_batch(fp32_path) or n
    n -= n % batch                       # a fixed-batch model runs whole batches only
    feeds = batches_of({k: v[:n] for k, v in data.items()}, batch)
    a = np.concatenate([s32.run(None, f)[0] for f in feeds])
    b = np.concatenate([s8.run(None, f)[0] for f in feeds])
    return _errors(a, b, n, optimize, _output_step(int8_path))


def _output_step(int8_path):
    """The real value of one step of the int8 model's first output (its last DequantizeLinear's scale), or None."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(int8_path))
    out = m.graph.output[0].name
    node = next((n for n in m.graph.node if out in n.output), None)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    init = {i.name: i for i in m.graph.initializer}
    scale = init.get(node.input[1])
    return float(np.max(numpy_helper.to_array(scale))) if scale is not None else None


def _errors(a, b, n, optimize, step=None) -> dict:
    """|diff| figures; for logits, the argmax agreement, and the agreement on the decisions fp32 makes by
    more than two output steps (closer ones are ties at int8 resolution: a policy balancing a pole has many)."""
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    out = {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()), "samples": int(n),
           "ort_graph_optimizations": "on" if optimize else "off"}
    if a.ndim >= 2 and a.shape[-1] > 1:
        same = a.argmax(-1) == b.argmax(-1)
        out["argmax_agreement"] = float(np.mean(same))
        if step:
            top = np.sort(a.reshape(-1, a.shape[-1]), axis=-1)
            clear = (top[:, -1] - top[:, -2]) > 2 * step
            out["clear_decisions"] = int(clear.sum())
            out["argmax_agreement_clear"] = float(np.mean(same.reshape(-1)[clear])) if clear.any() else None
    return out
