"""The article's recipe (configs/tiny_transformer.yaml) with and without its supervised warm start (issue 31).

    .venv/bin/python benchmarks/article_recipe.py                   # ~6-8 min on 2 shared cores
    .venv/bin/python benchmarks/article_recipe.py --steps 40 --out /tmp/recipe.json

Two `grpo-edge train -c configs/tiny_transformer.yaml` runs, one after the other, same seed: the recipe as
shipped (a 12-epoch warm start on the reference translations, then GRPO) and the seed document's lines alone
(training.warm_start_epochs=0). Each evaluates exact match on 100 held-out pairs every --eval-every steps.
Prints the curves, writes benchmarks/results/article_recipe.json (or --out) and a plot next to it (.png):
exact match against wall time since the start, the warm start's score at its own time.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(name, sets, a, work):
    out = work / name
    cmd = [sys.executable, "-m", "grpo_edge.cli.main", "train", "-c", str(ROOT / "configs" / "tiny_transformer.yaml"),
           "--save-dir", str(out), "-q", "--set", "training.steps=%d" % a.steps,
           "--set", "training.eval_every=%d" % a.eval_every, "--set", "training.seed=%d" % a.seed] + sets
    t0 = time.time()
    r = subprocess.run(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    wall = time.time() - t0
    if r.returncode != 0:
        raise SystemExit("%s failed: %s" % (name, r.stderr[-2000:]))
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    curve = [{"step": m["step"], "exact_match": m["eval_exact_match"], "elapsed_s": m.get("wall_time")}
             for m in lines if "eval_exact_match" in m]
    ws = summary.get("warm_start") or {}
    return {"sets": sets, "process_wall_s": round(wall, 1), "wall_seconds": summary.get("wall_seconds"),
            "after_warm_start": (ws.get("after") or {}).get("exact_match"),
            "final_exact_match": summary["final_exact_match"], "curve": curve}


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, r in res.items():
        xs = [0.0] + [c["elapsed_s"] or 0.0 for c in r["curve"]]
        ys = [0.0] + [c["exact_match"] for c in r["curve"]]
        ax.plot(xs, ys, marker="o", ms=3, label=name)
    ax.set_xlabel("wall time since the start of the run, s (2 shared CPU cores)")
    ax.set_ylabel("held-out exact match (100 pairs)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("configs/tiny_transformer.yaml on zh-en-numbers (0..999)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "article_recipe.json"))
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for name, sets in (("recipe (12-epoch warm start, then GRPO)", []),
                           ("the article's lines alone (no warm start)", ["--set", "training.warm_start_epochs=0"])):
            res[name] = run(name.split(" ")[1], sets, a, Path(d))
            print("%s: after warm start %s, final %.3f, %.0f s" % (name, res[name]["after_warm_start"],
                                                                res[name]["final_exact_match"], res[name]["process_wall_s"]),
                  flush=True)
            for c in res[name]["curve"]:
                print("  step %3d  %6.1f s  exact match %.3f" % (c["step"], c["elapsed_s"] or 0, c["exact_match"]))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"args": vars(a), "runs": res}, indent=2))
    plot(res, Path(a.out).with_suffix(".png"))
    print("wrote %s and %s" % (a.out, Path(a.out).with_suffix(".png")))


if __name__ == "__main__":
    main()
