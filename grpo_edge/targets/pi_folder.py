"""Host-side work on a Raspberry Pi deploy folder, shared by the policy (rpi.py) and text (rpi_text.py)
deploys: run the shipped runner.py as the simulation, and choose fp32 or int8 by measurement."""
import json
import subprocess
import sys
from pathlib import Path

from grpo_edge.errors import TargetError


def run_runner(out, args):
    """Run the folder's runner.py with `args` (it prints JSON last); a failure is one TargetError line."""
    out = Path(out).resolve()         # the runner runs with cwd=out: a relative path would be joined twice
    r = subprocess.run([sys.executable, str(out / "runner.py")] + [str(a) for a in args], cwd=str(out),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        raise TargetError("runner.py %s failed on this host: %s" % (" ".join(map(str, args[:2])), tail))
    return json.loads(r.stdout.strip().splitlines()[-1])


def choose_model(keep, lat, min_retention):
    """fp32 or int8, by measurement: int8 only if it keeps the metric AND is faster on the measured host."""
    faster = lat["int8"] < lat["fp32"]
    speed = "int8 %.3g s vs fp32 %.3g s median on this host" % (lat["int8"], lat["fp32"])
    if keep is None:
        return "model.onnx", "no task metric to check int8 against: fp32 kept (%s)" % speed
    if keep < min_retention:
        return "model.onnx", "int8 keeps %.4f of the fp32 metric (< %.2f): fp32 (%s)" % (keep, min_retention, speed)
    if not faster:
        return "model.onnx", "int8 keeps %.4f of the metric but is not faster (%s): fp32" % (keep, speed)
    return "model.int8.onnx", "int8 keeps %.4f of the metric and is faster (%s)" % (keep, speed)
