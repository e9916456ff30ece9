"""Issue 38: continuous-control policies trained by the project's own recipes, deployed to the ESP32-S3 and
ESP32-C3 as a user would (`deploy --target esp32s3 --checkpoint best.pt`), and the figures the quality gate
judges: the form chosen (int8, else 16x8), action agreement with fp32 on 1,000 held-out task states (every
action within 1% of its range), the largest action error, the fp32 and integer mean returns over the task's
100 evaluation episodes, the return retention with its noise (2 standard errors of the difference of the two
means), host and rv32 bit-exactness, and the gate's verdict.

    .venv/bin/python benchmarks/continuous_deploy.py [--envs InvertedDoublePendulum-v5,Hopper-v5,...]
        [--work /tmp/continuous] [--json benchmarks/results/continuous_deploy.json]

Training uses each env's recipe: Pendulum-v1 its built-in pendulum.yaml; the others the default recipe a
gymnasium id gets (control: cartpole.yaml) with a step cap (STEPS) and no early stop, so the run fits this
2-core machine. MuJoCo envs need `pip install "gymnasium[mujoco]"`; an env that cannot be made is reported
as skipped. Every figure is measured on this host (the integer reference is the C's arithmetic; rv32 is
an instruction-set simulation); nothing here is a device measurement.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENVS = ("InvertedDoublePendulum-v5", "Hopper-v5", "HalfCheetah-v5", "Pendulum-v1", "LunarLanderContinuous-v3")
STEPS = {"InvertedDoublePendulum-v5": 100, "Hopper-v5": 40, "HalfCheetah-v5": 30, "LunarLanderContinuous-v3": 60}
TARGETS = ("esp32s3", "esp32c3")


def train(env, work: Path) -> Path:
    """best.pt of env trained by its recipe under work/env (kept: a second run reuses it)."""
    run = work / env
    if (run / "best.pt").is_file():
        return run / "best.pt"
    cmd = [sys.executable, "-m", "grpo_edge.cli.main", "train", "--save-dir", str(run), "--force"]
    if env == "Pendulum-v1":
        cmd += ["--config", "pendulum.yaml"]
    else:
        cmd += ["--set", "task.name=%s" % env, "--set", "training.steps=%d" % STEPS[env],
                "--set", "training.target_metric=100000"]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError("training %s failed: %s" % (env, (r.stderr.strip().splitlines() or ["?"])[-1]))
    (run / "train_wall_s.txt").write_text("%.1f\n" % (time.time() - t0))
    return run / "best.pt"


def deploy_one(ckpt: Path, target: str, out: Path) -> dict:
    """deploy the checkpoint (no TFLM, no callgrind: the figures the gate reads) -> its row."""
    from grpo_edge.targets import deploy
    from grpo_edge.targets.gate import GateError
    try:
        rep, exit_code = deploy(target, checkpoint=str(ckpt), out_dir=str(out),
                                options={"tflm": False, "callgrind": False}), 0
    except GateError as e:
        rep, exit_code = e.report, 3
    f = {k: v.value for k, v in rep.figures.items()}
    g = rep.gate
    return {"target": target, "exit_code": exit_code, "form": f.get("activations"),
            "tried": g["tried"], "agreement": f.get("decision_agreement_fp32"),
            "action_error_max": f.get("action_error_max_relative"), "return_fp32": f.get("task_metric_fp32"),
            "return_integer": f.get("task_metric_integer"), "retention": g["retention"],
            "retention_noise": g.get("retention_noise"), "host_bit_exact": f.get("host_bit_exact"),
            "rv32_bit_exact": f.get("rv32_bit_exact"), "gate_passed": g["passed"], "gate": g["line"]}


def table(rows) -> str:
    head = ("| env | target | int8 agreement | form chosen | its action agreement | max action error | return fp32 | "
            "return integer | retention (+- noise) | host / rv32 bit-exact | gate |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if "skipped" in r:
            lines.append("| %s | - | skipped: %s |" % (r["env"], r["skipped"]))
            continue
        noise = "" if r["retention_noise"] is None else " (+-%.3f)" % r["retention_noise"]
        int8 = next((t.get("value") for t in r["tried"] if t["form"] == "int8"), None)
        lines.append("| %s | %s | %s | %s | %.4f | %.4f | %.1f | %.1f | %.4f%s | %s / %s | %s |" % (
            r["env"], r["target"], "-" if int8 is None else "%.3f" % int8, "16x8" if r["form"] == "int16" else r["form"],
            r["agreement"], r["action_error_max"], r["return_fp32"],
            r["return_integer"], r["retention"], noise, r["host_bit_exact"], r["rv32_bit_exact"],
            "passed" if r["gate_passed"] else "exit %d" % r["exit_code"]))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default=",".join(ENVS))
    ap.add_argument("--work", default="/tmp/continuous_deploy")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "continuous_deploy.json"))
    ap.add_argument("--table", action="store_true", help="print the table of --json and stop")
    a = ap.parse_args(argv)
    if a.table:
        print(table(json.loads(Path(a.json).read_text())["rows"]))
        return
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for env in a.envs.split(","):
        try:
            ckpt = train(env, work)
        except Exception as e:  # noqa: BLE001 - an env that cannot be made (no mujoco) is reported, not fatal
            rows.append({"env": env, "skipped": str(e)[:200]})
            print("%s: skipped (%s)" % (env, str(e)[:200]), flush=True)
            continue
        for target in TARGETS:
            row = dict(env=env, **deploy_one(ckpt, target, work / env / ("deploy_" + target)))
            rows.append(row)
            print("%s %s: %s" % (env, target, row["gate"]), flush=True)
    from grpo_edge.report import atomic_write_text
    atomic_write_text(Path(a.json), json.dumps({"rows": rows, "measured": "host (integer reference, rv32 "
                                                "simulation); no device"}, indent=1, default=str) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
