"""Issue 6: the small-data / small-memory features measured on vs off, written to docs/results.md.

    .venv/bin/python benchmarks/small_data.py                       # everything, 3 seeds (~25 min on 2 shared cores)
    .venv/bin/python benchmarks/small_data.py --only memory latent  # some parts: curriculum latent distill backtrans memory
    .venv/bin/python benchmarks/small_data.py --report              # rewrite the docs section from the saved JSON

Each part runs on the built-in task it is meant for, with tiny widths so it fits a shared 2-core CPU
(sizes in SETUP below and in the doc). Results go to benchmarks/results/small_data.json (one key per part,
parts can run in separate processes) and the section between <!-- issue6:start/end --> in
docs/results.md. Memory configs run one per subprocess (peak RSS of that process alone).
"""
import argparse
import fcntl
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from grpo_edge.core.checkpoint import save_checkpoint  # noqa: E402
from grpo_edge.tasks import get_task  # noqa: E402
from grpo_edge.training_run import GRPOTrainer  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "small_data.json"
DOC = ROOT / "docs" / "results.md"
MARK_START, MARK_END = "<!-- issue6:start -->", "<!-- issue6:end -->"
GPT = {"arch": "micro-gpt", "d_model": 64, "n_layer": 2, "n_head": 4, "max_len": 16}
ARITH = {"name": "arithmetic", "max_operand": 49, "eval_size": 200}
SETUP = {
    "curriculum": "arithmetic (0..49 + 0..49; 2,250 train / 250 test problems), micro-gpt d_model 64, 2 layers "
                  "(~104k params); 2 supervised warm-start epochs shared by all arms of a seed, then 120 GRPO "
                  "steps (batch 16 prompts x G 8, lr 1e-3), exact match on 200 test problems every 10 steps",
    "latent": "digits with test_fraction 0.8 (359 train / 1,438 test images), lite-resnet channels 8-16-32, one "
              "block per stage (~20k params), 300 GRPO steps (batch 32 x G 8, lr 3e-3); noise on every block",
    "distill": "arithmetic 0..49 with only 200 labeled train problems; teachers micro-gpt d_model 96, 3 layers "
               "(~340k params) trained supervised on all 2,250 train problems for 3 epochs (weak) or 12 (strong); "
               "a teacher answers 1,500 other train prompts (4 samples, majority >= 0.5, exact-match filter), "
               "ratio 4 (at most 800 synthetic pairs); student micro-gpt d_model 48, 2 layers; every arm sees "
               "~10,000 supervised examples (epochs = 10,000 / items), then 40 GRPO steps (batch 16 x G 8); "
               "exact match on the full 250-problem test split",
    "backtrans": "zh-en-numbers from files: 300 train pairs and 300 test pairs drawn from 0..9999, 700 English "
                 "monolingual lines of other numbers; reverse and forward tiny-transformer d_model 64, 2+2 layers; "
                 "both arms get the same number of supervised batches (no GRPO); exact match and chrF on the "
                 "300 test pairs",
    "memory": "micro-gpt d_model 128, 4 layers, 4 heads (~0.8M params), GRPO step at batch 32 x G 8 = 256 "
              "sequences of 6 prompt + 64 generated tokens (EOS disabled so every completion is 64 long), "
              "1 CPU thread; each config in its own subprocess, a small warm-up step then one measured step; the "
              "seed-size rows use micro-gpt's default d_model 232, 6 layers, 8 heads (3.9M params, the seed's Micro-GPT)",
}


MERGE = False        # --merge: add these seeds' runs to the saved ones instead of replacing the part


def _run_key(r):
    return (r["seed"], r.get("arm"), r.get("noise"))


def save_part(name, data):
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(os.path.join(tempfile.gettempdir(), "grpo_edge_small_data.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        allres = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        if MERGE and "runs" in data and name in allres:
            new = set(_run_key(r) for r in data["runs"])
            data = dict(data, runs=[r for r in allres[name]["runs"] if _run_key(r) not in new] + data["runs"])
        allres[name] = data
        tmp = RESULTS.with_suffix(".tmp")
        tmp.write_text(json.dumps(allres, indent=1))
        os.replace(tmp, RESULTS)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def trainer(cfg, task=None):
    return GRPOTrainer(config=cfg, task=task, progress=False)


# --- curriculum: steps to a target exact match ------------------------------------------------------
def part_curriculum(seeds, target=0.7, steps=120):
    arms = ["off", "perplexity", "length", "pass_rate"]
    runs = []
    for seed in seeds:
        base = {"task": ARITH, "model": GPT, "grpo": {"group_size": 8},
                "training": {"steps": steps, "batch_size": 16, "lr": 1e-3, "eval_every": 10, "seed": seed,
                             "warm_start_epochs": 2, "warm_start_lr": 3e-3, "save_every": 1000}}
        ws = trainer(base)
        ws.warm_start()
        start_state = {k: v.clone() for k, v in ws.policy.state_dict().items()}
        start_em = ws.evaluate()["exact_match"]
        for arm in arms:
            cfg = json.loads(json.dumps(base))
            cfg["training"]["warm_start_epochs"] = 0
            if arm != "off":
                cfg["curriculum"] = {"metric": arm, "stages": 4, "threshold": 0.5, "window": 3}
            tr = trainer(cfg)
            tr.policy.load_state_dict(start_state)
            t0 = time.time()
            tr.train()
            curve = [[0, start_em]] + [[m["step"], m["eval_exact_match"]] for m in tr.history if "eval_exact_match" in m]
            hit = next((s for s, v in curve if v >= target), None)
            zero_std = statistics.mean(m["frac_zero_std"] for m in tr.history)   # groups with no GRPO signal
            runs.append({"seed": seed, "arm": arm, "steps_to_target": hit, "final": curve[-1][1], "curve": curve,
                         "frac_zero_std": zero_std,
                         "wall_s": round(time.time() - t0, 1),
                         "mastered_at": tr.curriculum.advanced_at if tr.curriculum else None})
            log("curriculum", seed, arm, "steps to %.2f:" % target, hit, "final", curve[-1][1])
    save_part("curriculum", {"target": target, "steps": steps, "runs": runs})


# --- latent noise on digits: held-out accuracy ------------------------------------------------------------
def part_latent(seeds, noises=(0.0, 0.1), steps=300):
    runs = []
    for seed in seeds:
        for noise in noises:
            cfg = {"task": {"name": "digits", "test_fraction": 0.8},
                   "model": {"arch": "lite-resnet", "channels": [8, 16, 32], "blocks": [1, 1, 1]},
                   "training": {"steps": steps, "batch_size": 32, "lr": 3e-3, "eval_every": 50, "seed": seed,
                                "save_every": 1000},
                   "grpo": {"group_size": 8}, "augment": {"latent_noise": noise}}
            t0 = time.time()
            tr = trainer(cfg)
            s = tr.train()
            curve = [[m["step"], m["eval_accuracy"]] for m in tr.history if "eval_accuracy" in m]
            train_acc = tr.task.evaluate(tr.policy, "train")["accuracy"]
            runs.append({"seed": seed, "noise": noise, "final": s["final_accuracy"], "best": s["best_accuracy"],
                         "train_acc": train_acc, "curve": curve, "wall_s": round(time.time() - t0, 1)})
            log("latent", seed, noise, "test acc", s["final_accuracy"], "train acc", train_acc)
    save_part("latent", {"steps": steps, "runs": runs})


# --- distillation on arithmetic: held-out exact match ------------------------------------------------------
TEACHERS = {"weak": {"warm_start_epochs": 3, "batch_size": 32}, "strong": {"warm_start_epochs": 12, "batch_size": 16}}


def part_distill(seeds, labeled=200, unlabeled=1500, ratio=4.0, budget=10000, grpo_steps=40):
    tmp = Path(tempfile.mkdtemp(prefix="distill_"))
    teachers = {}
    for name, t in TEACHERS.items():
        big = {"task": dict(ARITH, eval_size=0), "model": dict(GPT, d_model=96, n_layer=3),
               "training": dict({"steps": 1, "seed": 100, "warm_start_lr": 3e-3}, **t)}
        t0 = time.time()
        teacher = trainer(big)
        teacher.warm_start()
        save_checkpoint(tmp / ("%s.pt" % name), teacher.state_dict())
        teachers[name] = {"exact_match": teacher.evaluate()["exact_match"], "train_s": round(time.time() - t0, 1),
                          "epochs": t["warm_start_epochs"], "batch_size": t["batch_size"]}
        log("distill teacher", name, teachers[name])
    runs = []
    for seed in seeds:
        for arm in ["off"] + ["teacher: %s" % n for n in TEACHERS]:
            task = get_task("arithmetic", dict(ARITH, eval_size=0), seed=seed)
            pool = task.train_problems
            truth = dict(pool)
            task.train_problems = pool[:labeled]
            cfg = {"task": dict(ARITH, eval_size=0), "model": dict(GPT, d_model=48),
                   "training": {"steps": grpo_steps, "batch_size": 16, "lr": 1e-3, "eval_every": 0, "seed": seed,
                                "warm_start_lr": 3e-3, "save_every": 1000}, "grpo": {"group_size": 8}}
            tr = trainer(cfg, task)
            stats, label_acc = None, None
            if arm != "off":
                prompts = [p for p, _ in pool[labeled:labeled + unlabeled]]
                stats = tr.distill_from(str(tmp / ("%s.pt" % arm.split(": ")[1])), prompts=prompts, ratio=ratio)
                synth = task.train_problems[labeled:]
                label_acc = sum(truth[p] == a for p, a in synth) / max(1, len(synth))
            n_items = len(task.train_problems)
            ep = max(1, round(budget / float(n_items)))      # every arm sees ~`budget` supervised examples
            t1 = time.time()
            tr.warm_start(epochs=ep)
            after_ws = tr.evaluate()["exact_match"]
            tr.train()
            final = tr.evaluate()["exact_match"]
            runs.append({"seed": seed, "arm": arm, "items": n_items, "epochs": ep, "after_warm_start": after_ws,
                         "final": final, "stats": stats, "synthetic_label_accuracy": label_acc,
                         "wall_s": round(time.time() - t1, 1)})
            log("distill", seed, arm, "items", n_items, "epochs", ep, "label acc", label_acc, "after ws", after_ws,
                "final", final)
    save_part("distill", {"teachers": teachers, "ratio": ratio, "labeled": labeled, "budget": budget, "runs": runs})


# --- back-translation on zh-en-numbers: held-out exact match / chrF --------------------------------------
def part_backtrans(seeds, n_train=300, n_test=300, n_mono=700, epochs=8):
    import random
    from grpo_edge.data.zh_numbers import int_to_en, int_to_zh
    tmp = Path(tempfile.mkdtemp(prefix="bt_"))
    nums = random.Random(7).sample(range(10000), n_train + n_test + n_mono)
    (tmp / "data").mkdir()
    for name, part in (("train", nums[:n_train]), ("test", nums[n_train:n_train + n_test])):
        (tmp / "data" / ("%s.tsv" % name)).write_text("".join("%s\t%s\n" % (int_to_zh(n), int_to_en(n)) for n in part),
                                                      encoding="utf-8")
    (tmp / "mono.txt").write_text("".join(int_to_en(n) + "\n" for n in nums[n_train + n_test:]), encoding="utf-8")
    model = {"arch": "tiny-transformer", "d_model": 64, "nhead": 4, "num_layers": 2, "dim_feedforward": 128, "max_len": 64}
    runs = []
    for seed in seeds:
        mixed = 0
        for arm in ("on", "off"):
            task_cfg = {"name": "zh-en-numbers", "data_path": str(tmp / "data"), "eval_size": 0}
            if arm == "on":
                task_cfg.update({"augment": True, "mono_path": str(tmp / "mono.txt")})
            cfg = {"task": task_cfg, "model": model, "grpo": {"group_size": 8},
                   "training": {"steps": 1, "batch_size": 32, "seed": seed, "warm_start_lr": 1e-3}}
            t0 = time.time()
            tr = trainer(cfg)
            bt_s = round(time.time() - t0, 1)
            stats = getattr(tr.task.loader, "augment_stats", {})
            if arm == "on":
                mixed = len(tr.task.loader.synthetic_pairs)
            ep = epochs if arm == "on" else round(epochs * (n_train + mixed) / n_train)
            t1 = time.time()
            tr.warm_start(epochs=ep)
            ev = tr.evaluate()
            runs.append({"seed": seed, "arm": arm, "epochs": ep, "exact_match": ev["exact_match"], "chrf": ev["chrf"],
                         "synthetic": mixed if arm == "on" else 0, "bt_stats": stats, "bt_s": bt_s,
                         "train_s": round(time.time() - t1, 1)})
            log("backtrans", seed, arm, "epochs", ep, "exact", ev["exact_match"], "chrf", round(ev["chrf"], 3))
    save_part("backtrans", {"runs": runs})


# --- memory / step time: one subprocess per config ---------------------------------------------------------
MEM_CONFIGS = [
    ("fp32 (baseline)", {}),
    ("gradient checkpointing, interval 2", {"gradient_checkpointing": 2}),
    ("gradient checkpointing, interval 1", {"gradient_checkpointing": 1}),
    ("AMP (bf16 autocast on CPU)", {"amp": True}),
    ("checkpointing 2 + AMP", {"gradient_checkpointing": 2, "amp": True}),
    ("minibatch 64 x 4 accumulation", {"minibatch_size": 64, "grad_accum_steps": 4}),
    ("length 32 instead of 64", {"_length": 32}),
]
SEED_GPT = {"d_model": 232, "n_layer": 6, "n_head": 8}        # micro-gpt's default: the seed's 6 layers, 8 heads
MEM_SEED_CONFIGS = [
    ("seed-size micro-gpt (3.9M), fp32", {"_model": SEED_GPT}),
    ("seed-size, checkpointing 1 + minibatch 64 x 4", {"_model": SEED_GPT, "gradient_checkpointing": 1,
                                                        "minibatch_size": 64, "grad_accum_steps": 4}),
]


def memory_worker(spec):
    """Runs in its own process: 1 warm-up step, then the measured step; prints JSON."""
    import functools
    torch.set_num_threads(1)
    t = dict(spec)
    length = t.pop("_length", 64)
    model = dict({"arch": "micro-gpt", "d_model": 128, "n_layer": 4, "n_head": 4, "max_len": 80}, **t.pop("_model", {}))
    cfg = {"task": {"name": "arithmetic", "max_operand": 99, "max_new_tokens": length}, "model": model,
           "training": dict({"steps": 2, "batch_size": 32, "threads": 1}, **t), "grpo": {"group_size": 8}}
    tr = trainer(cfg)
    tr.policy.generate = functools.partial(tr.policy.generate, eos_id=-1)   # every completion is `length` long

    def status(key):
        return [int(ln.split()[1]) / 1024.0 for ln in open("/proc/self/status") if ln.startswith(key)][0]
    tr.t["batch_size"] = 2                              # warm-up (lazy imports, first-call caches), small
    tr.train_step()
    tr.t["batch_size"] = 32
    open("/proc/self/clear_refs", "w").write("5")      # reset the peak-RSS mark
    base = status("VmRSS")
    m = tr.train_step()
    print(json.dumps({"peak_rss_mb": status("VmHWM"), "peak_above_start_mb": status("VmHWM") - base,
                      "step_s": m["step_time"], "rollout_s": m["rollout_time"],
                      "update_s": m["step_time"] - m["rollout_time"], "completion_len": m["completion_len"],
                      "params": tr.num_parameters}))


def part_memory(configs=MEM_CONFIGS, key="memory"):
    rows = []
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1")
    for name, spec in configs:
        r = subprocess.run([sys.executable, __file__, "--memory-worker", json.dumps(spec)], capture_output=True,
                           text=True, env=env, cwd=str(ROOT))
        if r.returncode != 0:
            raise SystemExit("memory worker %s failed:\n%s" % (name, r.stderr[-2000:]))
        row = dict(json.loads(r.stdout.strip().splitlines()[-1]), config=name)
        rows.append(row)
        log("memory", name, "peak above start %.0f MB" % row["peak_above_start_mb"], "step %.1f s" % row["step_s"])
    save_part(key, {"rows": rows})


PARTS = {"curriculum": part_curriculum, "latent": part_latent, "distill": part_distill,
         "backtrans": part_backtrans, "memory": part_memory,
         "memory_seed": lambda: part_memory(MEM_SEED_CONFIGS, "memory_seed")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=sorted(PARTS), help="parts to run (default: all)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--report", action="store_true", help="only rewrite docs/results.md from the saved JSON")
    ap.add_argument("--merge", action="store_true", help="add the runs of --seeds to the saved ones of the part")
    ap.add_argument("--memory-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global MERGE
    MERGE = args.merge
    if args.memory_worker:
        return memory_worker(json.loads(args.memory_worker))
    torch.set_num_threads(1)
    if not args.report:
        for name in args.only or list(PARTS):
            t0 = time.time()
            PARTS[name]() if name.startswith("memory") else PARTS[name](args.seeds)
            log(name, "done in %.0f s" % (time.time() - t0))
    from small_data_report import write_report
    write_report(json.loads(RESULTS.read_text()), SETUP, DOC, MARK_START, MARK_END,
                 "%s, %d CPU cores, Python %s, torch %s" % (platform.machine(), os.cpu_count(),
                                                           platform.python_version(), torch.__version__))


if __name__ == "__main__":
    main()
