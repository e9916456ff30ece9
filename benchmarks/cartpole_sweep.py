"""Sample efficiency of the CartPole recipe under overrides: env steps to a 100-episode greedy mean >= 475
(issue 14, row 1: how configs/cartpole.yaml's clip_eps 0.7 was chosen).

    .venv/bin/python benchmarks/cartpole_sweep.py                                   # the recipe, seeds 0-9
    .venv/bin/python benchmarks/cartpole_sweep.py --seeds 10 11 12 --set grpo.clip_eps=0.2 training.batch_size=2

The evaluation runs after EVERY update (the same held-out start states as benchmarks/vs_sb3.py: screen 10
episodes, then 100), so the env-step count is exact and, with 1 torch thread, the same on every run for
a seed: sweeps can run two at a time on a busy machine. Wall times are printed only as a rough guide
(evaluations excluded); benchmarks/vs_sb3.py is the timing. Prints one line per setting.
"""
import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 475.0


def steps_to_solve(seed, overrides, max_updates):
    """(seed, env steps when solved or None, updates, training seconds) for one run of the recipe."""
    from grpo_edge.tasks import get_task
    from grpo_edge.training_run import GRPOTrainer
    judge = get_task("cartpole", {"eval_episodes": 100}, seed=0)
    tr = GRPOTrainer(config=str(ROOT / "configs" / "cartpole.yaml"), progress=False,
                     overrides=["training.seed=%d" % seed, "training.threads=1", "training.eval_every=0"]
                     + list(overrides))
    train_s = 0.0
    for update in range(1, max_updates + 1):
        t0 = time.perf_counter()
        tr.train_step()
        train_s += time.perf_counter() - t0
        if (judge.evaluate(tr.policy, "test", 10)["return"] >= TARGET
                and judge.evaluate(tr.policy, "test", 100)["return"] >= TARGET):
            return seed, tr.env_steps, update, train_s
    return seed, None, max_updates, train_s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--set", dest="overrides", nargs="*", default=[], help="key=value overrides of the recipe")
    ap.add_argument("--max-updates", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    with ProcessPoolExecutor(a.jobs) as ex:
        runs = list(ex.map(steps_to_solve, a.seeds, [a.overrides] * len(a.seeds), [a.max_updates] * len(a.seeds)))
    steps = [r[1] if r[1] is not None else float("inf") for r in runs]
    print("%s | env steps median %s, max %s, solved %d/%d | %s" % (
        " ".join(a.overrides) or "(recipe)", statistics.median(steps), max(steps),
        sum(r[1] is not None for r in runs), len(runs),
        " ".join("s%d:%s/%du/%.1fs" % r for r in runs)))


if __name__ == "__main__":
    main()
