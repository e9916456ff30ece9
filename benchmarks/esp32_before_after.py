"""The ESP32 deploy of the same checkpoints by two checkouts, side by side: outputs and figures.

    .venv/bin/python benchmarks/esp32_before_after.py --old d5a85ba CKPT[:TARGET] ...   # a few minutes
    .venv/bin/python benchmarks/esp32_before_after.py --old d5a85ba --json out.json runs/cartpole/best.pt \
        runs/arithmetic/best.pt:esp32s3

For a refactor of the ESP32 compiler (issue 27): `git worktree` checks out --old into a temporary folder,
and each checkpoint is deployed by that checkout and by this one (a fresh interpreter each, PYTHONPATH set to
the checkout; run it where the checkpoints' own modules import, e.g. a text task's reward module), TFLM
comparisons off (they do not depend on our C). Compared: the test-vector checksum of the
firmware (vector models: FNV-1a of the reference outputs), host and rv32 bit-exactness, the integer model's
metric, and the instruction, flash and arena figures. Prints a Markdown table; exit 1 when an output differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("host_bit_exact", "rv32_bit_exact", "rv32_instructions_per_inference", "rv32_instructions_prefill",
           "rv32_instructions_per_decode_token", "flash_bytes", "ram_bytes", "arena_bytes", "exact_match_int",
           "decision_agreement_fp32", "metric_int")
SAME = ("host_bit_exact", "rv32_bit_exact", "exact_match_int", "decision_agreement_fp32", "metric_int",
        "checksum")


def deploy(code, checkpoint, target, out):
    """Deploy with the checkout at `code`; returns {figure: value} plus the firmware checksum."""
    env = dict(os.environ, PYTHONPATH=str(code))
    cmd = [sys.executable, "-m", "grpo_edge.cli.main", "deploy", "--target", target, "--checkpoint", str(checkpoint),
           "--out", str(out), "--option", "tflm=false"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)   # here: the user's modules import
    if r.returncode != 0:
        raise SystemExit("deploy failed (%s, %s): %s" % (code, checkpoint, r.stderr.strip()[-500:]))
    rep = json.loads((Path(out) / "report.json").read_text())
    got = dict((k, f.get("value")) for k, f in rep["figures"].items() if k in FIGURES)
    got["checksum"] = (rep.get("sections", {}).get("firmware") or {}).get("checksum")
    return got


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the git revision to compare with (a commit before the change)")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("checkpoints", nargs="+", help="CKPT or CKPT:TARGET (default target esp32)")
    a = ap.parse_args(argv)
    rows, differ = [], False
    with tempfile.TemporaryDirectory(prefix="before_after_") as d:
        old = Path(d) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), a.old], check=True,
                       capture_output=True)
        try:
            for i, item in enumerate(a.checkpoints):
                ckpt, _, target = item.partition(":")
                ckpt = Path(ckpt).resolve()
                before = deploy(old, ckpt, target or "esp32", Path(d) / ("old%d" % i))
                after = deploy(ROOT, ckpt, target or "esp32", Path(d) / ("new%d" % i))
                for key in sorted(set(before) | set(after)):
                    if before.get(key) is None and after.get(key) is None:
                        continue
                    bad = key in SAME and before.get(key) != after.get(key)
                    differ = differ or bad
                    rows.append({"checkpoint": item, "figure": key, "before": before.get(key),
                                 "after": after.get(key), "differs": bad})
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)
    print("| checkpoint | figure | before (%s) | after | |" % a.old)
    print("|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %s | %s |" % (r["checkpoint"], r["figure"], r["before"], r["after"],
                                            "DIFFERS" if r["differs"] else ""))
    if a.json:
        Path(a.json).write_text(json.dumps({"old": a.old, "rows": rows}, indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
