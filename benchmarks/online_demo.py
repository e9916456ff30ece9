"""Online-training demo on CPU: a CartPole whose pole gets shorter mid-run, served by grpo_edge.online.

    .venv/bin/python benchmarks/online_demo.py                       # full run (~5 min on 2 cores), docs/online_demo.*
    .venv/bin/python benchmarks/online_demo.py --quick --out /tmp/od # ~1 min; what ci/py36.sh runs on Python 3.6

1. Pretrain a CartPole policy with the core Trainer (or take --policy CKPT).
2. Serve it with `python -m grpo_edge.online` (a subprocess) on grpo_edge.online.envs:CartPole; after
   --change-at updates the pole's half-length goes from 0.5 m to --length (env_schedule).
3. While it runs: load served.pt whenever it changes (it must always load), keep every served version,
   kill -9 the trainer at --kills points and restart it with the same command.
4. Check and report: the served return drops at the change and online training brings it back; every
   promotion kept candidate >= served - margin on the gate's episodes, and an audit on other episodes;
   RSS per update stays flat; each restart lost at most one checkpoint interval and no update ran twice.
Writes <out>/online_demo.json and, with matplotlib, <out>/online_demo.png; prints a table; exits 1 if a
check fails. Python 3.6 + torch 1.10 safe (matplotlib optional).
"""
import argparse
import io
import json
import os
import signal
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from grpo_edge.core.checkpoint import CheckpointError, load_policy, save_checkpoint  # noqa: E402
from grpo_edge.core.models import build_model  # noqa: E402
from grpo_edge.core.trainer import Trainer  # noqa: E402
from grpo_edge.online.envs import CartPole  # noqa: E402
from grpo_edge.online.sources import EnvTask, make_env_factory  # noqa: E402

ENV = "grpo_edge.online.envs:CartPole"


def pretrain(path, seed):
    """GRPO on the original CartPole until greedy return >= 495 on 20 episodes (about 10 s)."""
    task = EnvTask(ENV, make_env_factory(ENV, {}), 500, 20, seed=seed)
    torch.manual_seed(seed)                    # the initial weights too: the whole demo is reproducible
    model = build_model("mlp", obs_dim=4, n_actions=2, hidden=64)
    cfg = {"training": {"batch_size": 4, "lr": 0.003, "lr_scaling": "none", "steps": 100, "seed": seed},
           "grpo": {"group_size": 8, "num_iterations": 4, "clip_eps": 0.2, "advantage": "reward_to_go", "gamma": 0.99}}
    tr = Trainer(model, task, cfg)
    for step in range(100):
        m = tr.train_step()
        if step % 5 == 4 and m["reward_mean"] > 400 and task.evaluate(model, n=20)["return"] >= 495:
            break
    save_checkpoint(path, tr.state_dict())
    return step + 1


def median(xs):
    xs = sorted(xs)
    return 0.5 * (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2])


def read_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def audit(versions, schedule, change_at_ep, episodes):
    """Greedy return of each served version and of its predecessor on 20 audit seeds, same dynamics."""
    rows = []
    for prev, cur in zip(versions, versions[1:]):
        params = schedule if cur["episodes"] >= change_at_ep else {}
        ev = EnvTask("audit", lambda: CartPole(**params), 500, episodes, seed=777)
        r_prev = ev.evaluate(prev["model"])["return"]
        r_cur = ev.evaluate(cur["model"])["return"]
        rows.append({"version": cur["version"], "update": cur["update"], "prev": r_prev, "new": r_cur})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "docs"))
    p.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "online_demo"),
                   help="the online trainer's save dir (emptied first)")
    p.add_argument("--policy", help="a CartPole checkpoint to serve (default: pretrain one)")
    p.add_argument("--quick", action="store_true", help="short run (CI, Python 3.6)")
    p.add_argument("--updates", type=int, help="total online updates (default 300, quick 60)")
    p.add_argument("--change-at", type=int, help="update after which the pole changes (default 40, quick 10)")
    p.add_argument("--length", type=float, default=0.1, help="pole half-length after the change (m)")
    p.add_argument("--margin", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    updates = a.updates or (60 if a.quick else 300)
    change_at = a.change_at or (10 if a.quick else 40)
    kills = [int(updates * 0.45) + 2, int(updates * 0.75) + 3]      # not on checkpoint boundaries
    run = a.run_dir
    for d in (a.out, run):
        if not os.path.isdir(d):
            os.makedirs(d)
    for name in os.listdir(run):
        os.unlink(os.path.join(run, name))
    t0 = time.time()
    policy = a.policy
    pre_steps = 0
    if policy is None:
        policy = os.path.join(run, "pretrained.pt")
        pre_steps = pretrain(policy, a.seed)
    G, B = 8, 2
    change_ep = change_at * G * B
    schedule = {"length": a.length}
    cfg = {"online": {"policy": policy, "env": ENV, "env_schedule": [[change_ep, schedule]], "gate_every": 5,
                      "checkpoint_every": 5, "margin": a.margin, "eval_episodes": 10, "max_updates": updates,
                      "max_memory": "1.5G"},
           "training": {"batch_size": B, "lr": 1e-3, "seed": a.seed, "device": "cpu"},
           "grpo": {"group_size": G, "num_iterations": 2}}
    cfg_path = os.path.join(run, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    cmd = [sys.executable, "-m", "grpo_edge.online", "--config", cfg_path, "--save-dir", run, "--quiet"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    served_path = os.path.join(run, "served.pt")
    versions, loads, load_failures, kill_log = [], 0, [], []
    last_sig = None
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while True:
        done = proc.poll() is not None
        if os.path.exists(served_path):
            st = os.stat(served_path)
            if (st.st_mtime, st.st_size, st.st_ino) != last_sig:
                try:
                    with open(served_path, "rb") as f:            # one read: the file we check is the file we keep
                        blob = f.read()
                    tmp = os.path.join(run, "probe.pt.copy")
                    with open(tmp, "wb") as f:
                        f.write(blob)
                    model, meta = load_policy(tmp)
                    loads += 1
                    last_sig = (st.st_mtime, st.st_size, st.st_ino)
                    info = meta["online"]
                    if not versions or versions[-1]["version"] != info["version"]:
                        versions.append(dict(info, model=model))
                except CheckpointError as e:
                    load_failures.append(str(e))
        metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
        last_u = metrics[-1]["update"] if metrics else 0
        if kills and last_u >= kills[0] and not done:
            time.sleep(0.05 * (len(kill_log) + 1))                # land somewhere inside an update / gate / save
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            at = read_jsonl(os.path.join(run, "metrics.jsonl"))[-1]["update"]
            try:
                load_policy(served_path)
                ok = True
            except CheckpointError as e:
                ok = False
                load_failures.append(str(e))
            kill_log.append({"killed_after_update": at, "served_loadable": ok})
            kills.pop(0)
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            continue
        if done:
            break
        time.sleep(0.2)
    out = proc.stdout.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        print(out)
        raise SystemExit("the online trainer failed (exit %d)" % proc.returncode)
    wall = time.time() - t0
    metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
    decisions = read_jsonl(os.path.join(run, "decisions.jsonl"))
    gates = [d for d in decisions if d.get("event") == "gate"]
    resumes = [d for d in decisions if d.get("event") == "resume"]
    for k, r in zip(kill_log, resumes):
        k.update(resumed_from_update=r["update"], lost_updates=k["killed_after_update"] - r["update"])

    pre = [g["served_eval"] for g in gates if g["dynamics_phase"] == 0]
    post = [g for g in gates if g["dynamics_phase"] == 1]
    drop = post[0]["served_eval"] if post else None
    final = post[-1]["served_eval"] if post else None
    recovered_at = next((g["update"] for g in post if g["served_eval"] >= 0.9 * pre[-1]), None) if pre else None
    promos = [g for g in gates if g["decision"] == "promote"]
    gate_violations = [g for g in promos if g["candidate_eval"] < g["served_eval"] - g["margin"]]
    audit_rows = audit(versions, schedule, change_ep, 20)
    audit_worst = min([r["new"] - r["prev"] for r in audit_rows] or [0.0])
    audit_beyond = [r for r in audit_rows if r["new"] < r["prev"] - a.margin]
    # RSS: per process segment (a restart starts a new process)
    starts = set([0] + [r["update"] for r in resumes])
    segs, cur = [], []
    for m in metrics:
        if m["update"] - 1 in starts and cur:
            segs.append(cur)
            cur = []
        cur.append(m)
    segs.append(cur)
    rss = [m["rss_mb"] for m in metrics]
    # per process: the RSS floor (minimum) of its last third minus that of its middle third (its first third is
    # warm-up). RSS jumps between two levels about 5 MB apart from update to update, so the medians of a few
    # updates can differ by about that much without growth (+5.9 MB failed one 60-update run); a leak raises
    # the floor.
    drift = []
    for s_ in segs:
        if len(s_) >= 12:
            k = len(s_) // 3
            drift.append(round(min(m["rss_mb"] for m in s_[-k:]) - min(m["rss_mb"] for m in s_[k:2 * k]), 2))
    ups = [m["update"] for m in metrics]
    checks = {
        "served return drops at the change": bool(pre and drop is not None and drop < 0.8 * pre[-1]),
        # full run: back at least half-way to the pre-change return; --quick (CI, 60 updates, run-to-run timing
        # of the kills varies it: 290-400 seen): at least a quarter of the way
        "online training brings it back": bool(final is not None and drop is not None
                                               and final >= drop + (0.25 if a.quick else 0.5) * (pre[-1] - drop)),
        "every promotion within the margin (gate episodes)": not gate_violations,
        "served.pt always loadable": not load_failures and all(k["served_loadable"] for k in kill_log),
        "each restart lost <= one checkpoint interval": all(0 <= k.get("lost_updates", 99) <= 5 for k in kill_log)
        and len(resumes) == len(kill_log),
        "every update ran exactly once": ups == list(range(1, updates + 1)),
        "RSS flat (floor drift < 5 MB within each process)": all(d < 5.0 for d in drift),
    }
    res = {"python": sys.version.split()[0], "torch": torch.__version__, "updates": updates, "change_at_update": change_at,
           "change": schedule, "margin": a.margin, "pretrain_steps": pre_steps, "wall_s": round(wall, 1),
           "served_before_change": pre[-1] if pre else None, "served_after_change": drop, "served_final": final,
           "recovered_to_90pct_at_update": recovered_at, "gates": len(gates), "promotions": len(promos),
           "rollbacks": sum(g["decision"] == "rollback" for g in gates), "served_loads": loads,
           "kills": kill_log, "audit_worst_delta": audit_worst, "audit_beyond_margin": len(audit_beyond),
           "audit_pairs": len(audit_rows), "rss_mb_min": min(rss), "rss_mb_max": max(rss),
           "rss_drift_mb": drift, "checks": checks, "gate_log": gates,
           "rss_curve": [[m["update"], round(m["rss_mb"], 2)] for m in metrics],
           "reward_curve": [[m["update"], m["reward_mean"]] for m in metrics], "command": " ".join(sys.argv)}
    name = "online_demo" + ("_quick" if a.quick else "")
    with io.open(os.path.join(a.out, name + ".json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(res, indent=1))
    plot(res, os.path.join(a.out, name + ".png"))
    print("| gate update | dynamics | served eval | candidate eval | decision | served version |")
    print("|---:|---|---:|---:|---|---:|")
    for g in gates:
        print("| %d | %s | %.1f | %.1f | %s | %d |" % (g["update"], "changed" if g["dynamics_phase"] else "original",
                                                   g["served_eval"], g["candidate_eval"], g["decision"], g["served_version"]))
    for k in ("served_before_change", "served_after_change", "served_final", "recovered_to_90pct_at_update", "promotions",
              "rollbacks", "served_loads", "kills", "audit_worst_delta", "audit_beyond_margin", "rss_mb_min", "rss_mb_max",
              "rss_drift_mb", "wall_s"):
        print("%s: %s" % (k, res[k]))
    for k, v in checks.items():
        print("%-60s %s" % (k, "ok" if v else "FAILED"))
    return 0 if all(checks.values()) else 1


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    g = res["gate_log"]
    ax[0].plot([x["update"] for x in g], [x["served_eval"] for x in g], "o-", label="served (gate eval)")
    ax[0].plot([x["update"] for x in g], [x["candidate_eval"] for x in g], "x", label="candidate (gate eval)")
    rb = [x for x in g if x["decision"] == "rollback"]
    ax[0].plot([x["update"] for x in rb], [x["candidate_eval"] for x in rb], "rv", label="rolled back")
    ax[0].set_ylabel("greedy return")
    ax[1].plot(*zip(*res["reward_curve"]), lw=0.8)
    ax[1].set_ylabel("served policy's\nsampled return")
    ax[2].plot(*zip(*res["rss_curve"]), ".", ms=2)
    ax[2].set_ylim(0, 1.15 * res["rss_mb_max"])
    ax[2].set_ylabel("RSS (MB)")
    ax[2].text(0.01, 0.05, "RSS %.0f-%.0f MB; budget (max_memory) 1.5 GB" % (res["rss_mb_min"], res["rss_mb_max"]),
               transform=ax[2].transAxes, fontsize=8)
    ax[2].set_xlabel("update")
    for a_ in ax:
        a_.axvline(res["change_at_update"], color="k", ls="--", lw=0.8)
        for k in res["kills"]:
            a_.axvline(k["killed_after_update"], color="r", ls=":", lw=0.8)
    ax[0].legend(fontsize=8, loc="lower right")
    ax[0].set_title("online GRPO: pole half-length 0.5 -> %s m at update %d (dashed); kill -9 (red dotted)"
                    % (res["change"]["length"], res["change_at_update"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
