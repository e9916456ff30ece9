"""Raspberry Pi target (rpi4, rpi5): a folder to copy to the Pi, checked on this host first.

    from grpo_edge.targets.rpi import deploy
    report = deploy("runs/cartpole/best.pt", "rpi4", "out/rpi4", {})

DIR gets model.onnx, model.int8.onnx, runner.py (onnxruntime + numpy only), requirements.txt,
deploy.json (which model was chosen and why), sample inputs/outputs, report.json / report.md.
On the host we run the shipped runner itself (the simulation), measure host latency, score fp32 and
int8 in the task's own metric, pick fp32 or int8 by those measurements, and estimate device latency and
energy from the profile (labelled as estimates).
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grpo_edge import runtime
from grpo_edge.errors import TargetError
from grpo_edge.targets.contract import check_calibration, check_options, family_profile
from grpo_edge.targets.pi_folder import choose_model, pi_gate, run_runner
from grpo_edge.report import Report, atomic_write_text

DEFAULTS = {"calibration": None, "calibration_samples": 512, "method": "minmax", "per_channel": True,
            "runs": 1000, "warmup": 100, "eval_n": 0, "min_retention": 0.99, "tolerance": 1e-4, "task": None,
            "seed": 0, "min_agreement": 0.99, "text_runs": 100, "text_warmup": 10, "op_types": None}
OPTIONS = tuple(DEFAULTS)                           # what `deploy --option` takes (checked by targets.contract)
TEXT_ARCHS = ("micro-gpt", "tiny-transformer")     # generation models: deployed by rpi_text (runner decodes text)
RUNTIME = {"runner.py": "pi_runner", "ort_session.py": "ort_session"}   # grpo_edge/runtime modules shipped as-is


def deploy(source, profile, out_dir, options=None) -> Report:
    """Build and check a Raspberry Pi deploy folder from a checkpoint (.pt) or an ONNX file.

    options (all optional): calibration (.npz/.npy; default: made from the checkpoint's task, or the
    built-in set), calibration_samples, method (minmax|entropy|percentile), per_channel, runs / warmup
    (latency), eval_n (task-metric episodes/samples, 0 = task default), min_retention (int8 must keep this
    fraction of the fp32 metric to be chosen), tolerance (fp32 artifact vs torch, max |diff|), task (task
    name for a plain ONNX source), seed. Text models (micro-gpt, tiny-transformer checkpoints; see
    rpi_text.py): min_agreement (runner vs torch greedy completions), text_runs / text_warmup (completions
    timed), op_types (ops int8 quantizes; default MatMul/Gemm for text, every op otherwise).
    """
    prof = family_profile(profile, "rpi", "a Raspberry Pi")
    check_options(prof, options or {}, DEFAULTS)
    opts = dict(DEFAULTS, **(options or {}))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rep = Report(title="grpo-edge deploy: %s" % prof.get("display_name", prof["name"]), target=prof["name"])
    source = Path(source)

    model, task, state = _load_source(source, opts, rep)
    if state is not None and state["arch"] in TEXT_ARCHS:
        from grpo_edge.targets.rpi_text import deploy_text
        return _finish(deploy_text(model, task, state, source, prof, out, opts, rep), out)
    art = _export(source, model, state, out, rep)
    calib, calib_src = _calibration(source, opts, task, model, art.inputs)
    calib, held = _hold_out(calib, calib_src, opts)
    qinfo = _quantize(art, calib, calib_src, opts, rep)
    sample = _write_folder(out, held)
    sim = _simulate(out, model, sample, art, opts, rep)
    rep.sections["simulation"] = sim
    lat = _measure_latency(out, art, opts, rep)
    keep = _task_metrics(task, model, art, opts["eval_n"], rep)
    _choose(out, keep, lat, art, prof, source, opts, rep, extra={
        "input": _input_info(art, state, task), "int8_check_agreement": sim["int8"]["action_agreement"],
        "action_range": _action_range(model),
        "task": (state or {}).get("task") or getattr(task, "name", None)})
    _estimate(art, prof, rep)
    rep.sections["quantization"] = {k: qinfo[k] for k in ("method", "per_channel", "reduce_range", "num_samples",
                                                         "format", "errors")}
    rep.notes += [
        "Device figures are ESTIMATES: latency = call_overhead_s + MACs / effective MAC rate of one core; "
        "energy = active_power_w x estimated latency (board power); every input figure and its source is in "
        "targets/%s.yaml. On the Pi, `python3 runner.py --bench` measures instead%s; "
        "`python3 runner.py --choose` re-picks fp32/int8 by latency measured there." % (
            prof["name"], " and reads power with vcgencmd pmic_read_adc" if prof["name"] == "rpi5" else
            " (the Pi 4 has no power sensor: use a USB meter)"),
    ]
    return _finish(rep, out)


@dataclass
class _Artifacts:
    """The fp32 model in the folder (and where its int8 version goes), its graph and its input specs."""
    fp32: Path
    int8: Path
    graph: Any
    inputs: list


def _export(source, model, state, out, rep) -> _Artifacts:
    """model.onnx from the checkpoint (torch2onnx, parity checked) or a copy of the given ONNX file."""
    from grpo_edge.export.onnx_utils import copy_onnx, io_specs, load_onnx
    fp32_path, int8_path = out / "model.onnx", out / "model.int8.onnx"
    if model is not None:
        from grpo_edge.export.torch2onnx import torch2onnx
        info = torch2onnx(model, fp32_path)
        if len(info["files"]) > 1:
            raise TargetError("%s: %s exports %d runtime functions (%s); the rpi runner runs single-function "
                              "models only" % (source, state["arch"], len(info["files"]), ", ".join(info["files"])))
        rep.add("export_max_abs_diff", info["max_abs_diff"], "", "measured-host",
                "torch2onnx parity check on random inputs, batch 1 and 3")
    else:
        names = {i["name"] for i in io_specs(load_onnx(source), "input")}
        if names & {"past_keys", "tgt_prefix", "memory"}:
            raise TargetError("%s is a text model's decode step: deploy it from its checkpoint (the runner needs "
                              "the tokenizer and the decoding loop)" % source)
        copy_onnx(source, fp32_path)
    m32 = load_onnx(fp32_path)
    return _Artifacts(fp32_path, int8_path, m32, io_specs(m32, "input"))


def _calibration(source, opts, task, model, inputs):
    """-> ({input name: array}, where it came from): the user's file > the task's inputs (states the policy
    visits) > the shipped set for options['task']."""
    from grpo_edge.export.calibration import builtin_calibration, load_calibration, task_inputs
    if opts["calibration"]:
        calib, calib_src = load_calibration(opts["calibration"]), str(opts["calibration"])
        check_calibration(calib, calib_src)
    elif task is not None:
        from grpo_edge.targets.gate import with_held_out          # and the inputs the gate holds out
        n = int(opts["calibration_samples"])
        x = task_inputs(task, with_held_out(n), policy=model)
        calib = x if isinstance(x, dict) else {inputs[0]["name"]: x.astype(np.float32)}
        calib_src = "%s.calibration_inputs(%d), %s (and %d more held out for the quality gate)" % (
            type(task).__name__, n, "states the checkpoint policy visits" if model is not None else "no policy",
            with_held_out(n) - n)
    elif opts["task"] and builtin_calibration(opts["task"]):
        calib_src = str(builtin_calibration(opts["task"]))
        calib = load_calibration(calib_src)
    else:
        raise TargetError("%s: no calibration data: give --calibration (an .npz / .npy of model inputs) or "
                          "--option task=NAME (its states are the calibration set)" % source)
    if len(inputs) == 1 and len(calib) == 1:
        calib = {inputs[0]["name"]: next(iter(calib.values()))}
    return calib, calib_src


def _quantize(art, calib, calib_src, opts, rep) -> dict:
    """model.int8.onnx (onnx2int8); its calibration and warnings go to the report's notes."""
    from grpo_edge.export.onnx2int8 import onnx2int8
    qinfo = onnx2int8(art.fp32, calib, art.int8, method=opts["method"], per_channel=opts["per_channel"],
                      op_types=opts["op_types"])
    rep.notes += ["calibration: %s, method %s, %d samples; %s" % (calib_src, qinfo["method"], qinfo["num_samples"],
                                                                   qinfo["format"])] + qinfo["warnings"]
    return qinfo


def _hold_out(calib, calib_src, opts) -> tuple:
    """-> (what calibrates, the inputs held out of it): the quality gate (targets/gate.py) measures the runner
    on inputs the quantizer has not seen. With --min-agreement 0 and a small set, all calibrate and the
    first 64 are the sample."""
    from grpo_edge.targets import gate
    n = min(len(v) for v in calib.values())
    keep, held = gate.hold_out(n, gate.check_threshold("min_agreement", opts["min_agreement"]), calib_src)
    if held is None:
        return calib, {k: v[:64] for k, v in calib.items()}
    return {k: v[keep] for k, v in calib.items()}, {k: v[held] for k, v in calib.items()}


def _write_folder(out, sample) -> dict:
    """The folder a user copies to the Pi: runtime files, requirements, the sample inputs (held out of the
    calibration); -> the sample."""
    runtime.ship(out, RUNTIME)
    atomic_write_text(out / "requirements.txt", "onnxruntime>=1.16\nnumpy\n")
    np.save(str(out / "sample_inputs.npy"), next(iter(sample.values())))
    return sample


def _simulate(out, model, sample, art, opts, rep) -> dict:
    """The shipped runner on this host reproduces the checkpoint's outputs (fp32 within tolerance)."""
    ref = _reference_outputs(model, sample, art.fp32)
    np.save(str(out / "expected_outputs.npy"), ref)
    from grpo_edge.core.distributions import action_range as range_of
    from grpo_edge.export.evaluate import agreement
    action_range = range_of(model)         # a continuous policy: actions within 1% of their range agree
    how = ("argmax of" if action_range is None else "actions within 1% of the action range:")
    sim = {}
    for tag, path, reference in (("fp32", art.fp32, False), ("int8", art.int8, True)):
        got = np.asarray(run_runner(out, ["--model", path.name, "--input", "sample_inputs.npy", "--json"]
                                     + (["--reference"] if reference else []))["outputs"], dtype=np.float64)
        sim[tag] = {"max_abs_diff": float(np.max(np.abs(got - ref))),
                    "action_agreement": agreement(got, ref, action_range) if ref.ndim >= 2 else None}
    ref_src = "torch checkpoint" if model is not None else "fp32 ONNX in onnxruntime"
    n_s = len(ref)
    rep.add("sim_fp32_max_abs_diff", sim["fp32"]["max_abs_diff"], "", "measured-host",
            "runner.py on sample_inputs.npy (%d samples) vs %s; tolerance %.0e" % (n_s, ref_src, opts["tolerance"]))
    rep.add("sim_int8_max_abs_diff", sim["int8"]["max_abs_diff"], "", "measured-host",
            "runner.py --reference (int8 QDQ arithmetic) vs %s, %d samples" % (ref_src, n_s))
    if sim["fp32"]["action_agreement"] is not None:
        rep.add("sim_fp32_action_agreement", sim["fp32"]["action_agreement"], "fraction", "measured-host",
                "%s runner outputs vs %s" % (how, ref_src))
        rep.add("sim_int8_action_agreement", sim["int8"]["action_agreement"], "fraction", "measured-host",
                "%s runner --reference outputs vs %s" % (how, ref_src))
    if sim["fp32"]["max_abs_diff"] > opts["tolerance"]:
        raise TargetError("%s: the fp32 artifact differs from the %s by %.3g (> %.0e)"
                          % (art.fp32, ref_src, sim["fp32"]["max_abs_diff"], opts["tolerance"]))
    return sim


def _measure_latency(out, art, opts, rep) -> dict:
    """Host latency with the shipped runner (ORT optimizations on, as on the device), and file sizes;
    -> {"fp32": median s, "int8": median s}."""
    lat = {}
    for tag, path in (("fp32", art.fp32), ("int8", art.int8)):
        b = run_runner(out, ["--model", path.name, "--bench", "--runs", str(opts["runs"]), "--warmup",
                              str(opts["warmup"]), "--json"])["bench"]
        lat[tag] = b["latency_median_s"]
        rep.add("host_latency_%s_s" % tag, b["latency_median_s"], "s", b["how"],
                "runner.py --bench on %s, onnxruntime %s, 1 thread, %d runs after %d warm-up, median"
                % (b["machine"], b["onnxruntime"], b["runs"], b["warmup"]))
    for tag, path in (("fp32", art.fp32), ("int8", art.int8)):
        rep.add("size_%s_bytes" % tag, path.stat().st_size, "B", "exact", path.name)
    return lat


def _choose(out, keep, lat, art, prof, source, opts, rep, extra=None) -> None:
    """fp32 or int8 by the measurements (choose_model); written to deploy.json for the runner, with what
    the runner checks inputs and --check against (extra: input layout and range, int8's agreement)."""
    from grpo_edge.export.onnx_utils import io_specs
    sim = rep.sections["simulation"]
    agree = {t: sim[t]["action_agreement"] if sim[t]["action_agreement"] is not None else
             float(sim[t]["max_abs_diff"] <= opts["tolerance"]) for t in ("fp32", "int8")}
    chosen, why = choose_model(keep, lat, opts["min_retention"], agree["int8"], opts["min_agreement"])
    rep.sections["choice"] = {"chosen": chosen, "why": why}
    rep.gate = pi_gate(chosen, agree, len(np.load(str(out / "sample_inputs.npy"))), "sample inputs "
                       "(sample_inputs.npy) vs the %s" % ("torch checkpoint" if source.suffix != ".onnx" else
                                                          "fp32 ONNX model"), keep, opts, "agreement")
    deploy_cfg = {"chosen": chosen, "why": why, "int8_allowed": bool(keep is not None and keep >= opts["min_retention"]),
                  "inputs": art.inputs, "outputs": io_specs(art.graph, "output"),
                  "target": prof["name"], "source": _relative(source, out), "tolerance_fp32": opts["tolerance"]}
    deploy_cfg.update(extra or {})
    atomic_write_text(out / "deploy.json", json.dumps(deploy_cfg, indent=2))


def _action_range(model):
    """A continuous policy's action range, as _simulate's agreement used it (None: argmax, or a single
    output's own range): runner.py --check judges int8's agreement by the same rule."""
    from grpo_edge.core.distributions import action_range
    r = action_range(model)
    return None if r is None else [float(v) for v in r]


def _relative(source, out) -> str:
    """The source as a path relative to the deploy folder (what the folder's files name it by)."""
    import os
    return os.path.relpath(str(Path(source).resolve()), str(Path(out).resolve()))


def _input_info(art, state, task) -> dict:
    """The model input as the runner takes it: layout, and from the task, the range it was trained on and
    how raw data becomes that (digits: pixels / 16), when the task says."""
    meta = (state or {}).get("task_meta") if state is not None else None
    if not isinstance(meta, dict) and task is not None and hasattr(task, "checkpoint_meta"):
        try:
            meta = task.checkpoint_meta()
        except Exception:  # noqa: BLE001 - a task that cannot describe itself: no range check
            meta = None
    meta = meta if isinstance(meta, dict) else {}
    spec = art.inputs[0] if art.inputs else {}
    return {"layout": spec.get("shape"), "dtype": spec.get("dtype"), "range": meta.get("input_range"),
            "preprocess": meta.get("preprocess")}


def _estimate(art, prof, rep) -> None:
    """Device latency and energy from the profile and the MAC count (estimates, never measurements)."""
    from grpo_edge.export.onnx_utils import count_macs
    from grpo_edge.targets.profiles import estimate_energy, estimate_latency
    macs = count_macs(art.graph, batch=1)
    rep.add("macs_per_inference", macs, "MAC", "exact", "count_macs(model.onnx): MatMul/Gemm/Conv at batch 1")
    for tag in ("fp32", "int8"):
        e = estimate_latency(prof, macs, tag)
        rep.add("device_latency_%s_s" % tag, e["value"], "s", "estimated", e["source"])
        en = estimate_energy(prof, e["value"], "device_latency_%s_s" % tag)
        rep.add("device_energy_%s_j" % tag, en["value"], "J", "estimated", en["source"])


def _finish(rep, out):
    from grpo_edge.targets.pi_folder import write_readme
    write_readme(out, rep)
    rep.notes.append(
        "int8 accuracy is judged with ORT graph optimizations off (the QDQ arithmetic itself): on x86 CPUs "
        "without VNNI, ORT's fused int8 kernels can saturate; metric_onnx_int8_ort_optimized shows this host's "
        "kernels. The Pi's ARM kernels do not use that AVX2 path: confirm with runner.py on the device.")
    rep.write(out)
    for f in out.iterdir():          # atomic writes create 0600 files: the folder is meant to be copied
        if f.is_file():
            f.chmod(0o755 if f.name == "runner.py" else 0o644)
    return rep


_METRIC_HOW = {"torch": "torch checkpoint", "onnx_fp32": "model.onnx in onnxruntime",
               "onnx_int8": "model.int8.onnx, ORT graph optimizations off (QDQ reference arithmetic)",
               "onnx_int8_ort_optimized": "model.int8.onnx, ORT optimizations on (this host's int8 kernels)"}


def _load_source(source, opts, rep):
    """-> (torch model or None, task or None, checkpoint state or None)."""
    from grpo_edge.tasks import task_from_state
    if not source.exists():
        raise TargetError("source not found: %s" % source)
    if source.suffix == ".onnx":
        task = None
        if opts["task"]:
            from grpo_edge.tasks import get_task
            task = get_task(opts["task"], {}, seed=opts["seed"])
        return None, task, None
    from grpo_edge.core.checkpoint import load_policy
    model, state = load_policy(source)
    try:
        task = task_from_state(state, seed=opts["seed"])
    except Exception as e:   # deploy still works; the report says why there is no task metric
        rep.notes.append("no task metric: %s" % str(e).splitlines()[0])
        task = None
    return model, task, state


def _reference_outputs(model, sample, fp32_path):
    if model is not None:
        import torch
        with torch.no_grad():
            args = [torch.as_tensor(v) for v in sample.values()]
            y = model.export_spec(batch_size=1).module(*args)
        y = y[0] if isinstance(y, (tuple, list)) else y
        return y.numpy().astype(np.float64)
    from grpo_edge.export.onnx_utils import fixed_batch, run_in_batches, session
    batch = fixed_batch(fp32_path) or len(next(iter(sample.values())))   # torch.onnx.export fixes it (1) by default
    return run_in_batches(session(fp32_path), sample, batch)[0].astype(np.float64)


def _task_metrics(task, model, art, n, rep):
    """Task metric of torch, fp32 and int8 (reference arithmetic and this CPU's ORT kernels) -> the int8 /
    fp32 retention, or None without a task."""
    if task is None:
        return None
    from grpo_edge.export.evaluate import onnx_policy, retention, task_metric
    metrics = {}
    if model is not None:
        metrics["torch"] = task_metric(task, model, n)
    metrics["onnx_fp32"] = task_metric(task, onnx_policy(art.fp32), n)
    metrics["onnx_int8"] = task_metric(task, onnx_policy(art.int8, reference=True), n)
    metrics["onnx_int8_ort_optimized"] = task_metric(task, onnx_policy(art.int8, reference=False), n)
    for k, v in metrics.items():
        rep.add("metric_%s" % k, v, task.metric_name, "measured-host",
                "%s.evaluate (%s), greedy; %s" % (type(task).__name__, task.metric_name, _METRIC_HOW[k]))
    keep = retention(metrics["onnx_int8"], metrics["onnx_fp32"], getattr(task, "higher_is_better", True))
    rep.add("int8_metric_retention", keep, "fraction", "measured-host", "metric_onnx_int8 / metric_onnx_fp32")
    return keep
