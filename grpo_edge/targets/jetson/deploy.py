"""deploy(source, profile, out_dir, options) -> Report for jetson-nano and jetson-orin-nano.

    from grpo_edge.targets.jetson import deploy
    report = deploy("runs/cartpole/best.pt", "jetson-nano", "out/nano", {"precision": "int8"})

options: precision fp32|fp16|int8 (default fp16); trt_version (default: the profile's runtime line);
calibration (array, {input: array}, or .npy/.npz path; default: the checkpoint's task); calib_samples
(256); calib_method minmax|percentile; cache_trt_version (default: the device's TensorRT if 8.x, else 8.2.1); max_batch (8); dims {symbolic dim: [min, opt, max]};
workspace_mb (256); evaluate (score simulated engines with the task metric, default True);
build (build and time engines when tensorrt + CUDA are present, default True).
"""
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError
from grpo_edge.report import Report, atomic_write_bytes, atomic_write_text
from grpo_edge.targets.contract import check_options, family_profile

OPTIONS = ("precision", "trt_version", "calibration", "calib_samples", "calib_method", "cache_trt_version",
           "max_batch", "dims", "workspace_mb", "evaluate", "build", "min_agreement",
           "min_retention")     # what `deploy --option` takes

PRECISIONS = ("fp32", "fp16", "int8")


def _trt_version(profile, options) -> str:
    v = options.get("trt_version")
    if not v:
        m = re.search(r"TensorRT (\d+(?:\.\d+)+)", str(profile.get("runtime", "")))
        if not m:
            raise TargetError("profile %s names no TensorRT version; pass options trt_version" % profile["name"])
        v = m.group(1)
    if not re.match(r"^\d+\.\d+(\.\d+)*$", str(v)) or int(str(v).split(".")[0]) not in (8, 10):
        raise TargetError("TensorRT version must be 8.x or 10.x (e.g. 8.2.1), got %r" % (v,))
    return str(v)


def _export(source, out: Path, opset: int):
    """(list of (name, onnx path), checkpoint state or None, model or None, export info)."""
    src = Path(source)
    if not src.exists():
        raise TargetError("source not found: %s" % src)
    if src.suffix == ".onnx":
        from grpo_edge.export.onnx_utils import load_onnx
        model = load_onnx(src)
        try:
            import onnxslim
            model, tool = onnxslim.slim(model), "onnxslim"
        except Exception as e:  # simplifier missing or failed: keep the given graph
            tool = "none (%s)" % type(e).__name__
        atomic_write_bytes(out / "model.onnx", model.SerializeToString())
        return [("model", out / "model.onnx")], None, None, {"simplified": tool, "source": "onnx"}
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.export.torch2onnx import torch2onnx
    model, state = load_policy(str(src))
    info = torch2onnx(model, out / "model.onnx", batch_size=1, opset=opset)
    graphs = [(k, Path(v["path"])) for k, v in info["files"].items()]
    return graphs, state, model, info


def text_dims(c) -> dict:
    """A text model's dynamic lengths as its decode loop uses them (c: its text config, or None), for the
    optimisation profile: micro-gpt's cache (past_len) from 0 to the last step of a prompt plus its answer;
    tiny-transformer's source at the prompt length, its decoder prefix (tgt_len) from BOS to BOS + the
    answer. {} for other models."""
    if c is None:
        return {}
    if c["arch"] == "micro-gpt":
        last = min(c["max_len"], c["input_len"] + c["max_new_tokens"]) - 1
        return {"past_len": [0, min(c["input_len"], last), last]}
    longest = min(c["max_len"], c["max_new_tokens"] + 1)
    return {"src_len": [c["input_len"]] * 3, "tgt_len": [1, max(1, longest // 2), longest]}


def _shape_ranges(spec_inputs, options):
    """TensorRT min/opt/max shapes: a dim named like 'batch' -> 1/1/max_batch; other symbolic dims from
    options['dims'] or 1/8/64; static dims fixed."""
    max_batch = int(options.get("max_batch", 8))
    dims = options.get("dims", {})
    out = []
    for spec in spec_inputs:
        lo, opt, hi = [], [], []
        for d in spec["shape"]:
            if isinstance(d, int) and d > 0:
                r = (d, d, d)
            elif "batch" in str(d).lower():
                r = (1, 1, max_batch)
            elif str(d) in dims:
                r = tuple(dims[str(d)])
            else:
                r = (1, 8, 64)
            lo.append(int(r[0]))
            opt.append(int(r[1]))
            hi.append(int(r[2]))
        axis = next((k for k, d in enumerate(spec["shape"]) if "batch" in str(d).lower()), 0)
        out.append({"name": spec["name"], "dtype": spec["dtype"], "min": lo, "opt": opt, "max": hi, "batch_axis": axis})
    return out


def _feeds(arr_by_input: dict, batch: int, ranges):
    """Split {input: array} into feeds of `batch` along each input's batch axis."""
    axes = {r["name"]: r.get("batch_axis", 0) for r in ranges}
    n = min(v.shape[axes[k]] for k, v in arr_by_input.items())
    return [{k: np.ascontiguousarray(np.take(v, range(i, min(i + batch, n)), axis=axes[k]))
             for k, v in arr_by_input.items()} for i in range(0, n, batch)]


def _random_inputs(ranges, n, vocab, rng):
    """Random inputs at the 'opt' shape with n along the batch axis: floats N(0, 1), integers (token ids,
    positions) in [0, min(vocab, 8))."""
    out = {}
    for r in ranges:
        shape = list(r["opt"])
        shape[r["batch_axis"]] = n
        if r["dtype"].startswith("float"):
            out[r["name"]] = rng.standard_normal(shape).astype(r["dtype"])
        else:
            out[r["name"]] = rng.integers(0, max(min(int(vocab), 8), 2), size=shape).astype(r["dtype"])
    return out


def _calibration(options, ranges, task, model, n):
    """{input name: array (n, ...)} from options['calibration'] (array, dict or .npy/.npz read by
    grpo_edge.export.calibration.load_calibration) or from the checkpoint's task (driven by its policy)."""
    from grpo_edge.export.calibration import load_calibration, task_inputs
    c = options.get("calibration")
    names = [r["name"] for r in ranges]
    if isinstance(c, (str, Path)):
        from grpo_edge.targets.contract import check_calibration
        src, c = c, load_calibration(c)
        check_calibration(c, src)
    if c is None and task is not None:
        c = task_inputs(task, n, policy=model)
    if c is None:
        return None
    if not isinstance(c, dict):
        c = {names[0]: np.asarray(c)}
    if len(c) == 1 and len(names) == 1:         # one array ("inputs" in a saved set) for a one-input graph
        c = {names[0]: next(iter(c.values()))}
    missing = [k for k in names if k not in c]
    if missing:
        raise TargetError("calibration data has no values for input(s) %s (have %s)" % (", ".join(missing), ", ".join(c)))
    return {k: np.take(np.asarray(c[k]), range(min(n, np.asarray(c[k]).shape[r["batch_axis"]])),
                       axis=r["batch_axis"]).astype(r["dtype"]) for k, r in zip(names, ranges)}


def _task(state):
    """The checkpoint's task, or None when it cannot be rebuilt here (optional package missing...)."""
    if not state:
        return None
    from grpo_edge.errors import CheckpointError
    from grpo_edge.tasks import task_from_state
    try:
        return task_from_state(state)
    except CheckpointError:
        return None


def _kept(ref: float, sim: float) -> float:
    """Fraction of the fp32 metric a simulation keeps (works for negative returns too)."""
    if ref == sim:
        return 1.0
    if ref > 0:
        return sim / ref
    return ref / sim if sim < 0 else 0.0


def deploy(source, profile, out_dir, options=None) -> Report:
    """Write everything a Jetson needs to build and run `source` (checkpoint or ONNX) with TensorRT,
    plus report.json/.md; returns the Report. Raises TargetError on an op TensorRT cannot import."""
    plan = _plan(profile, options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rep = Report(title="Jetson deploy: %s" % Path(source).name, target=plan.profile["name"])
    graphs, state, model, export_info = _export(source, out, plan.opset)
    text = _text_config(state)
    plan.options["dims"] = dict(text_dims(text), **(plan.options.get("dims") or {}))
    task = _task(state)
    rng = np.random.default_rng(0)
    vocab = (state or {}).get("model_config", {}).get("vocab_size", 2)
    done = [_deploy_graph(gname, path, len(graphs), plan, task, model, vocab, rng, out, rep)
            for gname, path in graphs]
    op_rows = [r for g in done for r in g.op_rows]
    _fail_on_op_problems([p for g in done for p in g.problems], op_rows, out, rep)
    rep.sections["op check"] = op_rows
    rep.sections["numerics (host simulation vs fp32 ONNX)"] = [r for g in done for r in g.numerics]
    # Control and image (bandit) tasks score a policy by calling it; text tasks need generate().
    if (task is not None and getattr(task, "kind", "") in ("control", "bandit") and len(graphs) == 1
            and plan.options.get("evaluate", True) and plan.precision != "fp32"):
        rows = _metric_rows(task, done[0].sims)
        rep.sections["task metric (host simulation)"] = rows
        rep.warnings += ["the %s engine keeps %.3f of the fp32 %s (%g vs %g; goal 0.99): check it on the device, "
                         "or deploy at another --precision" % (r["engine"], r["kept_vs_fp32"], task.metric_name,
                                                                r[task.metric_name], rows[0][task.metric_name])
                         for r in rows if not r["meets_99pct"]]
    rep.gate = _quality_gate(plan, done, rep)
    notes = [n for g in done for n in g.notes] + _precision_notes(plan)
    if text is not None and task is not None and model is not None:      # the decode loop's golden prompts
        from grpo_edge.targets.rpi_text import write_golden_prompts
        write_golden_prompts(model, task, text, out, 32)
    cfg = _write_config(source, graphs[0][1], [g.entry for g in done], plan, notes, out, text, rep.gate)
    _describe(export_info, notes, out, rep)
    if plan.options.get("build", True):
        _build_and_measure(out, cfg, rep)
    rep.write(out)
    return rep


@dataclass
class _Plan:
    """What the options and the profile settle before any work."""
    profile: dict
    options: dict
    precision: str
    trt_version: str
    trt_major: int
    cache_trt: str
    opset: int


def _plan(profile, options) -> _Plan:
    """Check the profile (family jetson), the options and the precision; pick the TensorRT versions."""
    options = dict(options or {})
    profile = family_profile(profile, "jetson", "a Jetson")
    check_options(profile, options, OPTIONS)
    precision = options.get("precision", "fp16")
    if precision not in PRECISIONS:
        raise TargetError("precision must be one of %s, got %r" % ("|".join(PRECISIONS), precision))
    trt_version = _trt_version(profile, options)
    trt_major = int(trt_version.split(".")[0])
    # The cache serves TensorRT 8 (implicit int8); on a TensorRT 10 profile it is written for 8.2.1 unless told.
    cache_trt = str(options.get("cache_trt_version") or (trt_version if trt_major < 10 else "8.2.1"))
    opset = 13 if trt_major < 10 else 17   # TensorRT 8.2 documents ops up to opset 13
    return _Plan(profile, options, precision, trt_version, trt_major, cache_trt, opset)


@dataclass
class _GraphDone:
    """One graph's results: its deploy.json entry, op check, numerics and the simulated engines."""
    entry: dict
    op_rows: list
    problems: list
    notes: list
    numerics: list = field(default_factory=list)
    sims: dict = field(default_factory=dict)


def _deploy_graph(gname, path, n_graphs, plan, task, model, vocab, rng, out, rep) -> _GraphDone:
    """Check one graph's ops, write its sample, simulate its engines (fp16 / int8), estimate it."""
    import onnx
    from grpo_edge.targets.jetson import opcheck
    from grpo_edge.export.onnx_utils import io_specs, opset_of
    m = onnx.load(str(path))
    check = opcheck.check_ops(m, plan.trt_version)
    ranges = _shape_ranges(io_specs(m, "input"), plan.options)
    calib = _graph_calibration(n_graphs, plan, ranges, task, model)
    evalx = calib if calib is not None else _random_inputs(ranges, 64, vocab, rng)
    if calib is not None and plan.precision == "int8":         # the gate measures on inputs not calibrated on
        calib, evalx = _hold_out(calib, ranges, plan)
    batch = 1 if any(r["max"][r["batch_axis"]] == 1 for r in ranges) else 32
    entry = {"name": gname, "onnx": path.name, "opset": opset_of(m), "inputs": ranges,
             "outputs": [o["name"] for o in io_specs(m, "output")],
             "engine": "%s.{precision}.engine" % path.stem, "sample": "sample.%s.npz" % gname}
    done = _GraphDone(entry, [dict(r, graph=gname) for r in check["ops"]], list(check["problems"]),
                      list(check["warnings"]))
    feeds = _feeds(evalx, batch, ranges)
    done.sims["fp32"], ref = _write_sample(m, evalx, feeds, ranges, out / ("sample.%s.npz" % gname))
    row = {"graph": gname, "inputs": "calibration/task data" if calib is not None else "random",
           "batches": len(feeds)}
    if plan.precision == "fp16":
        _simulate_fp16(m, ref, feeds, row, done)
    if plan.precision == "int8":
        if calib is None:
            raise TargetError("int8 needs calibration data for graph %s: pass options calibration "
                              "(array, {input: array} or .npy/.npz)" % gname)
        _quantize_int8(m, path, _feeds(calib, batch, ranges), len(next(iter(calib.values()))), ref, feeds, row,
                       plan, out, rep, done)
    _estimate_graph(m, gname, n_graphs, plan, rep, done)
    return done


def _graph_calibration(n_graphs, plan, ranges, task, model):
    """Calibration inputs for one graph, or None. The task's data covers single-input graphs; fp16/fp32
    fall back to random inputs when there is none."""
    n_cal = int(plan.options.get("calib_samples", 256))
    if plan.precision == "int8":                 # and the inputs the gate holds out of them (_hold_out)
        from grpo_edge.targets.gate import with_held_out
        n_cal = with_held_out(n_cal)
    try:
        return _calibration(plan.options, ranges, task, model, n_cal) if n_graphs == 1 else None
    except TargetError:
        if plan.precision == "int8":
            raise
        return None


def _hold_out(calib, ranges, plan) -> tuple:
    """{input: array} -> (what calibrates, what is held out to measure the int8 engines on), split along
    each input's batch axis by targets/gate.py:hold_out (a small set with --min-agreement 0: all of it both)."""
    from grpo_edge.targets import gate
    axes = {r["name"]: r["batch_axis"] for r in ranges}
    n = min(v.shape[axes[k]] for k, v in calib.items())
    keep, held = gate.hold_out(n, gate.check_threshold("min_agreement", plan.options.get(
        "min_agreement", gate.MIN_AGREEMENT)), _calibration_name(plan.options.get("calibration")))
    if held is None:
        return calib, calib
    return ({k: np.take(v, keep, axis=axes[k]) for k, v in calib.items()},
            {k: np.take(v, held, axis=axes[k]) for k, v in calib.items()})


def _calibration_name(c) -> str:
    """How a one-line error names the calibration set: its file, else what it is."""
    if isinstance(c, (str, Path)):
        return str(c)
    return "(the task's inputs)" if c is None else "(given as an array)"


def _write_sample(m, evalx, feeds, ranges, path):
    """sample.*.npz: a check batch ("in:"/"ref:", as large as the engine allows, up to 8) and one batch-1
    input set for timing ("bench:"); references from the fp32 ONNX -> (fp32 session, its outputs on feeds)."""
    from grpo_edge.targets.jetson import simulate
    ref_sess = simulate.session(m)
    ref = simulate.run_all(ref_sess, feeds)
    check_feed = _feeds(evalx, min([8] + [r["max"][r["batch_axis"]] for r in ranges]), ranges)[0]
    sample = {"in:" + k: v for k, v in check_feed.items()}
    sample.update({"bench:" + k: v for k, v in _feeds(check_feed, 1, ranges)[0].items()})
    for o, v in zip(ref_sess.get_outputs(), ref_sess.run(None, check_feed)):
        sample["ref:" + o.name] = v
    _save_npz(path, sample)
    return ref_sess, ref


def _simulate_fp16(m, ref, feeds, row, done) -> None:
    """The fp16 engine simulated by onnxruntime in float16, compared with the fp32 outputs."""
    from grpo_edge.targets.jetson import simulate
    done.sims["fp16"] = simulate.session(simulate.fp16_model(m))
    done.numerics.append(dict(row, engine="fp16 (onnxruntime float16)",
                              **simulate.compare(ref, simulate.run_all(done.sims["fp16"], feeds))))


def _quantize_int8(m, path, calib_feeds, n_calib, ref, feeds, row, plan, out, rep, done) -> None:
    """One calibration for both int8 files: the TensorRT 8 calibration cache and the Q/DQ ONNX model; both
    simulated on the host from the files as written."""
    import onnx
    from grpo_edge.targets.jetson import calib_cache, opcheck, quantize, simulate
    method = plan.options.get("calib_method", "minmax")
    amax = quantize.collect_amax(m, calib_feeds, method=method)
    cache_ver = calib_cache.trt_version_int(plan.cache_trt)
    cache_path = out / ("%s.calib.cache" % path.stem)
    calib_cache.write_calib_cache(cache_path, quantize.scales_from_amax(amax), cache_ver)
    cache = calib_cache.read_calib_cache(cache_path)   # the simulation uses the file as written
    qdq_path = out / ("%s.int8.qdq.onnx" % path.stem)
    quantize.qdq_model(path, qdq_path, calib_feeds, cache.scales)
    qcheck = opcheck.check_ops(onnx.load(str(qdq_path)), plan.trt_version)
    done.problems += ["Q/DQ model: " + p for p in qcheck["problems"]]
    done.entry.update(onnx_qdq=qdq_path.name, calib_cache=cache_path.name)
    done.sims["int8-cache"] = simulate.session(quantize.fake_quant_model(m, cache.scales))
    done.sims["int8-qdq"] = simulate.session(str(qdq_path))
    for key, label in (("int8-cache", "int8, calibration cache (TensorRT 8)"),
                       ("int8-qdq", "int8, Q/DQ ONNX (TensorRT >= 10.1)")):
        this = " <- this device" if (key == "int8-qdq") == (plan.trt_major >= 10) else ""
        done.numerics.append(dict(row, engine=label + this,
                                  **simulate.compare(ref, simulate.run_all(done.sims[key], feeds))))
    rep.sections.setdefault("calibration", []).append(
        {"graph": row["graph"], "tensors": len(cache.scales), "method": method,
         "samples": n_calib, "cache": cache_path.name, "header": "TRT-%d-%s" % (cache.version, cache.algorithm)})


def _estimate_graph(m, gname, n_graphs, plan, rep, done) -> None:
    """Latency and energy of one graph on the device (estimates from the profile), and its MACs."""
    from grpo_edge.targets.jetson import estimate
    from grpo_edge.export.onnx_utils import count_macs
    macs = count_macs(m, batch=1)
    est = estimate.estimate(m, plan.profile, plan.precision, macs)
    done.entry["estimate"] = est["parts"]
    key = "" if n_graphs == 1 else "." + gname
    rep.add("latency%s" % key, est["latency_s"] * 1e3, "ms", "estimated", est["latency_source"])
    rep.add("energy_per_inference%s" % key, est["energy_j"] * 1e3, "mJ", "estimated", est["energy_source"])
    rep.add("macs%s" % key, macs, "MAC", "exact", "count_macs on the ONNX graph, batch 1")


def _fail_on_op_problems(problems, op_rows, out, rep) -> None:
    """An op TensorRT cannot import: write the report (with the op table) and fail naming it."""
    if not problems:
        return
    rep.sections["op check"] = op_rows
    rep.notes += problems
    rep.write(out)
    raise TargetError("%s (and %d more; see %s)" % (problems[0], len(problems) - 1, out / "report.md")
                      if len(problems) > 1 else "%s (see %s)" % (problems[0], out / "report.md"))


def _quality_gate(plan, done, rep) -> dict:
    """The gate (targets/gate.py) on the engine this device builds, simulated on the host: its argmax
    agreement with fp32 (outputs with several columns) or its output agreement (every output within 1% of
    the fp32 output's range), worst graph first, and for control tasks the return it keeps."""
    from grpo_edge.targets import gate
    threshold = gate.check_threshold("min_agreement", plan.options.get("min_agreement", gate.MIN_AGREEMENT))
    min_ret = gate.check_threshold("min_retention", plan.options.get("min_retention", gate.MIN_RETENTION))
    if plan.precision == "fp32":
        return gate.decide("agreement with fp32", None, threshold, 0, "inputs: an fp32 engine runs the model as it "
                           "is", chosen="fp32")
    mine = [r for r in rep.sections.get("numerics (host simulation vs fp32 ONNX)", [])
            if plan.precision == "fp16" or r["engine"].endswith("<- this device")]
    values = [r.get("argmax_agreement", r.get("output_agreement")) for r in mine]
    values = [v for v in values if v is not None]
    key = "fp16" if plan.precision == "fp16" else ("int8-qdq" if plan.trt_major >= 10 else "int8-cache")
    rows = rep.sections.get("task metric (host simulation)") or []
    kept = next((r["kept_vs_fp32"] for r in rows if r["engine"] == key), None)
    n = sum(r.get("samples", 0) for r in mine[:1])
    value = min(values) if values else None
    on = ("%s inputs through the simulated %s engine (onnxruntime on the host)"
          % ("held-out calibration / task" if plan.precision == "int8" else "calibration / task", key))
    return gate.decide("agreement", value, threshold, n, on, [{"form": "%s engine" % plan.precision, "value": value},
                       {"form": " / ".join(p for p in PRECISIONS if p != plan.precision), "note": "not tried (--precision chooses)"}],
                       plan.precision, kept, min_ret)


def _precision_notes(plan) -> list:
    """What the README and the report say about the chosen precision on this device."""
    notes = []
    if plan.precision == "int8" and plan.profile.get("gpu_fast_int8") is False:
        notes.append("Jetson Nano (Maxwell, sm_53) has no fast int8 (no DP4A / int8 tensor cores): TensorRT "
                     "reports platform_has_fast_int8 False and runs int8-requested layers in fp16/fp32; "
                     "the latency estimate uses the fp16 rate. fp16 is the fast precision on the Nano.")
    if plan.precision == "int8":
        notes.append("One calibration for both int8 files: our own %s pass over the calibration inputs gives "
                     "amax per tensor; cache scale = amax/127; the Q/DQ model's activation scales are set to the "
                     "same values. The cache header names TensorRT %s and IInt8EntropyCalibrator2 (the class "
                     "trtexec and build_engine.py read it with), not the range method."
                     % (plan.options.get("calib_method", "minmax"), plan.cache_trt))
    return notes


def _text_config(state):
    """tokenizer.json's settings for a text checkpoint (the kit's decode loop), else None."""
    if (state or {}).get("arch") not in ("micro-gpt", "tiny-transformer"):
        return None
    from grpo_edge.export.decode_calibration import text_config
    return text_config(state)


def _write_config(source, first_graph, cfg_graphs, plan, notes, out, text=None, gate=None) -> dict:
    """deploy.json and the scripts that build and run the engines on the device (a text model: its
    tokenizer and decode loop too) -> the config."""
    from grpo_edge.targets.jetson.scripts import write_scripts
    profile = plan.profile
    stamp = "generated by grpo-edge deploy (target %s, precision %s, model sha256 %s); do not edit" % (
        profile["name"], plan.precision, hashlib.sha256(first_graph.read_bytes()).hexdigest()[:12])
    cfg = {"target": profile["name"], "display_name": profile.get("display_name", profile["name"]),
           "runtime": profile.get("runtime", ""), "trt_version": plan.trt_version,
           "cache_trt_version": plan.cache_trt, "precision": plan.precision,
           "model": Path(source).name, "workspace_mb": int(plan.options.get("workspace_mb", 256)),
           "source": os.path.relpath(str(Path(source).resolve()), str(Path(out).resolve())),
           "graphs": cfg_graphs}
    if gate is not None:
        cfg["quality_gate"] = {k: gate[k] for k in ("passed", "line", "banner")}
    if text is not None:
        from grpo_edge import runtime
        cfg["text"] = {"arch": text["arch"], "tokenizer": "tokenizer.json", "example_prompt": text.get("example_prompt")}
        if not (out / "tokenizer.json").exists():
            atomic_write_text(out / "tokenizer.json", json.dumps(text, indent=2, ensure_ascii=False))
        runtime.ship(out, {"textgen.py": "textgen", "char_tokenizer.py": "char_tokenizer", "ort_session.py": "ort_session"})
    atomic_write_text(out / "deploy.json", json.dumps(cfg, indent=2))
    write_scripts(out, cfg, stamp, notes)
    return cfg


def _describe(export_info, notes, out, rep) -> None:
    """The report's file list, export details and notes on how each figure was obtained."""
    rep.sections["files"] = sorted(p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")
                                   and not p.name.startswith(("report.", "results.")))
    rep.sections["export"] = {k: v for k, v in export_info.items() if k != "files"}
    rep.notes += notes + [
        "Numerics are simulated on the host with onnxruntime (graph optimizations off); latency and energy are "
        "estimates from the profile. Measure on the device with run_engine.py (results.*.json).",
        "Reference outputs in sample.*.npz come from the fp32 ONNX, which torch2onnx checked against the "
        "checkpoint (max_abs_diff in the export section)."]


def _build_and_measure(out, cfg, rep) -> None:
    """Build and time the engines when tensorrt + CUDA are present (device.py); adds measured figures."""
    from grpo_edge.targets.jetson.device import build_and_measure
    measured = build_and_measure(out, cfg)
    if measured is not None:
        rep.sections["on-device"] = measured["rows"]
        for k, f in measured["figures"].items():
            rep.add(k, *f)


def _metric_rows(task, gsims):
    """The task's own metric for the fp32 ONNX and each simulated engine (control and image tasks)."""
    from grpo_edge.targets.jetson.simulate import onnx_policy
    rows = []
    base = None
    for key, sess in gsims.items():
        res = task.evaluate(onnx_policy(sess))
        val = float(res[task.metric_name])
        if key == "fp32":
            base = val
        rows.append({"engine": key, task.metric_name: val, "kept_vs_fp32": _kept(base, val),
                     "meets_99pct": _kept(base, val) >= 0.99})
    return rows


def _save_npz(path, arrays):
    import io
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())
