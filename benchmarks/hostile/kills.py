"""kill -9 trials for benchmarks/hostile/run.py --kills N: training and online training, killed at random moments.

Training: a CartPole run (last.pt every step) is killed with SIGKILL at a seeded random moment: after a
random number of completed steps (1 .. steps-1, read from metrics.jsonl) plus a random part of a step. Then
last.pt must load (else: corrupt), the steps lost are the completed steps (lines in metrics.jsonl before the
kill) minus last.pt's step, and `--resume` must end bit-identical to an uninterrupted run of the same config.
Online: `python -m grpo_edge.online` on the NumPy CartPole is killed the same way; served.pt and state.pt
must load, the updates lost are counted from metrics.jsonl, and the restarted run must end with the same
state.pt weights as an uninterrupted run.
"""
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import Ctx, load_weights, same_weights

TRAIN = ["train", "-q", "--set", "training.steps=8", "--set", "training.batch_size=8", "--set",
         "training.eval_every=0", "--set", "task.eval_episodes=2", "--set", "training.save_every=1"]
ONLINE = ["--env", "grpo_edge.online.envs:CartPole", "--max-updates", "16", "--set", "grpo.group_size=4",
          "--set", "training.batch_size=1", "--set", "online.max_steps=100", "--set", "online.eval_episodes=2",
          "--set", "online.gate_every=4", "--set", "online.checkpoint_every=1", "--set", "online.export_onnx=false",
          "-q"]


class Mode(object):
    """One kind of run to kill: how it starts, counts its progress, saves it and continues after a kill."""

    def __init__(self, name, module, args, counter, last_count, saved, reference):
        self.name, self.module, self.args, self.counter = name, module, args, counter
        self.last_count = last_count      # kills land after 1 .. last_count completed steps / updates
        self.saved = saved                # {file name: function(state) -> the step it holds, or None}
        self.reference = reference        # the file an uninterrupted run ends with, compared bit for bit

    def argv(self, run_dir):
        return [sys.executable, "-m", self.module] + self.args + ["--save-dir", run_dir]

    def restart(self, ctx, run_dir, killed):
        """Continue a killed training run with --resume (from its last.pt); restart the online trainer."""
        if self.module == "grpo_edge.online":
            return ctx.online(self.args + ["--save-dir", run_dir])
        resume = ["--resume"] if killed and (ctx.work / run_dir / "last.pt").exists() else []
        return ctx.cli(self.args + ["--save-dir", run_dir] + resume) if killed else None


MODES = {
    "training": Mode("training", "grpo_edge.cli.main", TRAIN, "step", 7, {"last.pt": lambda st: int(st["step"])},
                     "last.pt"),
    "online": Mode("online", "grpo_edge.online", ONLINE, "update", 15,
                   {"served.pt": lambda st: None, "state.pt": lambda st: int(st["online"]["update"])}, "state.pt"),
}


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


def _trial(ctx, mode, run_dir, at):
    """Kill one run at `at` = (completed steps, fraction of the next), check its files, continue it."""
    rc = _killed(ctx, mode.argv(run_dir), ctx.work / run_dir / "metrics.jsonl", *at)
    done = max([m.get(mode.counter, 0) for m in _lines(ctx.work / run_dir / "metrics.jsonl")] or [0])
    corrupt, saved = False, 0
    for name, step_of in mode.saved.items():
        path = ctx.work / run_dir / name
        if path.exists():
            st = load_weights(path)
            corrupt = corrupt or st is None
            step = step_of(st) if isinstance(st, dict) else None
            saved = step if step is not None else saved
    rr = mode.restart(ctx, run_dir, killed=rc == -9)      # a run that finished before the kill has nothing to do
    same = (rr is None or rr.rc == 0) and same_weights(ctx.work / ("ref_" + mode.name) / mode.reference,
                                                       ctx.work / run_dir / mode.reference)
    return {"kill_after_steps": at[0], "step_fraction": round(at[1], 2), "rc": rc, "steps_done": done,
            "saved_step": saved, "corrupt": corrupt, "identical": same}


def kill_trials(code, root, runs, seed, timeout, modes=("training", "online")):
    """{mode: {runs, corrupt, steps_lost, identical, details}} over `runs` killed runs per mode."""
    rng = random.Random(seed)
    work = Path(root) / "kills"
    work.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(code, work, {}, timeout)
    res = {}
    for name in ("training", "online"):
        if name not in modes:
            continue
        mode = MODES[name]
        ref = ctx.module(mode.module, mode.args + ["--save-dir", "ref_" + name])   # the uninterrupted run
        if ref.rc != 0:
            raise SystemExit("kill trials: the reference %s run failed: %s" % (name, ref.err[-500:]))
        k = {"runs": 0, "corrupt": 0, "steps_lost": 0, "identical": 0, "details": []}
        for i in range(runs):
            d = _trial(ctx, mode, "%s_%d" % (name, i), (rng.randint(1, mode.last_count), rng.random()))
            k["runs"] += 1
            k["corrupt"] += int(d["corrupt"])
            k["steps_lost"] += max(0, d["steps_done"] - d["saved_step"])
            k["identical"] += int(d["identical"])
            k["details"].append(d)
        res[name] = k
    return res
