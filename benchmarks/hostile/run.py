"""Hostile-input sweep: run each case as a subprocess against a checkout and classify what it did.

    python benchmarks/hostile/run.py                      # every case of benchmarks/hostile/cases_train.py
    python benchmarks/hostile/run.py --fast               # the quick subset (config and checkpoint cases)
    python benchmarks/hostile/run.py --code /tmp/orig     # the same cases against another checkout (before/after)
    python benchmarks/hostile/run.py --kills 5            # also kill -9 trials: training and online training
    python benchmarks/hostile/run.py --only resume --json out.json

A case is a command (`grpo-edge ...`, `python -m grpo_edge.online ...`) or a trial (a function that runs
several commands, e.g. Ctrl-C then --resume). Each result is one of:

  clean      the expected outcome: bad input -> exit code 2 and one line `error: ...` on stderr, no
             traceback; good input (`lr: 3e-4`, a path with '#') -> it runs
  traceback  a Python traceback reached the user
  wrong      any other outcome: bad input accepted (exit 0), wrong exit code, a message of several lines,
             a change that was ignored, a resumed run that differs from the uninterrupted one
  data lost  a checkpoint or state file left with NaN / inf weights, or replaced by an inconsistent one

kill -9 trials (--kills N): N training runs and N online runs, each killed with SIGKILL at a random moment
(seeded), then: does every checkpoint load (corrupt count), how many completed steps were lost, and does
--resume (a restart for online) end bit-identical to an uninterrupted run.

Only the project's own venv python, torch and the standard library are used here; the code under test is
reached through PYTHONPATH, so the same runner measures an older checkout.
"""
import argparse
import concurrent.futures
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from harness import Ctx, ForkPool, set_pool  # noqa: E402
from kills import kill_trials  # noqa: E402

STATUSES = ("clean", "traceback", "wrong", "data lost")


# ---------------------------------------------------------------------------------------------- running
def run_case(case, code, root, fixtures, timeout):
    work = Path(tempfile.mkdtemp(prefix="case_", dir=str(root)))
    ctx = Ctx(code, work, fixtures, case.get("timeout") or timeout)
    t0 = time.time()
    try:
        status, note = case["fn"](ctx)
    except Exception as e:                 # a bug in the case itself: reported, never hidden
        status, note = "wrong", "case failed: %s: %s" % (type(e).__name__, e)
    finally:
        shutil.rmtree(str(work), ignore_errors=True)
    return {"id": case["id"], "class": case["cls"], "status": status, "note": note, "wall_s": round(time.time() - t0, 1)}


def build_fixtures(code, root, timeout):
    """A small CartPole run (last.pt with a few steps) that checkpoint cases copy and tamper with."""
    work = Path(root) / "fixtures"
    work.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(code, work, {}, timeout)
    r = ctx.cli(["train", "-q", "--set", "training.steps=2", "--set", "training.batch_size=4", "--set",
                 "grpo.group_size=4", "--set", "training.eval_every=0", "--set", "task.eval_episodes=2",
                 "--save-dir", work / "cartpole"])
    if r.rc != 0:
        raise SystemExit("fixture run failed: %s" % r.err[-2000:])
    return {"ckpt": str(work / "cartpole" / "last.pt")}


def summarize(results):
    out = {s: 0 for s in STATUSES}
    for r in results:
        out[r["status"]] += 1
    by_class = {}
    for r in results:
        by_class.setdefault(r["class"], {s: 0 for s in STATUSES})[r["status"]] += 1
    return dict(out, cases=len(results), by_class=by_class)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", default=str(ROOT), help="checkout to test (default: this one)")
    p.add_argument("--cases", default="cases_train", help="case module(s) in benchmarks/hostile, comma-separated")
    p.add_argument("--fast", action="store_true", help="only the quick cases")
    p.add_argument("--only", default=None, help="cases whose id or class contains this text")
    p.add_argument("--jobs", type=int, default=2, help="cases run in parallel")
    p.add_argument("--timeout", type=int, default=240, help="seconds per command")
    p.add_argument("--kills", type=int, default=0, help="kill -9 trials per mode (training, online)")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    p.add_argument("--kill-modes", default="training,online", help="which kill -9 trials: training, online")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--no-fork", action="store_true", help="a fresh interpreter per command (slower)")
    a = p.parse_args(argv)

    import importlib
    cases = []
    for name in a.cases.split(","):
        cases += importlib.import_module(name).CASES
    if a.fast:
        cases = [c for c in cases if c.get("fast")]
    if a.only:
        cases = [c for c in cases if a.only in c["id"] or a.only in c["cls"]]
    root = Path(tempfile.mkdtemp(prefix="hostile_"))
    t0 = time.time()
    pool = None if a.no_fork else ForkPool(a.code, max(1, a.jobs), Ctx(a.code, root, {}, a.timeout).env())
    set_pool(pool)
    fixtures = build_fixtures(a.code, root, a.timeout)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futs = [ex.submit(run_case, c, a.code, root, fixtures, a.timeout) for c in cases]
        for f in futs:
            r = f.result()
            results.append(r)
            print("%-10s %-14s %-44s %s" % (r["status"], r["class"][:14], r["id"][:44], r["note"][:110]), flush=True)
    summary = summarize(results)
    kills = None
    if a.kills:
        kills = kill_trials(a.code, root, a.kills, a.seed, a.timeout, tuple(a.kill_modes.split(",")))
    print("\nhostile cases: %d tried, %d clean, %d tracebacks, %d wrong, %d data lost (%.0f s; code %s)"
          % (summary["cases"], summary["clean"], summary["traceback"], summary["wrong"], summary["data lost"],
             time.time() - t0, a.code))
    for cls, c in sorted(summary["by_class"].items()):
        print("  %-16s %s" % (cls, ", ".join("%s %d" % (s, c[s]) for s in STATUSES if c[s])))
    if kills:
        for mode, k in kills.items():
            print("kill -9 (%s): %d runs, %d corrupt checkpoints, %d steps lost in all, resume bit-identical %d/%d"
                  % (mode, k["runs"], k["corrupt"], k["steps_lost"], k["identical"], k["runs"]))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"code": a.code, "summary": summary, "kills": kills, "results": results}, f, indent=1)
    if pool is not None:
        pool.close()
    if not a.keep:
        shutil.rmtree(str(root), ignore_errors=True)
    return 0 if summary["clean"] == summary["cases"] and (not kills or all(
        k["corrupt"] == 0 and k["identical"] == k["runs"] for k in kills.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
