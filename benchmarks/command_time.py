"""The whole command, start to exit: `grpo-edge train --config configs/cartpole.yaml` vs an SB3 script
(issue 14, row 2).

    .venv/bin/python benchmarks/command_time.py                          # 3 seeds x 2 rounds, ~5 min on 2 shared cores
    .venv/bin/python benchmarks/command_time.py --seeds 0 1 2 3 4 --rounds 1 --out /tmp/cmd.json

Ours: the CLI exactly as a user runs it (`python -m grpo_edge.cli.main train --config
configs/cartpole.yaml --save-dir <tmp> --quiet --set training.seed=S`): imports, training with its
100-episode evaluations every 2 updates until the target 475, checkpoints, metrics, curves.svg, summary.
SB3: a script that imports stable-baselines3, trains PPO with rl-zoo's CartPole-v1 settings (as
benchmarks/vs_sb3.py) until the same 100-episode greedy evaluation on the same held-out start states reaches
475 (screened by 10 episodes, checked after the first update that ends 1 s of training time after the
previous check; it uses our batched evaluator, the cheapest evaluation it could have), then saves the
model. Each run is a fresh interpreter timed from spawn to exit; runs interleave ours, SB3, ours, ...
Besides the ratio it reports, for ours, the seconds outside the training loop (process wall minus the
loop's wall_seconds from summary.json). Writes benchmarks/results/command_time.json (or --out).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, ROOT, interleave, machine, markdown_table, med, ratio, worker_main, write_json  # noqa: E402


def _env(root=ROOT):
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def ours_worker(s):
    run = tempfile.mkdtemp(prefix="cmdtime_")
    cmd = [sys.executable, "-m", "grpo_edge.cli.main", "train", "--config", "configs/cartpole.yaml", "--save-dir",
           run, "--quiet", "--set", "training.seed=%d" % s["seed"]]
    root = s.get("root") or str(ROOT)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=root, env=_env(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode()[-2000:])
    summary = json.loads(Path(run, "summary.json").read_text())
    return {"wall_s": wall, "loop_s": summary["wall_seconds"], "outside_loop_s": wall - summary["wall_seconds"],
            "solved": summary["final_return"] >= 475, "env_steps": summary["env_steps"]}


def sb3_script(seed):
    """What the SB3 side runs in its own interpreter (imports included in its time)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    import vs_sb3
    torch.set_num_threads(1)

    class Greedy(torch.nn.Module):
        def __init__(self, policy):
            super(Greedy, self).__init__()
            self.policy = policy

        def forward(self, obs):
            return self.policy.get_distribution(obs).distribution.logits

    class Stop(BaseCallback):
        def __init__(self, judge):
            super(Stop, self).__init__()
            self.judge, self.train_s, self.t0, self.done = judge, 0.0, None, False

        def _on_training_start(self):
            self.t0 = time.perf_counter()

        def _on_rollout_start(self):
            self.train_s += time.perf_counter() - self.t0
            if self.judge.due(self.train_s):
                self.model.policy.set_training_mode(False)
                self.done = self.judge.solved(Greedy(self.model.policy), self.train_s, self.num_timesteps)
            self.t0 = time.perf_counter()

        def _on_step(self):
            return not self.done

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                learning_rate=lambda f: f * 1e-3, clip_range=lambda f: f * 0.2, seed=seed, device="cpu", verbose=0)
    cb = Stop(vs_sb3.Judge(seed, 1.0))
    model.learn(total_timesteps=100000, callback=cb)
    model.save(os.path.join(tempfile.mkdtemp(prefix="cmdtime_sb3_"), "ppo_cartpole"))
    print(json.dumps({"solved": cb.done, "env_steps": int(model.num_timesteps)}))


def sb3_worker(s):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--sb3-script", str(s["seed"])]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=str(ROOT), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode()[-2000:])
    out = json.loads([ln for ln in r.stdout.decode().splitlines() if ln.startswith("{")][-1])
    out["wall_s"] = wall
    return out


def worker(spec):
    return sb3_worker(spec) if spec["framework"] == "sb3" else ours_worker(spec)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--sb3-script":
        sb3_script(int(sys.argv[2]))
        return
    worker_main(worker)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", default=None, help="another checkout (e.g. `git worktree add /tmp/before "
                    "<commit>`) whose CLI runs interleaved as 'before'")
    ap.add_argument("--out", default=str(RESULTS / "command_time.json"))
    a = ap.parse_args()
    import stable_baselines3
    specs = {}
    for seed in a.seeds:
        for fw in ("grpo-edge", "sb3") + (("before",) if a.before else ()):
            specs["%s seed=%d" % (fw, seed)] = {"framework": fw, "seed": seed,
                                                "root": a.before if fw == "before" else None}
    res = interleave(Path(__file__).resolve(), specs, a.rounds, timeout=1800)
    rows, per = [], {"grpo-edge": [], "sb3": [], "before": []}
    for name, runs in res.items():
        fw = name.split()[0]
        per[fw] += runs
        rows.append([name, med(runs, "wall_s"), med(runs, "outside_loop_s") if fw != "sb3" else None,
                     "%d/%d" % (sum(bool(r["solved"]) for r in runs), len(runs))])
    ours, theirs = med(per["grpo-edge"], "wall_s"), med(per["sb3"], "wall_s")
    rows.append(["median grpo-edge", ours, med(per["grpo-edge"], "outside_loop_s"), ""])
    if a.before:
        rows.append(["median before (%s)" % a.before, med(per["before"], "wall_s"),
                     med(per["before"], "outside_loop_s"), ""])
        rows.append(["ratio before / SB3", ratio(med(per["before"], "wall_s"), theirs), None, ""])
    rows.append(["median SB3 %s script" % stable_baselines3.__version__, theirs, None, ""])
    rows.append(["ratio grpo-edge / SB3 (goal <= 0.5)", ratio(ours, theirs), None, ""])
    table = markdown_table(["run", "start-to-exit s (median over rounds)", "outside the training loop s",
                            "solved"], rows)
    print("\n" + table)
    write_json(a.out, {"machine": machine(), "args": vars(a), "sb3": stable_baselines3.__version__,
                       "ratio": ratio(ours, theirs), "table": table, "runs": res})


if __name__ == "__main__":
    main()
