"""The pyfix recipe's held-out fix rate after the warm start and after GRPO, by bug kind, on several seeds (issue 42).

    .venv/bin/python benchmarks/pyfix_results.py                        # seeds 0 1 2, configs/pyfix.yaml
    .venv/bin/python benchmarks/pyfix_results.py --seeds 0 --set training.steps=20

Each run is `grpo-edge train --set task.name=pyfix --seed S` in a fresh process (the recipe the task picks, so
this measures what a user gets); the fix rates come from its summary.json (`warm_start.after`: the supervised
start alone, `eval`: after GRPO, both on the held-out functions). Prints a Markdown table and writes --json
(default benchmarks/results/pyfix_results.json). Wall time includes the evaluations.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine, markdown_table, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("missing_colon", "indentation", "bracket", "misspelling", "operator", "off_by_one", "wrong_return")


def train(seed, out_root, sets):
    run_dir = out_root / ("pyfix-seed%d" % seed)
    cmd = [sys.executable, "-m", "grpo_edge.cli.main", "train", "--set", "task.name=pyfix", "--seed", str(seed),
           "--save-dir", str(run_dir), "--quiet"] + [a for s in sets for a in ("--set", s)]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("run failed: %s\n%s" % (" ".join(cmd[2:]), r.stderr[-2000:]))
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"seed": seed, "command": "grpo-edge train --set task.name=pyfix --seed %d%s" % (
                seed, "".join(" --set " + s for s in sets)),
            "process_seconds": round(time.time() - t0, 1), "wall_seconds": summary["wall_seconds"],
            "steps": summary["steps"], "warm_start": summary["warm_start"]["after"], "grpo": summary["eval"],
            "best_fix_rate": summary["best_fix_rate"]}


def report(runs):
    def med(stage, key):
        values = [r[stage].get(key) for r in runs if r[stage].get(key) is not None]
        return "%.2f [%.2f, %.2f]" % (statistics.median(values), min(values), max(values)) if values else "-"
    rows = [["fix rate (all)", med("warm_start", "fix_rate"), med("grpo", "fix_rate")]]
    rows += [[k.replace("_", " "), med("warm_start", "fix_rate/" + k), med("grpo", "fix_rate/" + k)] for k in KINDS]
    rows += [["parses", med("warm_start", "parses"), med("grpo", "parses")],
             ["exact match", med("warm_start", "exact_match"), med("grpo", "exact_match")]]
    head = ["held-out, median [min, max] of %d seeds" % len(runs), "warm start alone", "after GRPO"]
    minutes = [r["process_seconds"] / 60 for r in runs]
    return markdown_table(head, rows) + "\n\nTraining time (the whole command): %.1f min median [%.1f, %.1f]" % (
        statistics.median(minutes), min(minutes), max(minutes))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", action="append", default=[], help="a config override for every run (as for train)")
    ap.add_argument("--out", default="runs/pyfix_results", help="run folders")
    ap.add_argument("--json", default=str(RESULTS / "pyfix_results.json"))
    a = ap.parse_args(argv)
    runs = []
    for seed in a.seeds:
        runs.append(train(seed, ROOT / a.out, a.set))
        print("seed %d: warm start %.3f -> GRPO %.3f (%.0f s)" % (seed, runs[-1]["warm_start"]["fix_rate"],
                                                                  runs[-1]["grpo"]["fix_rate"],
                                                                  runs[-1]["process_seconds"]), flush=True)
    write_json(a.json, {"machine": machine(), "sets": a.set, "runs": runs, "table": report(runs)})
    print(report(runs))


if __name__ == "__main__":
    main()
