"""Tune a grpo-edge recipe by measurement (issue 41): variants of the recipe `train --set task.name=<env>` picks,
each run under benchmarks/control_suite.py's protocol (same budget, same greedy judge, one thread), side by side.

    .venv/bin/python benchmarks/recipe_sweep.py --env LunarLander-v3 --budget-s 120 --seed 0 1 \\
        --variant base= --variant lr1e-3=training.lr=0.001 --variant g16=grpo.group_size=16,training.batch_size=4

A variant is NAME=OVERRIDE[,OVERRIDE...] (config keys as for --set; empty: the recipe as it is). Variants
alternate seed by seed so that load on this machine hits all of them alike. Results are added to --json (default
benchmarks/results/recipe_sweep.json) under env/variant/seed/budget, and runs already there are skipped; the
table gives each variant's median final greedy return and the median training seconds to the env's threshold.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import control_suite  # noqa: E402
from _common import RESULTS, machine, markdown_table, run_worker  # noqa: E402


def parse_variant(text):
    name, _, overrides = text.partition("=")
    if not name or "/" in name:
        raise control_suite.BadInput("--variant %r: give NAME=OVERRIDE[,OVERRIDE...] (a name without '/')" % text)
    over = [o for o in overrides.split(",") if o]
    for o in over:
        if "=" not in o or "." not in o.split("=", 1)[0]:
            raise control_suite.BadInput("--variant %s: %r is not section.key=value" % (name, o))
    return name, over


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--env", required=True)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--seed", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--budget-s", type=float, default=None, help="default: the suite's budget for the env")
    ap.add_argument("--json", default=str(RESULTS / "recipe_sweep.json"))
    a = ap.parse_args(argv)
    try:
        if a.env not in control_suite.BUDGETS:
            raise control_suite.BadInput("unknown env %r: the suite knows %s" % (a.env, ", ".join(control_suite.BUDGETS)))
        if a.budget_s is not None and not a.budget_s > 0:
            raise control_suite.BadInput("--budget-s must be > 0, got %g" % a.budget_s)
        variants = [parse_variant(v) for v in a.variant]
    except control_suite.BadInput as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    budget = a.budget_s or control_suite.BUDGETS[a.env][0]
    path = Path(a.json)
    data = json.loads(path.read_text()) if path.exists() else {"script": "benchmarks/recipe_sweep.py",
                                                                "machine": machine(), "runs": {}}
    for seed in a.seed:
        for name, over in variants:
            key = "%s/%s/seed%d/%gs" % (a.env, name, seed, budget)
            if key in data["runs"]:
                continue
            t0 = time.time()
            spec = {"env": a.env, "algo": "grpo-edge", "seed": seed, "budget_s": budget, "overrides": over}
            try:
                res = run_worker(Path(control_suite.__file__).resolve(), spec, timeout=3 * budget + 300)
            except Exception as e:
                res = {"status": "failed", "reason": str(e).strip().splitlines()[0][:300]}
            res.update(overrides=over, wall_s=round(time.time() - t0, 1))
            data["runs"][key] = res
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(str(tmp), str(path))
            print("%s: %s" % (key, ("final %.1f" % res["final_return"]) if res.get("status") == "ok"
                              else "FAILED " + res.get("reason", "")), flush=True)
    rows = []
    for name, over in variants:
        runs = [data["runs"].get("%s/%s/seed%d/%gs" % (a.env, name, s, budget)) for s in a.seed]
        ok = [r for r in runs if r and r.get("status") == "ok"]
        hits = [r["reached"]["train_s"] for r in ok if r.get("reached")]
        rows.append([name, ",".join(over) or "(the recipe)", len(ok),
                     statistics.median([r["final_return"] for r in ok]) if ok else None,
                     min([r["final_return"] for r in ok]) if ok else None,
                     "%d: %.1f s" % (len(hits), statistics.median(hits)) if hits else "0"])
    print(markdown_table(["variant", "overrides", "runs", "median final", "worst final", "reached (median s)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
