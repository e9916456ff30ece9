"""GRPO vs PPO in the same trainer, and the gradient-penalty term on/off (issue 7, benchmark 1).

    .venv/bin/python benchmarks/grpo_vs_ppo.py                      # ~3-5 min on 2 shared cores
    .venv/bin/python benchmarks/grpo_vs_ppo.py --rounds 5 --steps 8 --pen-steps 60 --seeds 0 1 2 --out /tmp/gp.json

Part 1, GRPO vs PPO (grpo.algo=grpo|ppo), batch 32 prompts / start states x G 8, same model, same task:
  arithmetic  micro-gpt of configs/arithmetic.yaml (0.8M parameters); PPO's critic is a second micro-gpt
              with a value head (Trainer._build_critic), so it doubles parameters, Adam state and
              activations: the case where dropping the critic matters;
  cartpole    the 3-layer MLP of configs/cartpole.yaml; PPO's critic is a 64-wide MLP, so both run
              almost the same work (the rollout dominates): the case where it hardly matters.
  Measured per configuration in its own process: steps/s (median over timed steps after one warm-up
  step), peak RSS (ru_maxrss) and the peak above the RSS after set-up (imports, model, task).
Part 2, gradient penalty (grpo.grad_penalty_lambda) off/on: CartPole, 3-layer MLP, batch 4 x G 8 = 32
  episodes (< 64): step time, peak RSS, the fraction of optimizer steps whose gradient norm exceeds 10x
  the running median of the earlier ones, and the greedy return after training (learning outcome).
Threads: 1 per process (torch's default of 2 spins on this loaded 2-core machine). Prints a table and
writes benchmarks/results/grpo_vs_ppo.json (or --out).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (RESULTS, current_rss_mb, interleave, machine, markdown_table, med, peak_rss_mb,  # noqa: E402
                     ratio, worker_main, write_json)

THROUGHPUT = {
    "arithmetic": ["configs/arithmetic.yaml", ["training.warm_start_epochs=0", "task.max_new_tokens=8"]],
    "cartpole": ["configs/cartpole.yaml", ["training.lr_scaling=none"]],
}


def _trainer(config, overrides):
    from grpo_edge.training_run import GRPOTrainer
    return GRPOTrainer(config=config, progress=False, overrides=overrides + ["training.threads=1"])


def throughput_worker(spec):
    cfg, extra = THROUGHPUT[spec["task"]]
    tr = _trainer(cfg, extra + ["grpo.algo=%s" % spec["algo"], "training.batch_size=32", "grpo.group_size=8",
                                "training.seed=%d" % spec.get("seed", 0)])
    setup = current_rss_mb()
    tr.train_step()                                   # warm-up (allocator, first-call overheads)
    times, cpu, env0 = [], [], tr.env_steps
    for _ in range(spec["steps"]):
        c0 = time.process_time()
        m = tr.train_step()
        cpu.append(time.process_time() - c0)          # CPU seconds: less sensitive to other jobs than wall
        times.append(m["step_time"])
    n_critic = sum(p.numel() for p in tr.critic.parameters()) if tr.critic is not None else 0
    return {"steps_per_s": 1.0 / statistics.median(times), "samples_per_s": 256 / statistics.median(times),
            "steps_per_cpu_s": 1.0 / statistics.median(cpu),
            "env_steps_per_s": (tr.env_steps - env0) / sum(times),   # cartpole: work per step grows with learning
            "peak_rss_mb": peak_rss_mb(), "setup_rss_mb": setup, "peak_above_setup_mb": peak_rss_mb() - setup,
            "policy_params": sum(p.numel() for p in tr.policy.parameters()), "critic_params": n_critic}


def penalty_worker(spec):
    tr = _trainer("configs/cartpole.yaml", ["training.batch_size=4", "grpo.group_size=8", "training.seed=%d" % spec["seed"],
                                            "grpo.grad_penalty_lambda=%g" % spec["lam"], "task.eval_episodes=20"])
    norms = []
    step = tr._optimizer_step

    def recording_step():                             # the pre-clipping global norm of every optimizer step
        n = step()
        norms.append(n)
        return n
    tr._optimizer_step = recording_step
    setup = current_rss_mb()
    times = []
    t0 = time.time()
    for _ in range(spec["steps"]):
        times.append(tr.train_step()["step_time"])
    train_s = time.time() - t0
    warm = 8
    spikes = [norms[i] > 10 * statistics.median(norms[:i]) for i in range(warm, len(norms))]
    return {"step_time_s": statistics.median(times), "train_s": train_s, "peak_rss_mb": peak_rss_mb(),
            "peak_above_setup_mb": peak_rss_mb() - setup, "optimizer_steps": len(norms),
            "spike_frac": sum(spikes) / float(max(1, len(spikes))), "grad_norm_median": statistics.median(norms),
            "grad_norm_max": max(norms), "return_after": tr.evaluate()["return"]}


def worker(spec):
    return throughput_worker(spec) if spec["kind"] == "throughput" else penalty_worker(spec)


def main():
    worker_main(worker)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per configuration")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per throughput run (after 1 warm-up)")
    ap.add_argument("--tasks", nargs="+", default=["arithmetic", "cartpole"], choices=sorted(THROUGHPUT))
    ap.add_argument("--pen-steps", type=int, default=25, help="training steps per gradient-penalty run")
    ap.add_argument("--lam", type=float, default=0.1, help="grad_penalty_lambda of the 'on' runs")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds of the gradient-penalty runs")
    ap.add_argument("--out", default=str(RESULTS / "grpo_vs_ppo.json"))
    a = ap.parse_args()
    me = Path(__file__).resolve()
    out = {"machine": machine(), "args": vars(a), "throughput": {}, "penalty": {}}
    rows = []
    for task in a.tasks:
        print("GRPO vs PPO on %s, batch 32 x G 8" % task, flush=True)
        specs = dict((algo, {"kind": "throughput", "task": task, "algo": algo, "steps": a.steps})
                     for algo in ("grpo", "ppo"))
        res = interleave(me, specs, a.rounds)
        g, p = res["grpo"], res["ppo"]
        row = {"task": task, "grpo_steps_per_s": med(g, "steps_per_s"), "ppo_steps_per_s": med(p, "steps_per_s"),
               "cpu_speed_ratio": ratio(med(g, "steps_per_cpu_s"), med(p, "steps_per_cpu_s")),
               "env_steps_per_s_ratio": ratio(med(g, "env_steps_per_s"), med(p, "env_steps_per_s")),
               "grpo_peak_rss_mb": med(g, "peak_rss_mb"), "ppo_peak_rss_mb": med(p, "peak_rss_mb"),
               "grpo_peak_above_setup_mb": med(g, "peak_above_setup_mb"),
               "ppo_peak_above_setup_mb": med(p, "peak_above_setup_mb"),
               "policy_params": g[0]["policy_params"], "critic_params": p[0]["critic_params"]}
        row["speed_ratio"] = ratio(row["grpo_steps_per_s"], row["ppo_steps_per_s"])
        row["memory_ratio"] = ratio(row["grpo_peak_rss_mb"], row["ppo_peak_rss_mb"])
        row["memory_above_setup_ratio"] = ratio(row["grpo_peak_above_setup_mb"], row["ppo_peak_above_setup_mb"])
        out["throughput"][task] = {"summary": row, "runs": res}
        rows.append([task, row["grpo_steps_per_s"], row["ppo_steps_per_s"], row["speed_ratio"], row["cpu_speed_ratio"],
                     row["env_steps_per_s_ratio"],
                     row["grpo_peak_rss_mb"], row["ppo_peak_rss_mb"], row["memory_ratio"],
                     row["memory_above_setup_ratio"]])
    t1 = markdown_table(["task", "GRPO steps/s", "PPO steps/s", "speed GRPO/PPO (goal >= 1.5)",
                         "same, per CPU second", "env steps (tokens) per s GRPO/PPO", "GRPO peak MB",
                         "PPO peak MB", "memory GRPO/PPO (goal <= 0.6)", "memory above set-up GRPO/PPO"], rows)
    print("Gradient penalty off/on: CartPole, MLP 4-64-64-2, batch 4 x G 8", flush=True)
    specs = {}
    for seed in a.seeds:
        for lam in (0.0, a.lam):
            specs["lam=%g seed=%d" % (lam, seed)] = {"kind": "penalty", "lam": lam, "seed": seed, "steps": a.pen_steps}
    res = interleave(me, specs, 1)
    rows2 = []
    for lam in (0.0, a.lam):
        runs = [res["lam=%g seed=%d" % (lam, s)][0] for s in a.seeds]
        summ = dict((k, statistics.mean(r[k] for r in runs)) for k in
                    ("step_time_s", "peak_rss_mb", "spike_frac", "grad_norm_median", "grad_norm_max", "return_after"))
        out["penalty"]["lam=%g" % lam] = {"summary": summ, "runs": runs}
        rows2.append(["off" if lam == 0 else "on (lambda %g)" % lam, summ["step_time_s"], summ["peak_rss_mb"],
                      summ["spike_frac"], summ["grad_norm_median"], summ["grad_norm_max"], summ["return_after"]])
    t2 = markdown_table(["penalty", "step s", "peak MB", "steps with norm > 10x running median",
                         "median grad norm", "max grad norm", "greedy return after"], rows2)
    out["tables"] = [t1, t2]
    print("\n" + t1 + "\n\n" + t2)
    write_json(a.out, out)


if __name__ == "__main__":
    main()
