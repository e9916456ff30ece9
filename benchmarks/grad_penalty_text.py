"""The gradient penalty (grpo.grad_penalty_lambda) on the text models: what it costs and what it does (issue 31).

    .venv/bin/python benchmarks/grad_penalty_text.py                    # ~6-8 min on 2 shared cores
    .venv/bin/python benchmarks/grad_penalty_text.py --steps 10 --rounds 1 --out /tmp/gp_text.json

For each recipe (configs/arithmetic.yaml: micro-gpt, 0.8M parameters; configs/zh_en_numbers.yaml:
tiny-transformer), lambda = 0 and lambda = --lam, same seed, each in its own process, interleaved round by
round: the recipe's warm start, then --steps GRPO steps. Measured: the median step time over the steps after
the first, peak RSS (ru_maxrss), the policy gradient norm the penalty sees, and the exact match on the
recipe's held-out problems after the warm start and after the steps. With the penalty on, attention runs
written out (MatMul / Softmax, core/models/_layers.py: double_backward) instead of the fused kernel, and
each minibatch takes a second backward pass through the gradient: the step-time ratio is both costs.
Threads: 1 per process. Prints a table and writes benchmarks/results/grad_penalty_text.json (or --out).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, interleave, machine, markdown_table, med, peak_rss_mb, ratio, worker_main, write_json  # noqa: E402

RECIPES = {"arithmetic": "configs/arithmetic.yaml", "zh-en-numbers": "configs/zh_en_numbers.yaml"}


def worker(spec):
    from grpo_edge.training_run import GRPOTrainer
    tr = GRPOTrainer(config=spec["config"], progress=False, overrides=[
        "training.steps=%d" % spec["steps"], "training.eval_every=0", "training.threads=1",
        "grpo.grad_penalty_lambda=%g" % spec["lam"], "training.seed=%d" % spec["seed"]])
    t0 = time.time()
    summary = tr.train()
    wall = time.time() - t0
    times = [m["step_time"] for m in tr.history[1:]]
    metric = summary["metric"]
    return {"lam": spec["lam"], "step_time_s": statistics.median(times) if times else None,
            "peak_rss_mb": peak_rss_mb(), "wall_s": wall, "metric": metric,
            "after_warm_start": ((summary.get("warm_start") or {}).get("after") or {}).get(metric),
            "after_steps": summary["final_" + metric],
            "policy_grad_norm": statistics.median([m.get("policy_grad_norm", 0.0) for m in tr.history]) if spec["lam"] else None,
            "grad_penalty": statistics.median([m.get("grad_penalty", 0.0) for m in tr.history]) if spec["lam"] else None}


def main():
    worker_main(worker)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12, help="GRPO steps after the warm start")
    ap.add_argument("--lam", type=float, default=0.3, help="grad_penalty_lambda of the 'on' runs (the seed's 0.3)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds per configuration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", nargs="+", default=sorted(RECIPES), choices=sorted(RECIPES))
    ap.add_argument("--out", default=str(RESULTS / "grad_penalty_text.json"))
    a = ap.parse_args()
    out = {"machine": machine(), "args": vars(a), "results": {}}
    rows = []
    for task in a.tasks:
        print("%s (%s): lambda 0 vs %g, %d steps" % (task, RECIPES[task], a.lam, a.steps), flush=True)
        specs = dict(("lam=%g" % lam, {"config": RECIPES[task], "steps": a.steps, "lam": lam, "seed": a.seed})
                     for lam in (0.0, a.lam))
        res = interleave(Path(__file__).resolve(), specs, a.rounds, timeout=3600)
        off, on = res["lam=0"], res["lam=%g" % a.lam]
        out["results"][task] = res
        rows.append([task, med(off, "step_time_s"), med(on, "step_time_s"),
                     ratio(med(on, "step_time_s"), med(off, "step_time_s")), med(off, "peak_rss_mb"),
                     med(on, "peak_rss_mb"), med(off, "after_warm_start"), med(off, "after_steps"),
                     med(on, "after_steps"), med(on, "policy_grad_norm")])
    table = markdown_table(["task", "step s (lam 0)", "step s (lam %g)" % a.lam, "time ratio", "peak RSS MB (0)",
                            "peak RSS MB (%g)" % a.lam, "exact match after warm start", "after steps (0)",
                            "after steps (%g)" % a.lam, "policy grad norm (median)"], rows)
    print(table)
    out["table"] = table
    write_json(a.out, out)


if __name__ == "__main__":
    main()
