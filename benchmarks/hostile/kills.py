"""kill -9 trials for benchmarks/hostile/run.py --kills N: training and online training, killed at random moments.

Training: a CartPole run (last.pt every step) is killed with SIGKILL at a seeded random moment: after a
random number of completed steps (1 .. steps-1, read from metrics.jsonl) plus a random part of a step. Then last.pt must load (else: corrupt), the steps lost are the completed steps (lines in
metrics.jsonl before the kill) minus last.pt's step, and `--resume` must end bit-identical to an
uninterrupted run of the same config. Online: `python -m grpo_edge.online` on the NumPy CartPole is
killed the same way; served.pt and state.pt must load, the updates lost are counted from metrics.jsonl,
and the restarted run must end with the same state.pt weights as an uninterrupted run.
"""
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from run import Ctx, load_weights, same_weights

TRAIN = ["train", "-q", "--set", "training.steps=8", "--set", "training.batch_size=8", "--set",
         "training.eval_every=0", "--set", "task.eval_episodes=2", "--set", "training.save_every=1"]
ONLINE = ["--env", "grpo_edge.online.envs:CartPole", "--max-updates", "16", "--set", "grpo.group_size=4",
          "--set", "training.batch_size=1", "--set", "online.max_steps=100", "--set", "online.eval_episodes=2",
          "--set", "online.gate_every=4", "--set", "online.checkpoint_every=1", "--set", "online.export_onnx=false",
          "-q"]


def _lines(path):
    if not Path(path).exists():
        return []
    out = []
    for ln in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(ln))
        except ValueError:
            pass
    return out


def _killed(ctx, argv, metrics, k, frac):
    """Start argv; once `metrics` has k lines, wait `frac` of the last step's duration, then SIGKILL."""
    p = subprocess.Popen(argv, cwd=str(ctx.work), env=ctx.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen, t_prev, per_step = 0, None, 0.3
    while p.poll() is None:
        n = len(_lines(metrics))
        if n > seen:
            now = time.time()
            if t_prev is not None:
                per_step = (now - t_prev) / (n - seen)
            seen, t_prev = n, now
            if n >= k:
                time.sleep(frac * per_step)
                break
        time.sleep(0.005)
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait()
    return p.returncode


def kill_trials(code, root, runs, seed, timeout, modes=("training", "online")):
    rng = random.Random(seed)
    work = Path(root) / "kills"
    work.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(code, work, {}, timeout)
    res = {}
    # reference runs, timed, to place the kills inside them
    t0 = time.time()
    r = ctx.cli(TRAIN + ["--save-dir", "ref_train"]) if "training" in modes else None
    t_train = time.time() - t0
    t0 = time.time()
    r2 = ctx.online(ONLINE + ["--save-dir", "ref_online"]) if "online" in modes else None
    t_online = time.time() - t0
    if (r is not None and r.rc != 0) or (r2 is not None and r2.rc != 0):
        raise SystemExit("kill trials: reference runs failed: %s %s" % (r and r.err[-500:], r2 and r2.err[-500:]))
    cli = [sys.executable, "-m", "grpo_edge.cli.main"]
    k = {"runs": 0, "corrupt": 0, "steps_lost": 0, "identical": 0, "details": []}
    for i in range(runs if "training" in modes else 0):
        d = "train_%d" % i
        at = (rng.randint(1, 7), rng.random())
        rc = _killed(ctx, cli + TRAIN + ["--save-dir", d], work / d / "metrics.jsonl", *at)
        last = work / d / "last.pt"
        done = max([m.get("step", 0) for m in _lines(work / d / "metrics.jsonl")] or [0])
        st = load_weights(last) if last.exists() else None
        corrupt = last.exists() and st is None
        saved = int(st["step"]) if isinstance(st, dict) else 0
        if rc != -9:                     # finished before the kill: nothing to resume
            same = same_weights(work / "ref_train" / "last.pt", last)
        else:
            rr = ctx.cli(TRAIN + ["--save-dir", d] + (["--resume"] if last.exists() else []))
            same = rr.rc == 0 and same_weights(work / "ref_train" / "last.pt", last)
        k["runs"] += 1
        k["corrupt"] += int(corrupt)
        k["steps_lost"] += max(0, done - saved)
        k["identical"] += int(same)
        k["details"].append({"kill_after_steps": at[0], "step_fraction": round(at[1], 2), "rc": rc, "steps_done": done, "saved_step": saved,
                             "corrupt": corrupt, "identical": same})
    if "training" in modes:
        res["training"] = k
    k = {"runs": 0, "corrupt": 0, "steps_lost": 0, "identical": 0, "details": []}
    for i in range(runs if "online" in modes else 0):
        d = "online_%d" % i
        at = (rng.randint(1, 15), rng.random())
        rc = _killed(ctx, [sys.executable, "-m", "grpo_edge.online"] + ONLINE + ["--save-dir", d],
                     work / d / "metrics.jsonl", *at)
        done = max([m.get("update", 0) for m in _lines(work / d / "metrics.jsonl")] or [0])
        corrupt, saved = False, 0
        for name in ("served.pt", "state.pt"):
            p = work / d / name
            if p.exists():
                st = load_weights(p)
                corrupt = corrupt or st is None
                if name == "state.pt" and isinstance(st, dict):
                    saved = int(st["online"]["update"])
        rr = ctx.online(ONLINE + ["--save-dir", d])
        same = rr.rc == 0 and same_weights(work / "ref_online" / "state.pt", work / d / "state.pt")
        k["runs"] += 1
        k["corrupt"] += int(corrupt)
        k["steps_lost"] += max(0, done - saved)
        k["identical"] += int(same)
        k["details"].append({"kill_after_steps": at[0], "step_fraction": round(at[1], 2), "rc": rc, "updates_done": done, "saved_update": saved,
                             "corrupt": corrupt, "identical": same})
    if "online" in modes:
        res["online"] = k
    return res
