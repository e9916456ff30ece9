"""`grpo-edge export / quantize / calibrate / deploy / bench / targets / flash / monitor`."""
import json
from pathlib import Path
from typing import List, Optional

import typer

from grpo_edge.errors import GrpoEdgeError


def export(
    checkpoint: str = typer.Argument(..., help="A grpo-edge checkpoint."),
    out: str = typer.Option("model.onnx", "--out", "-o", help="Output ONNX path (tiny-transformer: two files)."),
    opset: int = typer.Option(17, "--opset", min=13, max=20, help="ONNX opset, 13-20 (13: per-channel int8 "
                              "Q/DQ; 20: the newest the TorchScript exporter writes)."),
    no_simplify: bool = typer.Option(False, "--no-simplify", help="Skip onnxslim simplification."),
):
    """Export a checkpoint's model to ONNX (dynamic batch), checked against torch."""
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.export.torch2onnx import torch2onnx
    model, _ = load_policy(checkpoint)
    info = torch2onnx(model, out, opset=opset, simplify=not no_simplify)
    typer.echo("wrote %s (opset %s, max |onnx - torch| = %.2e)" % (
        ", ".join(str(f.get("path", k)) for k, f in info["files"].items()), info.get("opset", opset), info.get("max_abs_diff", float("nan"))))


def quantize(
    model: str = typer.Argument(..., help="An fp32 ONNX model."),
    calibration: str = typer.Option(..., "--calibration", help="Calibration set (.npz/.npy), see `grpo-edge calibrate`."),
    out: str = typer.Option("model.int8.onnx", "--out", "-o", help="Output int8 QDQ ONNX."),
    method: str = typer.Option("minmax", "--method", help="minmax, entropy or percentile."),
    activations: str = typer.Option("int8", "--activations", help="int8, or int16 (TFLite 16x8: int16 activations, int8 weights)."),
    weight_rounding: str = typer.Option("nearest", "--weight-rounding", help="nearest, or gptq (error-compensating, Gemm/MatMul)."),
    holdout: float = typer.Option(0.2, "--holdout", min=0.0, max=0.9, help="Share of the calibration samples kept "
                                  "out of calibration to measure the int8 model on (0: measure on the calibration set)."),
    min_agreement: float = typer.Option(0.99, "--min-agreement", min=0.0, max=1.0, help="Held-out decision agreement with fp32 "
                                        "below which the result is reported as a warning."),
    task: Optional[str] = typer.Option(None, "--task", help="Measure on this task's states instead of held-out "
                                       "calibration samples (e.g. cartpole)."),
):
    """Static int8 quantization (QDQ, per-channel int8 weights) with calibration data.

    The int8 model is measured against fp32 on held-out samples (--holdout), never on its own calibration set alone; a
    degenerate calibration set and an agreement below --min-agreement are warnings (stderr and JSON)."""
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.onnx_utils import is_qdq
    if Path(out).resolve() == Path(model).resolve():
        raise GrpoEdgeError("--out %s is the input model: quantize writes a new file, never over its input" % out)
    if Path(model).is_file() and is_qdq(model):
        raise GrpoEdgeError("%s is already quantized (it holds QuantizeLinear / DequantizeLinear): quantize its "
                            "fp32 source" % model)
    eval_data = None
    if task is not None:
        from grpo_edge.export.calibration import task_inputs
        from grpo_edge.tasks import get_task
        eval_data = task_inputs(get_task(task, seed=4242), 512)
    info = onnx2int8(model, calibration, out, method=method, activations=activations, weight_rounding=weight_rounding,
                     holdout=0.0 if task is not None else holdout, eval_data=eval_data, eval_src="task %s" % task)
    e = info["errors"]["reference"]
    agree = e.get("argmax_agreement_clear", e.get("argmax_agreement"))
    if agree is not None and agree < min_agreement:
        info["warnings"].append("int8 agrees with fp32 on %.1f%% of the decisions%s on %s (goal %.0f%%)" % (
            100 * agree, " fp32 makes by more than two output steps (%d of %d)" % (e["clear_decisions"], e["samples"])
            if "argmax_agreement_clear" in e else "", info["evaluated_on"], 100 * min_agreement))
    # everything, the int8-vs-fp32 errors and agreement included: they are what shows a quantization gone wrong
    typer.echo(json.dumps(info, indent=1, default=str))
    for w in info["warnings"]:
        typer.echo("warning: %s" % w, err=True)


def calibrate(
    checkpoint: str = typer.Argument(..., help="A grpo-edge checkpoint."),
    out: str = typer.Option("calibration.npz", "--out", "-o", help="Output .npz."),
    n: int = typer.Option(512, "--n", min=1, help="Number of samples (>= 1)."),
    seed: int = typer.Option(0, "--seed"),
):
    """Make a calibration set from the checkpoint's task (states its policy visits / dataset samples)."""
    from grpo_edge.export.calibration import checkpoint2calibration
    info = checkpoint2calibration(checkpoint, out, n=n, seed=seed)
    typer.echo("wrote %s: %s" % (out, info.get("shapes")))


def deploy(
    target: str = typer.Option(..., "--target", "-t", help="A device profile (`grpo-edge targets` lists them: esp32*, rpi4/5, jetson-*)."),
    checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="A grpo-edge checkpoint."),
    onnx: Optional[str] = typer.Option(None, "--onnx", help="An ONNX model instead: fp32 (quantized with --calibration where the target needs int8) or int8 QDQ."),
    tflite: Optional[str] = typer.Option(None, "--tflite", help="ESP32 targets: an int8 TFLite model instead, compiled "
                                         "bit-exact with TFLite Micro (--calibration: inputs to check it on, .npy)."),
    out: str = typer.Option("deploy", "--out", "-o", help="Output folder."),
    precision: Optional[str] = typer.Option(None, "--precision", help="Jetson: fp32, fp16 or int8."),
    activations: Optional[str] = typer.Option(None, "--activations", help="ESP32: auto (default: int8, or int16 "
                                              "activations when int8 flips > 1% of the decisions), int8 or int16."),
    calibration: Optional[str] = typer.Option(None, "--calibration", help="Calibration set (.npz or .npy); default: from the checkpoint's task."),
    option: List[str] = typer.Option([], "--option", help="Target option key=value (repeatable)."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty --out that deploy did not make "
                               "(overwrites files of the same name)."),
    min_agreement: Optional[float] = typer.Option(None, "--min-agreement", min=0.0, max=1.0, help="The quality "
                                                  "gate (default 0.99): the artifact's decisions (or actions, or "
                                                  "outputs) must agree with fp32 on this share of held-out inputs, "
                                                  "else deploy exits 3. 0 accepts any."),
    min_retention: Optional[float] = typer.Option(None, "--min-retention", min=0.0, max=1.0, help="The gate on "
                                                  "the task's return, where deploy measures it (default 0.99)."),
):
    """Build, simulate and report a target artifact from a checkpoint or an ONNX model.

    Every deploy measures its artifact against the fp32 model on held-out inputs (the quality gate, shown
    in the summary); below --min-agreement it exits 3, the folder written for inspection only.

    From a checkpoint, or from an ONNX model (an fp32 one
    with --calibration, or an int8 QDQ one), or for the ESP32 from an int8 .tflite (its gate: outputs equal to
    TFLite Micro's on the same file). A second deploy into the same folder replaces only the files
    it generated and that are unchanged (MANIFEST.sha256); an edited file is kept, the new one is NAME.new."""
    from grpo_edge.targets import deploy as deploy_target
    from grpo_edge.targets.profiles import load_profile
    opts = dict(option2kv(item) for item in option)
    if precision is not None:
        opts["precision"] = precision
    if calibration is not None:
        opts["calibration"] = calibration
    for key, value in (("min_agreement", min_agreement), ("min_retention", min_retention)):
        if value is not None:
            opts[key] = value
    if activations is not None:
        if load_profile(target).get("family") != "esp32":
            raise GrpoEdgeError("--activations applies to the esp32 targets (got --target %s)" % target)
        opts["activations"] = activations
    from grpo_edge.targets.gate import GateError
    try:
        report = deploy_target(target, checkpoint=checkpoint, onnx=onnx, out_dir=out, options=opts, force=force,
                               tflite=tflite)
    except GateError as e:             # the summary first (it shows the gate), then the one line, exit 3
        typer.echo(e.report.summary(out))
        raise
    typer.echo(report.summary(out) if report is not None else "done")
    for w in getattr(report, "warnings", None) or []:
        typer.echo("warning: %s" % w, err=True)
    kept = getattr(report, "kept", None)
    if kept:
        typer.echo("kept %d file%s you edited in %s; the new version is next to each as NAME.new: %s"
                   % (len(kept), "s" if len(kept) > 1 else "", out, ", ".join(kept)))


def option2kv(item: str):
    """`key=value` (value read as YAML: numbers, true/false, lists) -> (key, value)."""
    import yaml
    if "=" not in item or not item.split("=", 1)[0].strip():
        raise GrpoEdgeError("--option expects key=value, got %r" % item)
    k, v = item.split("=", 1)
    try:
        return k.strip(), yaml.safe_load(v)
    except yaml.YAMLError as e:
        raise GrpoEdgeError("--option %s: value %r is not valid YAML (%s)" % (k.strip(), v, str(e).splitlines()[0]))


def bench(
    checkpoint: Optional[str] = typer.Argument(None, help="A grpo-edge checkpoint (or give --tflite)."),
    out: str = typer.Option("bench", "--out", "-o", help="Output folder (bench.md, bench.json, bench.png)."),
    targets: Optional[str] = typer.Option(None, "--targets", help="Comma-separated device profiles for estimates "
                                          "(default rpi4,rpi5,esp32s3; with --tflite esp32s3,esp32c3)."),
    per_op: bool = typer.Option(True, "--per-op/--no-per-op",
                                help="Add the ESP32 per-op profile of the int8 model (rv32 instructions per op; "
                                     "host instructions ours vs TFLite Micro) and per_op.png."),
    tflite: Optional[str] = typer.Option(None, "--tflite", help="An int8 .tflite instead: compiled for each ESP32 "
                                         "target and measured against TFLite Micro on the same file."),
):
    """Table of formats x size, task metric, host latency (measured), device latency/energy (estimated).

    Then, for vector models, where the ESP32 C spends its instructions, op by op. With --tflite: the file
    compiled for the ESP32 chips, ours vs TFLite Micro (and, on the S3, TFLM + ESP-NN, estimated)."""
    if (checkpoint is None) == (tflite is None):
        raise GrpoEdgeError("give a checkpoint or --tflite MODEL, not both")
    if tflite is not None:
        from grpo_edge.bench.tflite_bench import bench_tflite
        if not Path(tflite).is_file():
            raise GrpoEdgeError("TFLite model not found: %s" % tflite)
        bench_tflite(tflite, out, targets=tuple(t for t in (targets or "esp32s3,esp32c3").split(",") if t))
        typer.echo((Path(out) / "bench.md").read_text())
        return
    from grpo_edge.bench.table import run_bench
    run_bench(checkpoint, out, targets=tuple(t for t in (targets or "rpi4,rpi5,esp32s3").split(",") if t),
              options={"per_op": per_op})
    typer.echo((Path(out) / "bench.md").read_text())


def targets_(
    json_out: bool = typer.Option(False, "--json", help="Print every profile with all figures and their sources."),
):
    """List the device profiles (targets/*.yaml) with their key figures and sources."""
    from grpo_edge.cli.listing import rows2text
    from grpo_edge.targets.profiles import list_profiles, load_profile
    if json_out:
        typer.echo(json.dumps({n: load_profile(n) for n in list_profiles()}, indent=1, default=str))
        return
    rows = []
    for name in list_profiles():
        p = load_profile(name)
        f = p["figures"]

        def val(key, scale=1.0, unit=""):
            if key not in f:
                return "-"
            v = f[key]["value"] if isinstance(f[key], dict) else f[key]
            return "%g %s" % (float(v) / scale, unit)
        ram = val("ram_bytes", 2 ** 30, "GiB") if "ram_bytes" in f else val("sram_bytes", 1024, "KiB")
        rows.append((name, p.get("family", ""), val("clock_hz", 1e6, "MHz"), ram, val("active_power_w", 1, "W"),
                     p.get("display_name", "")))
    typer.echo(rows2text(("target", "family", "clock", "RAM", "power", "device"), rows))
    typer.echo("(every figure with its source: grpo-edge targets --json)")


def flash(
    folder: str = typer.Argument(..., help="An esp32 deploy folder (with a built firmware)."),
    port: str = typer.Option(..., "--port", "-p", help="Serial port, e.g. /dev/ttyUSB0."),
):
    """Flash a built ESP32 firmware image with esptool."""
    from grpo_edge.targets.esp32 import flash as fl
    fl.flash(folder, port)


def monitor(
    port: str = typer.Option(..., "--port", "-p", help="Serial port."),
    seconds: float = typer.Option(10.0, "--seconds", help="How long to listen."),
):
    """Read the firmware's checksum and timing lines back over the serial port."""
    from grpo_edge.targets.esp32 import flash as fl
    res = fl.monitor(port, timeout=seconds)
    typer.echo(json.dumps(res, indent=1, default=str))


def _help(fn) -> str:
    """A command's docstring as --help shows it: paragraphs kept, each one line (rich keeps the source's line
    breaks, which cut sentences in two)."""
    import inspect
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(fn.__doc__).split("\n\n"))


def register(app):
    app.command("export")(export)
    app.command("quantize", help=_help(quantize))(quantize)
    app.command("calibrate")(calibrate)
    app.command("deploy", help=_help(deploy))(deploy)
    app.command("bench", help=_help(bench))(bench)
    app.command("targets")(targets_)
    app.command("flash")(flash)
    app.command("monitor")(monitor)
