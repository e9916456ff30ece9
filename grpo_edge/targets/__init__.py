"""Targets by name: a profile (data, targets/<name>.yaml) plus one module per family.

    from grpo_edge.targets import deploy
    report = deploy("esp32", checkpoint="runs/cartpole/best.pt", out_dir="out/esp32")

The CLI knows targets only by name; the family in the profile picks the module.
"""
import importlib
from pathlib import Path

from grpo_edge.errors import TargetError

FAMILY_MODULES = {"rpi": "grpo_edge.targets.rpi", "esp32": "grpo_edge.targets.esp32",
                  "jetson": "grpo_edge.targets.jetson"}


def deploy(target, checkpoint=None, onnx=None, out_dir="deploy", options=None, force=False, tflite=None):
    """Deploy a checkpoint (or an ONNX model, or for the ESP32 an int8 .tflite) to the named target; returns the
    Report (also written).
    The folder is built aside and published at the end (targets/contract.py: manifest, edited files kept).
    An artifact below its quality gate (targets/gate.py) raises GateError after the folder is written; the
    error carries the report (e.report)."""
    from grpo_edge.targets.contract import deploy_into_folder
    from grpo_edge.targets.gate import enforce
    import functools
    report = deploy_into_folder(functools.partial(_deploy, tflite=tflite), target, checkpoint, onnx, out_dir, options,
                                force)
    enforce(report)             # below the quality gate: GateError (exit 3), the folder written for inspection
    return report


def _deploy(target, checkpoint=None, onnx=None, out_dir="deploy", options=None, tflite=None):
    from grpo_edge.targets.profiles import load_profile
    profile = load_profile(target)                                   # unknown target -> lists the known ones
    if sum(s is not None for s in (checkpoint, onnx, tflite)) != 1:
        raise TargetError("give exactly one of --checkpoint, --onnx or --tflite")
    source = Path(checkpoint or onnx or tflite)
    if not source.exists():
        raise TargetError("%s not found: %s" % ("checkpoint" if checkpoint else "ONNX model" if onnx else "TFLite model",
                                                source))
    family = profile.get("family")
    if family not in FAMILY_MODULES:
        raise TargetError("target %s has no deploy pipeline (family %r)" % (profile["name"], family))
    options = dict(options or {})
    if tflite is not None:                                # an int8 .tflite: the ESP32 compiler's TFLite front end
        if family != "esp32":
            raise TargetError("--tflite deploys to the esp32 targets (esp32, esp32s3, esp32c3); for %s give --onnx"
                              % profile["name"])
        from grpo_edge.targets.esp32 import deploy as esp32_deploy
        return esp32_deploy(str(source), profile, out_dir, options)
    if family == "esp32" and checkpoint is not None:      # text models: their own integer path (esp32/text_deploy.py)
        from grpo_edge.targets.esp32.text_deploy import deploy_text, is_text_checkpoint
        if is_text_checkpoint(source):
            return deploy_text(str(source), profile, out_dir, options)
    if family == "esp32":
        from grpo_edge.targets.esp32_pipeline import prepare_int8
        source, options = prepare_int8(source, Path(out_dir), options, from_checkpoint=checkpoint is not None)
    module = importlib.import_module(FAMILY_MODULES[family])
    report = module.deploy(str(source), profile, out_dir, options)
    if report is not None and not (Path(out_dir) / "report.json").exists():
        report.write(out_dir)
    return report
