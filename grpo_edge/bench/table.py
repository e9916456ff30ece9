"""`grpo-edge bench`: one checkpoint, every format, side by side (Markdown + JSON + PNG).

    rows = run_bench("runs/cartpole/best.pt", "out/bench", targets=("rpi4", "rpi5", "esp32s3"))

Rows: torch, onnx fp32, onnx int8, tflite fp32, tflite int8 (+ extra_rows, e.g. a target's artifact).
Columns: size (exact), the task's own metric (measured on this host), host latency (measured on this
host: single-sample calls, warm-up then median, in this process), and per target profile the device
latency and energy per inference (ESTIMATED from targets/<name>.yaml; method in the JSON legend), status.

Below the table, for a model the ESP32 compiler takes (vector models), the per-op profile of model.int8.onnx
compiled to C (targets/esp32/profile.py: MACs, exact rv32imc instructions, arena, flash, and host
instructions ours vs TFLite Micro's for the same op) and its chart per_op.png; option per_op=False skips it.
"""
import functools
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grpo_edge.report import atomic_write_bytes, atomic_write_text

FORMATS = ("torch", "onnx fp32", "onnx int8", "tflite fp32", "tflite int8")
DEFAULTS = {"runs": 500, "warmup": 50, "eval_n": 0, "calibration": None, "calibration_samples": 512,
            "method": "minmax", "seed": 0, "per_op": True}


def run_bench(checkpoint, out_dir, targets=("rpi4", "rpi5", "esp32s3"), options=None, extra_rows=()) -> list:
    """Build every format from `checkpoint` into out_dir, measure and estimate; write bench.{md,json,png}.

    options: runs / warmup (host latency), eval_n (task metric size, 0 = task default), calibration
    (.npz, default: the task's inputs visited by the policy), calibration_samples, method, seed.
    Returns the rows (dicts); a format that cannot be built or run has status "skipped: ..." or
    "failed: ..." and empty figures, never a made-up number.
    """
    from grpo_edge.targets.profiles import load_profile
    opts = dict(DEFAULTS, **(options or {}))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    profiles = [load_profile(t) for t in targets]
    b = _load(checkpoint, out, opts)
    rows = {f: {"format": f, "file": "", "size_bytes": None, "metric": None, "host_latency_s": None,
                "status": "ok"} for f in FORMATS}
    calls = _measure_rows(b, rows)
    macs = _macs(b.paths["onnx fp32"], calls)
    result = [rows[f] for f in FORMATS] + [dict(r) for r in extra_rows]
    per_op = None
    if opts["per_op"] and calls is None:
        per_op = _esp32_per_op(b, rows["onnx int8"])
    elif opts["per_op"]:
        per_op = {"status": "skipped: a text model's ESP32 C is not made from its ONNX; its decode step's per-op "
                            "profile is in the report of `grpo-edge deploy --target esp32s3`"}
    rv32 = (per_op or {}).get("totals", {}).get("rv32_instructions_model") if (per_op or {}).get("status") == "ok" else None
    codes = _estimate_rows(result, profiles, macs, calls, rv32, b.paths)
    legend = _legend(b.task, profiles, macs, opts, checkpoint, codes)
    if calls:
        from grpo_edge.bench.text import text_legend
        legend = text_legend(legend, opts, len(calls))
    if b.task is None:
        legend["metric"] = "no task metric: %s" % b.task_err
    doc = {"checkpoint": str(checkpoint), "arch": b.state["arch"], "task": b.state.get("task"), "macs": macs,
           "legend": legend, "rows": result, "table_notes": _table_notes(profiles)}
    if per_op is not None:
        doc["esp32_per_op"] = per_op
    atomic_write_text(out / "bench.json", json.dumps(doc, indent=2, default=str))
    atomic_write_text(out / "bench.md", bench_markdown(doc))
    atomic_write_bytes(out / "bench.png", bench_chart(doc))
    return result


@dataclass
class _Bench:
    """What every row of one bench run needs: the checkpoint's model and task, options, file paths."""
    checkpoint: Any
    out: Path
    opts: dict
    model: Any
    state: dict
    task: Any
    task_err: str
    spec: Any
    single: bool              # one input tensor: the policy rows (metric, latency) apply
    example: Any
    paths: dict


def _load(checkpoint, out, opts) -> _Bench:
    """The checkpoint's policy, its task (or why there is none) and its export spec."""
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.tasks import task_from_state
    model, state = load_policy(checkpoint)
    task, task_err = None, ""
    try:
        task = task_from_state(state, seed=opts["seed"])
    except Exception as e:
        task, task_err = None, str(e).splitlines()[0]
    spec = model.export_spec(batch_size=1)
    single = not isinstance(spec, dict) and len(spec.input_names) == 1
    example = spec.example_inputs[0].numpy() if single else None
    paths = {"onnx fp32": out / "model.onnx", "onnx int8": out / "model.int8.onnx",
             "tflite fp32": out / "model.tflite", "tflite int8": out / "model.int8.tflite"}
    return _Bench(checkpoint, out, opts, model, state, task, task_err, spec, single, example, paths)


def _measure_rows(b, rows):
    """Fill every format's row in place; -> the MACs of each model call of a completion (text models) or None."""
    run_row = functools.partial(_run_row, rows)
    calls = None
    if b.state["arch"] in ("micro-gpt", "tiny-transformer") and b.task is not None:
        from grpo_edge.bench.text import text_rows     # generation loop rows: metric + latency per completion
        calls = text_rows(rows, b.checkpoint, b.model, b.state, b.task, b.out, b.opts, run_row)
    else:
        run_row("torch", functools.partial(_torch_row, b))
        run_row("onnx fp32", functools.partial(_onnx_row, b, "onnx fp32", False))
        run_row("onnx int8", functools.partial(_onnx_row, b, "onnx int8", True))
    if calls is None:
        run_row("tflite fp32", functools.partial(_tflite_row, b, "tflite fp32", "onnx fp32"))
        run_row("tflite int8", functools.partial(_tflite_row, b, "tflite int8", "onnx int8"))
    return calls


def _run_row(rows, fmt, build):
    """build(rows[fmt]); a failure is the row's status (one format failing must not hide the others)."""
    try:
        build(rows[fmt])
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        kind = ("skipped: " if "not installed" in msg else
                "unsupported: " if "no TFLite mapping" in msg or "several files" in msg else "failed: ")
        rows[fmt]["status"] = kind + msg[:200]


def _metric(b, policy):
    """The task's own metric of a policy (None without a task or for multi-input models)."""
    from grpo_edge.export.evaluate import task_metric
    return task_metric(b.task, policy, b.opts["eval_n"]) if b.task is not None and b.single else None


def _torch_row(b, r):
    """The checkpoint itself: state-dict size, metric, eager latency."""
    import torch
    from grpo_edge.export.evaluate import median_latency
    buf = io.BytesIO()
    torch.save(b.model.state_dict(), buf)
    r.update(file=str(b.checkpoint), size_bytes=len(buf.getvalue()), metric=_metric(b, b.model))
    if b.single:
        with torch.no_grad():
            x = torch.as_tensor(b.example)
            r["host_latency_s"] = median_latency(lambda a: b.model(a), x, b.opts["runs"], b.opts["warmup"])


def _onnx_row(b, fmt, reference, r):
    """model.onnx (torch2onnx) or model.int8.onnx (onnx2int8): size, metric, latency in onnxruntime."""
    from grpo_edge.export.evaluate import median_latency, onnx_policy
    from grpo_edge.export.onnx_utils import session
    from grpo_edge.export.torch2onnx import torch2onnx
    path = b.paths[fmt]
    if fmt == "onnx fp32":
        torch2onnx(b.model, path)
    else:
        _quantize(b, path)
    if not path.exists():
        raise RuntimeError("%s exports several files: bench covers single-file models" % b.state["arch"])
    r.update(file=path.name, size_bytes=path.stat().st_size)
    if b.single:
        r["metric"] = _metric(b, onnx_policy(path, reference=reference))
        sess = session(path, optimize=True)
        name = sess.get_inputs()[0].name
        r["host_latency_s"] = median_latency(lambda a: sess.run(None, {name: a}), b.example,
                                             b.opts["runs"], b.opts["warmup"])


def _quantize(b, path):
    """model.int8.onnx from model.onnx, calibrated on the given set or the task's inputs."""
    from grpo_edge.export.calibration import load_calibration, task_inputs
    from grpo_edge.export.onnx2int8 import onnx2int8
    opts = b.opts
    if not b.single:
        raise RuntimeError("int8 needs a single-input runtime function (calibration from decoding "
                           "is not supported yet)")
    if opts["calibration"]:
        calib = load_calibration(opts["calibration"])
    else:
        calib = task_inputs(b.task, opts["calibration_samples"], policy=b.model)
    calib = {b.spec.input_names[0]: np.asarray(next(iter(calib.values())) if isinstance(calib, dict)
                                               else calib, dtype=np.float32)}
    onnx2int8(b.paths["onnx fp32"], calib, path, method=opts["method"])


def _tflite_row(b, fmt, src, r):
    """The ONNX model converted to .tflite (onnx2tflite) and run with LiteRT: size, metric, latency."""
    from grpo_edge.export.evaluate import median_latency
    from grpo_edge.bench.tflite import _Runner, onnx2tflite, tflite_available, tflite_policy
    ok, why = tflite_available()
    if not ok:
        raise RuntimeError(why)
    if not b.paths[src].exists():
        raise RuntimeError("no %s to convert" % src)
    try:
        onnx2tflite(b.paths[src], b.paths[fmt])
        run = _Runner(b.paths[fmt])
    except Exception as e:
        if fmt != "tflite int8":
            raise
        _tflite_int8_via_ir(b, fmt, src, e, r)
        return
    r.update(file=b.paths[fmt].name, size_bytes=b.paths[fmt].stat().st_size, metric=_metric(b, tflite_policy(b.paths[fmt])))
    r["host_latency_s"] = median_latency(run, b.example, b.opts["runs"], b.opts["warmup"])


def _tflite_int8_via_ir(b, fmt, src, e, r):
    """Ops onnx2tflite lacks (Conv, pools): the same int8 parameters through the ESP32 IR builder."""
    from grpo_edge.export.evaluate import ArrayPolicy, median_latency
    from grpo_edge.bench.tflite import qdq2tflite_int8
    run = qdq2tflite_int8(b.paths[src], b.paths[fmt])
    what = str(e).split(": ", 1)[-1].split(" has no")[0]           # e.g. "op Conv (node /stem/conv/Conv)"
    r["status"] = ("ok (int8 I/O .tflite from the QDQ parameters via the ESP32 IR builder: the int8 "
                   "onnx2tflite path lacks %s)" % what[:60])
    r.update(file=b.paths[fmt].name, size_bytes=b.paths[fmt].stat().st_size,
             metric=_metric(b, ArrayPolicy(run, name=str(b.paths[fmt]))))
    r["host_latency_s"] = median_latency(run, b.example, b.opts["runs"], b.opts["warmup"])


def _macs(fp32_path, calls) -> int:
    """MACs per inference of model.onnx; text models: per completion, the sum over its model calls."""
    from grpo_edge.export.onnx_utils import count_macs, load_onnx
    macs = count_macs(load_onnx(fp32_path)) if fp32_path.exists() else 0
    if calls:
        macs = int(sum(calls))
    return macs


def _estimate_rows(result, profiles, macs, calls, rv32_instructions=None, paths=None) -> dict:
    """Per target profile: device latency and energy of each row that ran, from the target's device model
    (targets/device_model.py: the same figures deploy reports). -> {profile: {format: what code it assumes}}."""
    from grpo_edge.export.onnx_utils import load_onnx
    from grpo_edge.targets.device_model import format_estimate
    models = {f: load_onnx(paths[f]) for f in ("onnx fp32", "onnx int8")
              if paths and f in paths and Path(paths[f]).exists()}
    codes = {}
    for r in result:
        for p in profiles:
            est = None
            if r["status"] == "ok":
                est = format_estimate(p, r["format"], macs, calls, rv32_instructions, models.get(r["format"]))
            r["%s_latency_s" % p["name"]] = est["latency_s"] if est else None
            r["%s_energy_j" % p["name"]] = est["energy_j"] if est else None
            if est:
                codes.setdefault(p["name"], {})[r["format"]] = est["code"]
    return codes


def _legend(task, profiles, macs, opts, checkpoint, codes=None):
    leg = {"size_bytes": "exact: file size (torch: serialized state dict)",
           "metric": ("measured-host: %s.evaluate(...)['%s'], greedy, eval_n=%s; onnx int8 scored with ORT graph "
                      "optimizations off (QDQ reference arithmetic)" % (type(task).__name__, task.metric_name,
                                                                      opts["eval_n"] or "task default"))
           if task is not None else "",
           "host_latency_s": "measured-host: one sample per call, %d warm-up then median of %d, in-process, 1 thread "
                             "(ORT / LiteRT builtin kernels / torch eager)" % (opts["warmup"], opts["runs"]),
           "status": "ok, or why a format was skipped / failed"}
    for p in profiles:
        what = "; ".join("%s: %s" % (f, c) for f, c in sorted((codes or {}).get(p["name"], {}).items()))
        leg["%s_latency_s" % p["name"]] = ("ESTIMATE from the %s device model (targets/device_model.py, figures from "
                                          "targets/%s.yaml; deploy reports the same): %s" % (p["name"], p["name"], what))
        leg["%s_energy_j" % p["name"]] = ("ESTIMATE: active_power_w (%s) x estimated latency"
                                         % p["figures"]["active_power_w"]["label"])
    return leg


def _table_notes(profiles) -> list:
    """Lines printed directly under the table, beside the figures they qualify: for an ESP32 profile whose int8
    MAC rate is ESP-NN's (the S3), that its TFLite columns assume TFLM + ESP-NN's SIMD kernels, while the onnx
    int8 row is our plain C; with the sources the estimates cite (profile, targets/esp32/espnn_estimate.py)."""
    from grpo_edge.targets.esp32.espnn_estimate import SOURCES
    notes = []
    for p in profiles:
        f = p["figures"].get("int8_cycles_per_mac") or {}
        if p.get("family") != "esp32" or "ESP-NN" not in (f.get("source") or ""):
            continue
        notes.append("%s TFLite int8 figures assume TFLite Micro + ESP-NN's SIMD kernels (ESTIMATE: "
                     "int8_cycles_per_mac %g = %s; sources: %s). The onnx int8 row there is our generated plain C, "
                     "no ESP-NN; the per-op profile's TFLM host instructions, when shown, are TFLM's reference "
                     "kernels, without ESP-NN." % (p["name"], f["value"], f["source"].replace("estimate: ", ""),
                                                    SOURCES.split("; targets/")[0]))
    return notes


def _esp32_per_op(b, int8_row) -> dict:
    """The per-op profile of model.int8.onnx compiled for the ESP32 (and per_op.png), or why there is none."""
    from grpo_edge.targets.esp32.profile import per_op_chart, profile_onnx
    if int8_row["status"] != "ok":
        return {"status": "skipped: no int8 ONNX (%s)" % int8_row["status"]}
    try:
        prof = profile_onnx(b.paths["onnx int8"])
    except Exception as e:                 # an op the compiler lacks, no rv32 toolchain: the table still stands
        return {"status": "skipped: %s" % (str(e).strip().splitlines() or [type(e).__name__])[0][:200]}
    per_op_chart(prof, b.out / "per_op.png", "%s int8 C: rv32imc instructions per op (exact, mean of %d inputs)"
                 % (b.state.get("task") or b.state["arch"], prof["totals"]["inputs"]))
    return dict(prof, status="ok", chart="per_op.png")


def _per_op_markdown(p) -> list:
    if p["status"] != "ok":
        return ["", "## Per-op profile on the ESP32", "", p["status"]]
    cols = ["op", "kind", "macs", "rv32_instructions", "instructions_per_mac", "arena_live_bytes", "flash_bytes",
            "host_instructions", "tflm_host_instructions", "tflm_over_ours"]
    cols = [c for c in cols if c in p["ops"][0]]
    out = ["", "## Per-op profile on the ESP32 (model.int8.onnx compiled to C; per_op.png)", "",
           "rv32imc instructions: exact count on an instruction-level simulator (measured-host); host instructions: "
           "x86-64 valgrind callgrind, ours (gcc -O2) vs TFLite Micro's for the same op (measured-host%s). "
           "Device time is not measured here." % ("" if p["host_columns"] == "ok" else "; " + p["host_columns"]), "",
           "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in p["ops"]]
    out += ["", "Totals: " + ", ".join("%s %s" % (k, v) for k, v in p["totals"].items())]
    return out


def _fmt(v, scale=1.0, digits=4):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.*g" % (digits, v * scale)
    return str(v)


def bench_markdown(doc) -> str:
    """The table as Markdown: every column header says how its figures were obtained."""
    rows = doc["rows"]
    targets = [k[:-len("_latency_s")] for k in rows[0] if k.endswith("_latency_s") and k != "host_latency_s"]
    metric = "metric" if not doc["legend"].get("metric") else "metric (measured-host)"
    head = ["format", "size KB (exact)", metric, "host latency us (measured-host)"]
    for t in targets:
        head += ["%s latency us (ESTIMATE)" % t, "%s energy uJ (ESTIMATE)" % t]
    head.append("status")
    lines = ["# grpo-edge bench: %s (%s, task %s)" % (Path(doc["checkpoint"]).name, doc["arch"], doc["task"]), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["format"], _fmt(r["size_bytes"] / 1024.0 if r["size_bytes"] else None), _fmt(r["metric"]),
                 _fmt(r["host_latency_s"], 1e6, 3)]
        for t in targets:
            cells += [_fmt(r.get("%s_latency_s" % t), 1e6, 3), _fmt(r.get("%s_energy_j" % t), 1e6, 3)]
        cells.append(r["status"])
        lines.append("| " + " | ".join(cells) + " |")
    notes = [n for n in doc.get("table_notes", []) if n.split(" ", 1)[0] in targets]
    lines += [""] + notes if notes else []
    lines += ["", "How each column was obtained:", ""]
    lines += ["- `%s`: %s" % (k, v) for k, v in doc["legend"].items() if v]
    if "esp32_per_op" in doc:
        lines += _per_op_markdown(doc["esp32_per_op"])
    return "\n".join(lines) + "\n"


def bench_chart(doc) -> bytes:
    """PNG: task metric per format (measured) and latency per format (host measured, devices ESTIMATED)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    names = [r["format"] for r in rows]
    targets = [k[:-len("_latency_s")] for k in doc["rows"][0] if k.endswith("_latency_s") and k != "host_latency_s"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    a1.bar(names, [r["metric"] or 0 for r in rows], color="#4c72b0")
    a1.set_title("task metric (measured on host)")
    a1.tick_params(axis="x", rotation=30)
    series = [("host (measured)", "host_latency_s")] + [("%s (ESTIMATE)" % t, "%s_latency_s" % t) for t in targets]
    w = 0.8 / len(series)
    xs = np.arange(len(rows))
    for i, (label, key) in enumerate(series):
        a2.bar(xs + i * w, [(r.get(key) or 0) * 1e6 for r in rows], w, label=label, hatch=None if i == 0 else "//")
    a2.set_xticks(xs + w * (len(series) - 1) / 2)
    a2.set_xticklabels(names, rotation=30)
    a2.set_yscale("log")
    a2.set_ylabel("latency per inference, us")
    a2.set_title("latency: host measured, devices ESTIMATED")
    a2.legend(fontsize=7)
    fig.suptitle("grpo-edge bench: %s (%s)" % (doc["task"], doc["arch"]))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
