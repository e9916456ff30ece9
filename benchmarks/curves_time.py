"""Cost of the end-of-run training curves: the matplotlib PNG (grpo_edge/plots.py as of --before) against the
standard-library SVG now, each in a fresh interpreter (issue 14, row 2: part of the `grpo-edge train` command).

    .venv/bin/python benchmarks/curves_time.py                       # 10-step CartPole run's metrics, 5 rounds
    .venv/bin/python benchmarks/curves_time.py --metrics runs/x/metrics.jsonl --rounds 9 --out /tmp/curves.json

Each worker times, inside itself, from before importing the plot module to after the file is written
(import + draw + write: what `finish` pays at the end of a run); process_wall_s adds the interpreter start.
Runs interleave old, new, old, new, ...; the table gives medians and their ratio.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, interleave, machine, markdown_table, med, ratio, worker_main, write_json  # noqa: E402

BEFORE = "8d2972b"          # the last commit whose plot_curves drew curves.png with matplotlib


def worker(s):
    t0 = time.perf_counter()
    if s["impl"] == "old":
        sys.path.insert(0, s["module_dir"])
        import old_plots as plots
    else:
        from grpo_edge import plots
    with open(s["metrics"]) as f:
        history = [json.loads(line) for line in f if line.strip()]
    path = plots.plot_curves(history, s["out"], title="cartpole / mlp", metric="eval_return")
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "bytes": Path(path).stat().st_size, "points": len(history),
            "matplotlib_imported": "matplotlib" in sys.modules}


def _metrics(tmp):
    """A real metrics.jsonl: a 10-step CartPole run."""
    run = Path(tmp) / "run"
    subprocess.run([sys.executable, "-m", "grpo_edge.cli.main", "train", "--config", "configs/cartpole.yaml",
                    "--save-dir", str(run), "--quiet", "--set", "training.steps=10"], cwd=str(ROOT), check=True)
    return str(run / "metrics.jsonl")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--metrics", help="a run's metrics.jsonl (default: make one with a 10-step CartPole run)")
    ap.add_argument("--before", default=BEFORE, help="git revision whose grpo_edge/plots.py is the old one")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None, help="JSON results (default: print only)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="curves_time_")
    old_src = subprocess.run(["git", "show", a.before + ":grpo_edge/plots.py"], cwd=str(ROOT), check=True,
                             stdout=subprocess.PIPE).stdout
    Path(tmp, "old_plots.py").write_bytes(old_src)
    metrics = a.metrics or _metrics(tmp)
    specs = {"old: matplotlib curves.png": {"impl": "old", "module_dir": tmp, "metrics": metrics,
                                            "out": str(Path(tmp, "curves.png"))},
             "new: stdlib curves.svg": {"impl": "new", "metrics": metrics, "out": str(Path(tmp, "curves.svg"))}}
    res = interleave(__file__, specs, a.rounds)
    rows = [[name, med(r, "wall_s"), min(x["wall_s"] for x in r), max(x["wall_s"] for x in r),
             med(r, "process_wall_s"), r[0]["bytes"], r[0]["matplotlib_imported"]] for name, r in res.items()]
    old, new = res["old: matplotlib curves.png"], res["new: stdlib curves.svg"]
    print(markdown_table(["", "import+draw+write median s", "min", "max", "process wall median s", "file bytes",
                          "matplotlib imported"], rows))
    print("new / old (import+draw+write medians): %.4f; saved %.3f s per run"
          % (ratio(med(new, "wall_s"), med(old, "wall_s")), med(old, "wall_s") - med(new, "wall_s")))
    if a.out:
        write_json(a.out, {"machine": machine(), "metrics": metrics, "before": a.before, "rounds": a.rounds,
                           "results": res})


if __name__ == "__main__":
    worker_main(worker)
    main()
