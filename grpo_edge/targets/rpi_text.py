"""Raspberry Pi deploy of text models (micro-gpt, tiny-transformer): the runner decodes greedily from text.

Called by grpo_edge.targets.rpi.deploy for a text checkpoint. DIR gets the decode-step ONNX file(s)
(micro-gpt: model.onnx / model.int8.onnx; tiny-transformer: model[.int8].encoder.onnx and
model[.int8].decoder_step.onnx), runner.py + textgen.py (numpy + onnxruntime), tokenizer.json (chars,
padding, lengths), prompts.txt (held-out prompts) with expected_completions.json (the torch
checkpoint's greedy completions), deploy.json and the report.

Simulation: the shipped runner decodes prompts.txt on this host; its completions must equal torch's
greedy completions (agreement >= min_agreement). int8 is calibrated on decode-step inputs recorded
from decoding with the fp32 ONNX model (grpo_edge.export.decode_calibration) and quantizes only
MatMul/Gemm by default: the attention pad mask adds -1e4, and a quantized Add spreads its 256 int8
levels over that range (measured on zh-en-numbers: exact match 0.75 fp32 -> 0.01 with every op
quantized, 0.76 with MatMul/Gemm only).
"""
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grpo_edge import runtime
from grpo_edge.errors import TargetError
from grpo_edge.report import atomic_write_text
from grpo_edge.targets.pi_folder import choose_model, pi_gate, run_runner

TEXT_OPS = ("MatMul", "Gemm")
_HERE = Path(__file__).resolve().parent
# grpo_edge/runtime modules shipped as-is: the runner, the decoding loop and what they import
TEXT_RUNTIME = {"runner.py": "pi_runner", "textgen.py": "textgen", "char_tokenizer.py": "char_tokenizer",
                "ort_session.py": "ort_session"}


def deploy_text(model, task, state, source, prof, out, opts, rep):
    """Export, calibrate from decoding, quantize, simulate with the runner, measure, choose; returns rep."""
    from grpo_edge.export.decode_calibration import text_config
    if task is None:
        raise TargetError("%s: a text model's deploy needs its task (held-out prompts, calibration prompts), "
                          "and the task could not be rebuilt from the checkpoint" % source)
    cfg = text_config(state)
    files = _export(model, cfg, out, rep)
    held = _write_folder(model, task, cfg, out, opts)
    quant = _quantize(cfg, files, task, out, opts, rep)
    sim, keep = _simulate(out, task, held, opts, rep)
    rep.sections["simulation"] = sim
    lat, benches = _measure_latency(out, files, opts, rep)
    _choose(out, keep, lat, cfg, files, prof, source, opts, rep)
    _estimates(rep, prof, cfg, files["fp32"], benches["fp32"])
    rep.sections["quantization"] = quant
    rep.sections["host_bench"] = benches
    return rep


@dataclass
class _HeldOut:
    """The held-out problems the runner decodes, their prompts and torch's greedy completions of them."""
    problems: list
    prompts: list
    expected: list
    file: str = "prompts.txt"       # prompts.jsonl (one JSON string a line) when a prompt spans lines


def _export(model, cfg, out, rep) -> dict:
    """The decode step(s) as ONNX (torch2onnx, parity checked) -> {"fp32"|"int8": {part: path}}."""
    from grpo_edge.export.torch2onnx import torch2onnx
    from grpo_edge.runtime.textgen import model_files
    model.eval()
    info = torch2onnx(model, out / "model.onnx")
    rep.add("export_max_abs_diff", info["max_abs_diff"], "", "measured-host",
            "torch2onnx parity check of the decode step(s) on random inputs, batch 1 and 3")
    return {tag: model_files(str(out / name), cfg["arch"]) for tag, name in
            (("fp32", "model.onnx"), ("int8", "model.int8.onnx"))}


def _write_folder(model, task, cfg, out, opts) -> _HeldOut:
    """The folder a user copies to the Pi: tokenizer, runtime files, held-out prompts and torch's greedy
    completions of them (what the runner must reproduce)."""
    runtime.ship(out, TEXT_RUNTIME)
    atomic_write_text(out / "requirements.txt", "onnxruntime>=1.16\nnumpy\n")
    held = write_golden_prompts(model, task, cfg, out, opts["eval_n"])
    if "prompt_end" in cfg:                 # a code-fixing model: a broken program to try `--program` on
        atomic_write_text(out / "example_broken.py", task.program_of(held.prompts[0]) + "\n")
    return held


def write_golden_prompts(model, task, cfg, out, n) -> _HeldOut:
    """tokenizer.json (cfg, with an example prompt), prompts.txt (n held-out prompts of the task) and
    expected_completions.json (the checkpoint's greedy completions of them): what a device's decode loop is
    checked against (the Pi folder, the Jetson kit)."""
    from grpo_edge.export.evaluate import eval_problems
    problems = eval_problems(task, n)
    prompts = [p for p, _ in problems]
    cfg["example_prompt"] = prompts[0]
    atomic_write_text(out / "tokenizer.json", json.dumps(cfg, indent=2, ensure_ascii=False))
    name = "prompts.jsonl" if any("\n" in p for p in prompts) else "prompts.txt"
    atomic_write_text(out / name, "".join((json.dumps(p, ensure_ascii=False) if name.endswith(".jsonl") else p)
                                          + "\n" for p in prompts))
    expected = task.greedy_completions(model, prompts)
    atomic_write_text(out / "expected_completions.json", json.dumps(
        {"how": "torch checkpoint, %s.greedy_completions" % type(task).__name__, "prompts": prompts,
         "completions": expected, "references": [r for _, r in problems]}, indent=1, ensure_ascii=False))
    return _HeldOut(problems, prompts, expected, name)


def _quantize(cfg, files, task, out, opts, rep) -> dict:
    """int8 files calibrated on feeds recorded from greedy decoding with the fp32 ONNX model (or the user's
    file) -> {part: quantization summary}."""
    from grpo_edge.export.decode_calibration import decode_calibration, part_path
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.runtime.textgen import ort_functions
    op_types = TEXT_OPS if opts["op_types"] is None else tuple(opts["op_types"])
    with tempfile.TemporaryDirectory() as tmp:
        if opts["calibration"]:
            calib, calib_src = Path(opts["calibration"]), str(opts["calibration"])
        else:
            calib = Path(tmp) / "calibration.npz"
            decode_calibration(cfg, ort_functions(str(out / "model.onnx"), cfg), task, calib,
                               opts["calibration_samples"], "model.onnx (fp32) in onnxruntime", opts["seed"])
            calib_src = ("%d decode-step feeds per file, recorded while model.onnx decoded shuffled train prompts "
                         "greedily at batch 1" % opts["calibration_samples"])
        quant = {}
        for part, f32 in files["fp32"].items():
            q = onnx2int8(f32, part_path(calib, part), files["int8"][part], method=opts["method"],
                          per_channel=opts["per_channel"], op_types=op_types)
            quant[part] = {k: q[k] for k in ("method", "num_samples", "op_types", "format", "errors")}
            rep.notes += ["%s: %s" % (Path(f32).name, w) for w in q["warnings"]]
    rep.notes.append("calibration: %s; method %s; int8 quantizes %s only (why: see grpo_edge/targets/rpi_text.py)"
                     % (calib_src, opts["method"], "/".join(op_types)))
    return quant


_METRIC_HOW = {"torch": "torch checkpoint", "onnx_fp32": "runner.py, model.onnx",
               "onnx_int8": "runner.py --reference, model.int8.onnx (QDQ reference arithmetic)",
               "onnx_int8_ort_optimized": "runner.py, model.int8.onnx, ORT optimizations on (this host's int8 kernels)"}


def _simulate(out, task, held, opts, rep):
    """The shipped runner on this host decodes the held-out prompts: agreement with torch and the task
    metric per model -> (simulation section, int8 / fp32 metric retention). The fp32 runner must agree."""
    from grpo_edge.export.evaluate import retention, text_metric
    sim, metrics = {}, {"torch": text_metric(task, held.expected, held.problems)}
    for tag, name, reference in (("fp32", "model.onnx", False), ("int8", "model.int8.onnx", True),
                                 ("int8_ort_optimized", "model.int8.onnx", False)):
        got = run_runner(out, ["--model", name, "--prompts", held.file, "--json"]
                          + (["--reference"] if reference else []))["completions"]
        sim[tag] = {"agreement_with_torch": float(np.mean([a == b for a, b in zip(got, held.expected)])),
                    "examples": [[p, c] for p, c in zip(held.prompts[:3], got[:3])]}
        metrics["onnx_" + tag] = text_metric(task, got, held.problems)
        if hasattr(task, "report"):                 # the metric by kind of problem (pyfix: by bug)
            sim[tag]["breakdown"] = task.report(got, held.problems)
    n = len(held.prompts)
    rep.add("sim_fp32_agreement", sim["fp32"]["agreement_with_torch"], "fraction", "measured-host",
            "runner.py --prompts %s (%d held-out prompts, greedy) vs the torch checkpoint's greedy "
            "completions: fraction identical" % (held.file, n))
    rep.add("sim_int8_agreement", sim["int8"]["agreement_with_torch"], "fraction", "measured-host",
            "runner.py --reference on model.int8.onnx vs torch greedy completions, %d prompts" % n)
    for k, v in metrics.items():
        rep.add("metric_%s" % k, v, task.metric_name, "measured-host",
                "%s on %d held-out prompts, greedy; %s" % (task.metric_name, n, _METRIC_HOW[k]))
    keep = retention(metrics["onnx_int8"], metrics["onnx_fp32"], getattr(task, "higher_is_better", True))
    rep.add("int8_metric_retention", keep, "fraction", "measured-host", "metric_onnx_int8 / metric_onnx_fp32")
    sim["n_prompts"] = n          # the fp32 runner must agree: the quality gate (_choose) says when it does not
    return sim, keep


def _measure_latency(out, files, opts, rep):
    """Host latency with the shipped runner (batch-1 completions of one held-out prompt) and file sizes
    -> ({tag: median s per completion}, {tag: the runner's bench record})."""
    lat, benches = {}, {}
    for tag, name in (("fp32", "model.onnx"), ("int8", "model.int8.onnx")):
        b = run_runner(out, ["--model", name, "--bench", "--runs", str(opts["text_runs"]), "--warmup",
                              str(opts["text_warmup"]), "--json"])["bench"]
        lat[tag], benches[tag] = b["per_completion_median_s"], b
        src = ("runner.py --bench on %s, onnxruntime %s, 1 thread, prompt %r (%d new tokens, %d model calls), "
               "%d completions after %d warm-up, median" % (b["machine"], b["onnxruntime"], b["prompt"],
                                                              b["new_tokens"], b["model_calls_per_completion"],
                                                              b["runs"], b["warmup"]))
        rep.add("host_latency_%s_s" % tag, b["per_completion_median_s"], "s", b["how"], "per completion: " + src)
        rep.add("host_latency_per_token_%s_s" % tag, b["per_token_median_s"], "s", b["how"],
                "per model call (one token step): " + src)
    for tag in ("fp32", "int8"):
        rep.add("size_%s_bytes" % tag, sum(Path(f).stat().st_size for f in files[tag].values()), "B", "exact",
                " + ".join(Path(f).name for f in files[tag].values()))
    return lat, benches


def _choose(out, keep, lat, cfg, files, prof, source, opts, rep) -> None:
    """fp32 or int8 by the measurements (choose_model); written to deploy.json with the decoding set-up."""
    from grpo_edge.export.onnx_utils import io_specs, load_onnx
    sim = rep.sections.get("simulation") or {}
    agree = {t: sim[t]["agreement_with_torch"] for t in ("fp32", "int8") if t in sim}
    chosen, why = choose_model(keep, lat, opts["min_retention"], agree.get("int8"), opts["min_agreement"])
    rep.sections["choice"] = {"chosen": chosen, "why": why}
    rep.gate = pi_gate(chosen, agree, sim.get("n_prompts", 0), "held-out prompts, greedy completions identical to "
                       "the torch checkpoint's", keep, opts, "completion agreement")
    main = load_onnx(files["fp32"][list(files["fp32"])[-1]])
    atomic_write_text(out / "deploy.json", json.dumps({
        "chosen": chosen, "why": why, "int8_allowed": bool(keep >= opts["min_retention"]),
        "generation": {"arch": cfg["arch"], "tokenizer": "tokenizer.json", "decoding": "greedy",
                       "files": {tag: [Path(f).name for f in fs.values()] for tag, fs in files.items()}},
        "inputs": io_specs(main, "input"), "outputs": io_specs(main, "output"), "target": prof["name"],
        "source": os.path.relpath(str(Path(source).resolve()), str(Path(out).resolve())),
        "min_agreement": opts["min_agreement"],
        "int8_check_agreement": rep.figures["sim_int8_agreement"].value if "sim_int8_agreement" in rep.figures
        else None}, indent=2))


def _estimates(rep, prof, cfg, fp32_files, bench):
    """Device latency / energy per completion: the sum over the completion's model calls of the profile's
    per-call estimate (call_overhead_s + MACs / MAC rate), MACs counted at each call's real shapes."""
    from grpo_edge.export.onnx_utils import completion_macs
    from grpo_edge.targets.profiles import estimate_energy, estimate_latency
    calls = completion_macs(cfg, fp32_files, bench["new_tokens"])
    rep.add("macs_per_completion", int(sum(calls)), "MAC", "exact",
            "count_macs at each call's shapes: %d model calls for the bench prompt (%d new tokens)"
            % (len(calls), bench["new_tokens"]))
    for tag in ("fp32", "int8"):
        value = float(sum(estimate_latency(prof, c, tag)["value"] for c in calls))
        how = estimate_latency(prof, int(sum(calls)), tag)["source"].replace(
            "call_overhead_s", "%d model calls x call_overhead_s" % len(calls))
        rep.add("device_latency_%s_s" % tag, value, "s", "estimated", "per completion: " + how)
        en = estimate_energy(prof, value, "device_latency_%s_s" % tag)
        rep.add("device_energy_%s_j" % tag, en["value"], "J", "estimated", "per completion: " + en["source"])
    rep.notes.append(
        "Device figures are ESTIMATES per completion (%d model calls); every input figure and its source is "
        "in targets/%s.yaml. On the Pi, `python3 runner.py --bench` measures per-token and per-completion "
        "latency instead; `python3 runner.py --choose` re-picks fp32/int8 there." % (len(calls), prof["name"]))
