"""grpo-edge against Stable-Baselines3 on ten gymnasium environments, at equal wall-clock budgets (issue 41).

    .venv/bin/pip install -e ".[bench]"                              # SB3 2.9.2 and Box2D (torch stays 2.13.0)
    .venv/bin/python benchmarks/control_suite.py                     # every run the JSON lacks (resumes); hours
    .venv/bin/python benchmarks/control_suite.py --env CartPole-v1 --seed 0 --algo grpo-edge
    .venv/bin/python benchmarks/control_suite.py --env Hopper-v5 --algo sb3-sac --seed 0 1 2
    .venv/bin/python benchmarks/control_suite.py --report            # the table and plots from the JSON only

The protocol, the same for every library:
- Each run is one process with one torch thread; it trains for the env's budget of training seconds
  (BUDGETS; --budget-s overrides, for a quick look), the clock stopped while it is evaluated.
- Evaluations are greedy (the Gaussian's mean, SB3's deterministic action) on the same held-out start states:
  the first episodes of grpo-edge's evaluation seeds for the env's task built with seed 0, whatever the run's
  own seed; continuous actions are clipped to the action bounds, observations pass through SB3's VecNormalize
  statistics where its recipe normalizes. Every budget/200 training seconds over the first budget/20, then
  every budget/20: `eval_n` episodes (a learning curve against wall time and env steps); at the budget:
  `final_n` episodes, the final greedy return.
- Time to threshold: the first evaluation at or above the env's spec.reward_threshold (none where the spec has
  none), its training seconds and env steps; the resolution is budget/200 up to budget/20, then budget/20.
- grpo-edge trains with the recipe `grpo-edge train --set task.name=<env>` picks (config.choose_recipe), for its
  training.steps or the budget, whichever ends first (the target_metric stop is off here). SB3 trains PPO with
  rl-zoo's tuned hyperparameters for the env (hyperparams/ppo.yml of DLR-RM/rl-baselines3-zoo; v3 / v2 entries
  for the v5 / v3 envs), for its n_timesteps or the budget, whichever ends first (so its linear schedules are
  rl-zoo's), and on the MuJoCo envs also SAC (rl-zoo's MuJoCo setting: defaults with learning_starts 10000),
  the choice an SB3 user makes there.

Results: one JSON (--json, default benchmarks/results/control_suite.json) that each finished run is added to
(written atomically); runs already in it are skipped, so the suite runs in pieces and resumes after a stop. A
run that crashes inside a library is recorded as failed with its reason and the suite goes on. --report writes
the Markdown table (median and spread over seeds of the final greedy return, time to threshold) and the plots
(control_suite/<env>.png per env, overview.png) beside the JSON.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine, markdown_table, run_worker, worker_main  # noqa: E402

SUITE_VERSION = 1
ALGOS = ("grpo-edge", "sb3-ppo", "sb3-sac")
MUJOCO = ("InvertedPendulum-v5", "InvertedDoublePendulum-v5", "Hopper-v5", "HalfCheetah-v5")

# env -> training seconds per run, greedy episodes per curve point / at the end
BUDGETS = {
    "CartPole-v1": (30, 20, 50), "Acrobot-v1": (60, 20, 50), "LunarLander-v3": (240, 10, 30),
    "Pendulum-v1": (60, 20, 50), "LunarLanderContinuous-v3": (240, 10, 30),
    "MountainCarContinuous-v0": (120, 10, 30), "InvertedPendulum-v5": (120, 10, 20),
    "InvertedDoublePendulum-v5": (240, 10, 20), "Hopper-v5": (480, 10, 20), "HalfCheetah-v5": (480, 5, 10),
}

# rl-zoo's PPO hyperparameters (hyperparams/ppo.yml); "lin_X" is X times the remaining progress
PPO_ZOO = {
    "CartPole-v1": dict(n_envs=8, n_timesteps=1e5, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                        n_epochs=20, ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2"),
    "Acrobot-v1": dict(normalize=True, n_envs=16, n_timesteps=1e6, n_steps=256, gae_lambda=0.94, gamma=0.99,
                       n_epochs=4, ent_coef=0.0),
    "LunarLander-v3": dict(n_envs=16, n_timesteps=1e6, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999,
                           n_epochs=4, ent_coef=0.01),
    "Pendulum-v1": dict(n_envs=4, n_timesteps=1e5, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                        ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4),
    "LunarLanderContinuous-v3": dict(n_envs=16, n_timesteps=1e6, n_steps=1024, batch_size=64, gae_lambda=0.98,
                                     gamma=0.999, n_epochs=4, ent_coef=0.01),
    "MountainCarContinuous-v0": dict(normalize=True, n_envs=1, n_timesteps=2e4, batch_size=256, n_steps=8,
                                     gamma=0.9999, learning_rate=7.77e-05, ent_coef=0.00429, clip_range=0.1,
                                     n_epochs=10, gae_lambda=0.9, max_grad_norm=5, vf_coef=0.19, use_sde=True,
                                     policy_kwargs=dict(log_std_init=-3.29, ortho_init=False)),
    "InvertedPendulum-v5": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=64, n_steps=32,
                                gamma=0.999, learning_rate=0.000222425, ent_coef=1.37976e-07, clip_range=0.4,
                                n_epochs=5, gae_lambda=0.9, max_grad_norm=0.3, vf_coef=0.19816),
    "InvertedDoublePendulum-v5": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=512, n_steps=128,
                                      gamma=0.98, learning_rate=0.000155454, ent_coef=1.05057e-06, clip_range=0.4,
                                      n_epochs=10, gae_lambda=0.8, max_grad_norm=0.5, vf_coef=0.695929),
    "Hopper-v5": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=32, n_steps=512, gamma=0.999,
                      learning_rate=9.80828e-05, ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99,
                      max_grad_norm=0.7, vf_coef=0.835671,
                      policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn="relu",
                                         net_arch=dict(pi=[256, 256], vf=[256, 256]))),
    "HalfCheetah-v5": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=64, n_steps=512, gamma=0.98,
                           learning_rate=2.0633e-05, ent_coef=0.000401762, clip_range=0.1, n_epochs=20,
                           gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096,
                           policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn="relu",
                                              net_arch=dict(pi=[256, 256], vf=[256, 256]))),
}
SAC_ZOO = dict(n_timesteps=1e6, learning_starts=10000)     # rl-zoo's MuJoCo SAC: SB3's defaults otherwise

CURVE_POINTS = 20


class BadInput(Exception):
    """A command-line or results-file problem: one line, exit 2."""


def algos_for(env_id):
    return ALGOS if env_id in MUJOCO else ALGOS[:2]


# ------------------------------------------------------------------------------------------- the judge
class Judge(object):
    """The same greedy evaluation for every library: held-out start states of the env's task built with
    seed 0, every budget/20 training seconds, and final_n episodes at the budget."""

    def __init__(self, env_id, budget_s):
        from grpo_edge.config.families import reward_threshold
        from grpo_edge.tasks import get_task
        _, self.eval_n, self.final_n = BUDGETS[env_id]
        self.task = get_task(env_id, {"eval_episodes": self.final_n}, seed=0)
        self.threshold = reward_threshold(env_id)
        self.budget_s, self.every_s = budget_s, budget_s / float(CURVE_POINTS)
        self.next_at, self.curve, self.reached = 0.0, [], None
        self.eval_s = 0.0

    def due(self, train_s):
        return train_s >= self.next_at

    def point(self, policy, train_s, env_steps):
        t0 = time.perf_counter()
        ret = self.task.evaluate(policy, "test", self.eval_n)["return"]
        self.eval_s += time.perf_counter() - t0
        self.curve.append([round(train_s, 3), int(env_steps), round(ret, 3)])
        if self.reached is None and self.threshold is not None and ret >= self.threshold:
            self.reached = {"train_s": round(train_s, 3), "env_steps": int(env_steps), "return": round(ret, 3)}
        # every budget/200 s over the first budget/20 s (where a threshold is often crossed), then every budget/20
        self.next_at = train_s + (self.every_s / 10.0 if train_s < self.every_s else self.every_s)

    def result(self, policy, train_s, env_steps):
        self.point(policy, train_s, env_steps)
        final = self.task.evaluate(policy, "test", self.final_n)
        return {"status": "ok", "final_return": round(final["return"], 3),
                "final_return_std": round(final["return_std"], 3), "final_n": self.final_n,
                "train_s": round(train_s, 3), "env_steps": int(env_steps), "threshold": self.threshold,
                "reached": self.reached, "curve": self.curve, "eval_n": self.eval_n,
                "eval_s": round(self.eval_s, 2)}


# ------------------------------------------------------------------------------------------- grpo-edge
def grpo_edge_run(env_id, seed, budget_s, overrides=()):
    import torch
    from grpo_edge.config import choose_recipe
    from grpo_edge.training_run import GRPOTrainer
    torch.set_num_threads(1)
    recipe, why = choose_recipe(env_id)
    tr = GRPOTrainer(config=recipe, progress=False,
                     overrides=["training.seed=%d" % seed, "training.threads=1", "training.eval_every=0",
                                "training.device=cpu", "training.target_metric=null"] + list(overrides))
    judge, train_s = Judge(env_id, budget_s), 0.0
    steps = tr.config_obj.training.steps          # the recipe's length, as SB3's rl-zoo n_timesteps is its
    while train_s < budget_s and tr.step < steps:
        if judge.due(train_s):
            judge.point(tr.policy, train_s, tr.env_steps)
        t0 = time.perf_counter()
        tr.train_step()
        train_s += time.perf_counter() - t0
    out = judge.result(tr.policy, train_s, tr.env_steps)
    out.update(recipe=why, updates=tr.step, stopped="budget" if train_s >= budget_s else "the recipe's %d steps"
               % steps)
    return out


# ------------------------------------------------------------------------------------------- SB3
def _schedule(v):
    if isinstance(v, str) and v.startswith("lin_"):
        x = float(v[4:])
        return lambda progress: progress * x
    return v


class _SB3Greedy(object):
    """Wraps an SB3 model as a policy our task's evaluate runs: the deterministic action (a one-hot row for a
    Discrete space, whose argmax is the action), on VecNormalize's view of the observation."""

    def __new__(cls, model):
        import numpy as np
        import torch

        class Greedy(torch.nn.Module):
            def __init__(self):
                super(Greedy, self).__init__()
                self._device_anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)

            def forward(self, obs):
                o = obs.numpy()
                vecnorm = model.get_vec_normalize_env()
                if vecnorm is not None:
                    o = vecnorm.normalize_obs(o)
                a, _ = model.policy.predict(o, deterministic=True)
                if hasattr(model.action_space, "n"):
                    return torch.nn.functional.one_hot(torch.as_tensor(a, dtype=torch.long),
                                                       int(model.action_space.n)).float()
                return torch.as_tensor(np.asarray(a, dtype=np.float32))
        return Greedy()


def sb3_run(env_id, seed, budget_s, algo):
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    torch.set_num_threads(1)
    judge = Judge(env_id, budget_s)

    class Clock(BaseCallback):
        """Training seconds (evaluations excluded); evaluates when due, stops at the budget."""

        def __init__(self):
            super(Clock, self).__init__()
            self.train_s, self.t0 = 0.0, None

        def _on_training_start(self):
            self.t0 = time.perf_counter()

        def _on_step(self):
            now = time.perf_counter()
            self.train_s += now - self.t0
            self.t0 = now
            if self.train_s >= budget_s:
                return False
            if judge.due(self.train_s):
                self.model.policy.set_training_mode(False)
                judge.point(_SB3Greedy(self.model), self.train_s, self.num_timesteps)
                self.t0 = time.perf_counter()
            return True

    if algo == "sb3-ppo":
        hp = dict(PPO_ZOO[env_id])
        normalize, n_envs, total = hp.pop("normalize", False), hp.pop("n_envs"), int(hp.pop("n_timesteps"))
        kw = hp.pop("policy_kwargs", None)
        if kw is not None and kw.get("activation_fn") == "relu":
            kw = dict(kw, activation_fn=torch.nn.ReLU)
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
        if normalize:
            env = VecNormalize(env, gamma=hp.get("gamma", 0.99))
        hp = {k: _schedule(v) for k, v in hp.items()}
        model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, policy_kwargs=kw, **hp)
    else:
        total = int(SAC_ZOO["n_timesteps"])
        env = make_vec_env(env_id, n_envs=1, seed=seed)
        model = SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0, learning_starts=SAC_ZOO["learning_starts"])
    clock = Clock()
    model.learn(total_timesteps=total, callback=clock)
    model.policy.set_training_mode(False)
    import stable_baselines3
    out = judge.result(_SB3Greedy(model), clock.train_s, model.num_timesteps)
    out.update(sb3=stable_baselines3.__version__, stopped="budget" if clock.train_s >= budget_s
               else "rl-zoo's n_timesteps %d" % total)
    return out


def worker(spec):
    """One run in this (fresh) process: a crash inside a library is a failed run with its reason."""
    try:
        if spec["algo"] == "grpo-edge":
            return grpo_edge_run(spec["env"], spec["seed"], spec["budget_s"], spec.get("overrides", ()))
        return sb3_run(spec["env"], spec["seed"], spec["budget_s"], spec["algo"])
    except Exception as e:
        return {"status": "failed", "reason": "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:300]
                                                           if str(e).strip() else ""),
                "traceback": traceback.format_exc()[-2000:]}


# ------------------------------------------------------------------------------------------- the results file
def load_results(path):
    path = Path(path)
    if not path.exists():
        return {"version": SUITE_VERSION, "script": "benchmarks/control_suite.py", "runs": {}}
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise BadInput("%s is not JSON (%s)" % (path, e))
    if not isinstance(data, dict) or data.get("script") != "benchmarks/control_suite.py":
        raise BadInput("%s was not written by benchmarks/control_suite.py" % path)
    if data.get("version") != SUITE_VERSION:
        raise BadInput("%s is from version %s of benchmarks/control_suite.py, this is version %d: give another "
                       "--json (its runs are not comparable)" % (path, data.get("version"), SUITE_VERSION))
    return data


def save_results(path, data):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(str(tmp), str(path))


def run_key(env_id, algo, seed, budget_s):
    return "%s/%s/seed%d/%gs" % (env_id, algo, seed, budget_s)


# ------------------------------------------------------------------------------------------- the report
def summarize(data):
    """{env: {algo: {"n", "median", "lo", "hi", "reached", "median_time", "median_steps", "failed"}}}."""
    out = {}
    for key, run in data["runs"].items():
        env_id, algo = key.split("/")[:2]
        cell = out.setdefault(env_id, {}).setdefault(algo, {"runs": [], "failed": []})
        (cell["runs"] if run.get("status") == "ok" else cell["failed"]).append(run)
    for env_id, algos in out.items():
        for algo, cell in algos.items():
            finals = [r["final_return"] for r in cell["runs"]]
            hits = [r["reached"] for r in cell["runs"] if r.get("reached")]
            cell.update(n=len(finals), median=statistics.median(finals) if finals else None,
                        lo=min(finals) if finals else None, hi=max(finals) if finals else None,
                        reached=len(hits),
                        median_time=statistics.median([h["train_s"] for h in hits]) if hits else None,
                        median_steps=statistics.median([h["env_steps"] for h in hits]) if hits else None)
    return out


def report(data, json_path):
    summary = summarize(data)
    rows, wins, time_ratios = [], 0, []
    for env_id in [e for e in BUDGETS if e in summary]:
        cells = summary[env_id]
        budgets = sorted(set(k.rsplit("/", 1)[1] for k in data["runs"] if k.startswith(env_id + "/")))
        row = [env_id, ", ".join(budgets)]
        for algo in ALGOS:
            c = cells.get(algo)
            if c is None or (not c["n"] and not c["failed"]):
                row.append("-")
                continue
            text = ("%.1f [%.1f, %.1f] (n %d)" % (c["median"], c["lo"], c["hi"], c["n"])) if c["n"] else "no run"
            if c["failed"]:
                text += ", %d failed" % len(c["failed"])
            if c["n"] and next(iter(c["runs"]))["threshold"] is not None:
                text += "; %d/%d reached %g" % (c["reached"], c["n"], c["runs"][0]["threshold"])
                if c["median_time"] is not None:
                    text += " in %.1f s" % c["median_time"]
            row.append(text)
        ours = cells.get("grpo-edge", {}).get("median")
        best_sb3 = max([cells[a]["median"] for a in ("sb3-ppo", "sb3-sac") if a in cells
                        and cells[a].get("median") is not None] or [None], key=lambda v: -math.inf if v is None else v)
        verdict = "-"
        if ours is not None and best_sb3 is not None:
            verdict = "win" if ours >= best_sb3 else "loss"
            wins += ours >= best_sb3
        t_ours = cells.get("grpo-edge", {}).get("median_time")
        t_sb3 = [cells[a]["median_time"] for a in ("sb3-ppo", "sb3-sac") if cells.get(a, {}).get("median_time")]
        if t_ours is not None and t_sb3:
            time_ratios.append((env_id, t_ours / min(t_sb3)))
            verdict += ", time %.2fx" % (t_ours / min(t_sb3))
        rows.append(row + [verdict])
    table = markdown_table(["env", "budget", "grpo-edge", "SB3 PPO (rl-zoo)", "SB3 SAC", "grpo-edge vs SB3's best"],
                           rows)
    lines = [table, "", "final greedy return at the budget: median [min, max] over seeds (n seeds); time to the "
             "env's spec.reward_threshold: median over the seeds that reached it (training seconds, evaluation "
             "excluded; resolution budget/%d early, budget/%d after budget/%d)." % (10 * CURVE_POINTS, CURVE_POINTS, CURVE_POINTS),
             "grpo-edge's median >= SB3's best algorithm on %d of %d envs (goal: 7 of 10)." % (wins, len(rows))]
    if time_ratios:
        lines.append("time to threshold, grpo-edge / SB3's best where both reached it: " + ", ".join(
            "%s %.2fx" % kv for kv in time_ratios) + " (goal <= 0.3x)")
    text = "\n".join(lines)
    print(text)
    out_md = Path(json_path).with_suffix(".md")
    out_md.write_text(text + "\n")
    print("wrote %s" % out_md)
    plot(data, summary, Path(json_path).with_suffix(""))


def plot(data, summary, folder):
    """<folder>/<env>.png (return against training seconds and env steps, one line per run) and overview.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder.mkdir(parents=True, exist_ok=True)
    colors = {"grpo-edge": "tab:blue", "sb3-ppo": "tab:orange", "sb3-sac": "tab:green"}
    envs = [e for e in BUDGETS if e in summary]
    cols = min(5, max(1, len(envs)))
    fig_all, axes_all = plt.subplots((len(envs) + cols - 1) // cols, cols, figsize=(3.6 * cols, 2.9 * ((len(envs) + cols - 1) // cols)),
                                     squeeze=False)
    for i, env_id in enumerate(envs):
        fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(10, 3.6))
        ax_o = axes_all[i // cols][i % cols]
        labelled = set()
        for key, run in sorted(data["runs"].items()):
            e, algo = key.split("/")[:2]
            if e != env_id or run.get("status") != "ok":
                continue
            t, s, r = zip(*run["curve"])
            label = None if algo in labelled else algo
            labelled.add(algo)
            ax_t.plot(t, r, color=colors[algo], alpha=0.8, label=label)
            ax_s.plot(s, r, color=colors[algo], alpha=0.8, label=label)
            ax_o.plot(t, r, color=colors[algo], alpha=0.7, label=label)
        threshold = next((r.get("threshold") for k, r in data["runs"].items() if k.startswith(env_id + "/")
                          and r.get("status") == "ok"), None)
        for ax in (ax_t, ax_s, ax_o):
            if threshold is not None:
                ax.axhline(threshold, color="gray", ls="--", lw=0.8)
            ax.grid(alpha=0.3)
        ax_t.set_xlabel("training seconds (1 thread, evaluation excluded)")
        ax_s.set_xlabel("env steps")
        ax_s.set_xscale("log")
        ax_t.set_ylabel("greedy return (held-out starts)")
        ax_t.legend(fontsize=8)
        fig.suptitle("%s: grpo-edge vs SB3 (one line per seed)" % env_id)
        fig.tight_layout()
        fig.savefig(str(folder / ("%s.png" % env_id)), dpi=90)
        plt.close(fig)
        ax_o.set_title(env_id, fontsize=9)
        ax_o.tick_params(labelsize=7)
    for j in range(len(envs), axes_all.size):
        axes_all.flat[j].axis("off")
    from matplotlib.lines import Line2D
    fig_all.legend([Line2D([0], [0], color=c) for c in colors.values()], list(colors), loc="upper right",
                   fontsize=8, ncol=3)
    fig_all.supxlabel("training seconds (1 thread, evaluation excluded)", fontsize=9)
    fig_all.supylabel("greedy return", fontsize=9)
    fig_all.tight_layout()
    fig_all.savefig(str(folder / "overview.png"), dpi=90)
    plt.close(fig_all)
    print("wrote %s/ (%d env plots, overview.png)" % (folder, len(envs)))


# ------------------------------------------------------------------------------------------- main
def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--env", nargs="+", default=None, help="env ids (default: all ten)")
    ap.add_argument("--algo", nargs="+", default=None, help="grpo-edge, sb3-ppo, sb3-sac (default: each env's)")
    ap.add_argument("--seed", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget-s", type=float, default=None, help="training seconds per run (default: the env's)")
    ap.add_argument("--json", default=str(RESULTS / "control_suite.json"))
    ap.add_argument("--report", action="store_true", help="only the table and plots from --json")
    ap.add_argument("--merge", nargs="+", default=[], help="results files (same version) whose runs --json gains, "
                    "for pieces run as separate processes")
    ap.add_argument("--timeout-s", type=float, default=None, help="a run's process limit (default 3 x budget + 300)")
    a = ap.parse_args(argv)
    for env_id in a.env or []:
        if env_id not in BUDGETS:
            raise BadInput("unknown env %r: the suite knows %s" % (env_id, ", ".join(BUDGETS)))
    for algo in a.algo or []:
        if algo not in ALGOS:
            raise BadInput("unknown algo %r: %s" % (algo, ", ".join(ALGOS)))
    if a.budget_s is not None and not a.budget_s > 0:
        raise BadInput("--budget-s must be > 0, got %g" % a.budget_s)
    if any(s < 0 for s in a.seed):
        raise BadInput("--seed must be >= 0")
    return a


def main(argv=None):
    worker_main(worker)
    try:
        a = parse(argv)
        data = load_results(a.json)
        for other in a.merge:
            if not Path(other).is_file():
                raise BadInput("--merge %s: no such file" % other)
            for key, run in load_results(other)["runs"].items():
                data["runs"].setdefault(key, run)
        if a.merge:
            save_results(a.json, data)
    except BadInput as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    if a.report:
        report(data, a.json)
        return 0
    todo = []
    for env_id in a.env or list(BUDGETS):            # the libraries alternate: load on this machine hits both
        for seed in a.seed:
            for algo in [x for x in (a.algo or algos_for(env_id)) if x in algos_for(env_id)]:
                budget = a.budget_s or BUDGETS[env_id][0]
                key = run_key(env_id, algo, seed, budget)
                if key not in data["runs"]:
                    todo.append((key, {"env": env_id, "algo": algo, "seed": seed, "budget_s": budget}))
    print("%d runs to do (%d already in %s)" % (len(todo), len(data["runs"]), a.json), flush=True)
    data.setdefault("machine", machine())
    for i, (key, spec) in enumerate(todo):
        t0 = time.time()
        try:
            res = run_worker(Path(__file__).resolve(), spec,
                             timeout=a.timeout_s or 3 * spec["budget_s"] + 300)
        except Exception as e:  # the worker process died (killed, timed out): recorded, the suite goes on
            res = {"status": "failed", "reason": str(e).strip().splitlines()[0][:300]}
        res["wall_s"] = round(time.time() - t0, 1)
        data["runs"][key] = res
        save_results(a.json, data)
        what = ("final %.1f%s" % (res["final_return"], ", reached %g at %.1f s" % (res["threshold"],
                res["reached"]["train_s"]) if res.get("reached") else "")) if res.get("status") == "ok" \
            else "FAILED: " + res.get("reason", "")
        print("[%d/%d] %s: %s (%.0f s)" % (i + 1, len(todo), key, what, res["wall_s"]), flush=True)
    report(data, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
