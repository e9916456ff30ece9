"""Peak memory of micro-gpt GRPO at batch 32 x G 8, 64-token completions, with and without memory options
(issue 7, benchmark 4).

    .venv/bin/python benchmarks/microgpt_memory.py                      # ~3-5 min on 2 shared cores
    .venv/bin/python benchmarks/microgpt_memory.py --steps 3 --configs none microbatch --out /tmp/mem.json
    .venv/bin/python benchmarks/microgpt_memory.py --configs unbounded none       # the bounded default vs before

Model: micro-gpt at its default size (d_model 232, 6 layers, 8 heads, max_len 128: ~3.9M parameters) on
the arithmetic task with max_new_tokens 64, random initialisation (so completions run to ~64 tokens:
the (N, T) tensors of a batch are as long as its longest completion), fp32, CPU, 1 thread.
Configurations (each in its own process; peak = ru_maxrss after --steps GRPO steps):
  unbounded    training.micro_batch_mb=0: one forward/backward over all 256 samples (the old default)
  none         no memory option: the default micro_batch_mb 128 splits the step into micro-batches
               sized from the sequence length and model width (grpo_edge/core/microbatch.py)
  microbatch   minibatch_size 64 + grad_accum_steps 4: the same single optimizer step, 64 samples at a time
  checkpoint   gradient_checkpointing 1 (every block recomputed in backward)
  amp          bf16 autocast (CPU)
  all          microbatch + checkpoint + amp
Goals: < 8 GB with no option, < 4 GB (the seed's device) with options; issue 14: < 1 GB with no option. Writes
benchmarks/results/microgpt_memory.json (or --out).
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (RESULTS, current_rss_mb, interleave, machine, markdown_table, med, peak_rss_mb,  # noqa: E402
                     worker_main, write_json)

OPTIONS = {
    "unbounded": ["training.micro_batch_mb=0"],
    "none": [],
    "microbatch": ["training.minibatch_size=64", "training.grad_accum_steps=4"],
    "checkpoint": ["training.gradient_checkpointing=1"],
    "amp": ["training.amp=true"],
    "all": ["training.minibatch_size=64", "training.grad_accum_steps=4", "training.gradient_checkpointing=1",
            "training.amp=true"],
}


def worker(s):
    from grpo_edge.training_run import GRPOTrainer
    cfg = {"model": {"arch": "micro-gpt"}, "task": {"name": "arithmetic", "max_new_tokens": 64},
           "training": {"batch_size": 32, "threads": 1, "seed": s["seed"], "device": "cpu"},
           "grpo": {"group_size": 8}}
    tr = GRPOTrainer(config=cfg, progress=False, overrides=OPTIONS[s["config"]])
    setup = current_rss_mb()
    times, lengths = [], []
    for _ in range(s["steps"]):
        t0 = time.perf_counter()
        m = tr.train_step()
        times.append(time.perf_counter() - t0)
        lengths.append(m["completion_len"])
    return {"peak_rss_mb": peak_rss_mb(), "setup_rss_mb": setup, "peak_above_setup_mb": peak_rss_mb() - setup,
            "step_s": min(times), "rollout_s": m["rollout_time"], "mean_completion_len": lengths[-1],
            "parameters": tr.num_parameters}


def main():
    worker_main(worker)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    ap.add_argument("--steps", type=int, default=1, help="GRPO steps per configuration")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "microgpt_memory.json"))
    a = ap.parse_args()
    specs = dict((c, {"config": c, "steps": a.steps, "seed": a.seed}) for c in a.configs)
    res = interleave(Path(__file__).resolve(), specs, a.rounds, timeout=3600)
    base = med(res["unbounded"], "peak_rss_mb") if "unbounded" in res else None
    rows = []
    for c in a.configs:
        peak = med(res[c], "peak_rss_mb")
        rows.append([c, " ".join(OPTIONS[c]) or "-", peak, med(res[c], "peak_above_setup_mb"),
                     (peak / base) if base else None, med(res[c], "step_s"), med(res[c], "mean_completion_len"),
                     "yes" if peak < 1024 else "no", "yes" if peak < 4096 else "no", "yes" if peak < 8192 else "no"])
    table = markdown_table(["config", "overrides", "peak RSS MB", "peak above set-up MB", "vs unbounded", "step s",
                            "mean completion tokens", "< 1 GB", "< 4 GB", "< 8 GB"], rows)
    print("\nmicro-gpt %d parameters, batch 32 x G 8, max 64 new tokens\n" % res[a.configs[0]][0]["parameters"] + table)
    write_json(a.out, {"machine": machine(), "args": vars(a), "table": table, "runs": res})


if __name__ == "__main__":
    main()
