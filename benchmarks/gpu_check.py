"""The GPU acceptance check (issue 23): one script, a few minutes on one CUDA GPU, one JSON of cases.

    python3 benchmarks/gpu_check.py --out gpu_check.json               # everything
    python3 benchmarks/gpu_check.py --only tasks resume cpu_load        # some parts
    python3 benchmarks/gpu_check.py --list                              # the parts, in order

Parts (each case records pass/fail, its figures, and one error line when it fails):
  tasks       every built-in task (cartpole, acrobot, digits, arithmetic, zh-en-numbers), GRPO and PPO,
              fp32 and --amp: 2 steps on cuda, metrics finite, weights on the GPU, one evaluation;
  repro       the same seed twice on the GPU: same first rollout, weights equal (or how far apart);
  resume      `grpo-edge train --device cuda` 4 steps vs 2 + `--resume` 2 (CLI): same rewards per step
              (the sampling stream continues) and the same weights;
  cpu_load    the GPU checkpoints read on the CPU (CUDA_VISIBLE_DEVICES=""): eval, calibrate, export;
              copies of them go to --keep for the CPU tests;
  online      `python3 -m grpo_edge.online --device cuda`: a reference run, a run killed with SIGKILL and
              restarted (same weights as the reference), memory inside online.max_memory;
  auto        step time on the CPU and on the GPU for each built-in task's default model: where
              --device auto's threshold (grpo_edge/core/devices.py) stands against the measurement;
  speed       GRPO vs PPO at batch 32 x G 8: step time, samples/s and peak CUDA memory (allocated and
              reserved) for micro-gpts of 0.8M, 3.9M and 85M parameters, fp32 / AMP / gradient
              checkpointing / both;
  recipe      the arithmetic recipe to the end on cuda with --amp (exact match >= 0.8);
  trl         benchmarks/vs_trl.py on the GPU when trl imports (else skipped, with the reason).

The JSON is rewritten after every case, so a run stopped by a time limit keeps what it measured.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = {"cartpole": "configs/cartpole.yaml", "acrobot": "configs/acrobot.yaml", "digits": "configs/digits.yaml",
         "arithmetic": "configs/arithmetic.yaml", "zh-en-numbers": "configs/zh_en_numbers.yaml"}
SMALL = ["training.batch_size=8", "grpo.group_size=4", "training.eval_every=0", "training.warm_start_epochs=0",
         "training.eval_n=16"]
DEVICE = "cuda"          # --device cpu: a dry run of the script's own logic on a machine without a GPU
MICRO_GPT = {"0.8M": ["model.d_model=128", "model.n_layer=4", "model.n_head=4"],
             "3.9M": ["model.d_model=232", "model.n_layer=6", "model.n_head=8"],
             "85M": ["model.d_model=768", "model.n_layer=12", "model.n_head=12"]}


class Report(object):
    def __init__(self, path):
        self.path = Path(path)
        self.data = {"machine": machine(), "cases": [], "figures": {}}

    def case(self, name, fn, *args):
        """Run fn(*args) -> dict of figures (raises on failure); record it and rewrite the JSON."""
        t0 = time.time()
        rec = {"case": name}
        try:
            rec.update(fn(*args) or {})
            rec.setdefault("pass", True)
        except Skip as e:
            rec.update({"pass": None, "skipped": str(e)})
        except Exception as e:  # a failed case is a result, not the end of the check
            rec.update({"pass": False, "error": "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[-1:]),
                        "traceback": traceback.format_exc()[-2000:]})
        rec["seconds"] = round(time.time() - t0, 2)
        self.data["cases"].append(rec)
        print("%-4s %-44s %6.1fs %s" % ({True: "ok", False: "FAIL", None: "skip"}[rec["pass"]], name, rec["seconds"],
                                       rec.get("error") or rec.get("skipped") or short(rec)), flush=True)
        self.write()
        return rec

    def write(self):
        cases = self.data["cases"]
        self.data["summary"] = {"passed": sum(c["pass"] is True for c in cases),
                                "failed": sum(c["pass"] is False for c in cases),
                                "skipped": sum(c["pass"] is None for c in cases)}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(str(tmp), str(self.path))


class Skip(Exception):
    pass


def short(rec):
    keys = [k for k in rec if k not in ("case", "pass", "seconds", "traceback")]
    return ", ".join("%s=%s" % (k, round(rec[k], 4) if isinstance(rec[k], float) else rec[k]) for k in keys[:6])


def machine():
    import torch
    out = {"python": sys.version.split()[0], "torch": torch.__version__, "cpu_count": os.cpu_count(),
           "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, gpu_memory_gb=round(p.total_memory / 2 ** 30, 1), cuda_version=torch.version.cuda,
                   bf16=torch.cuda.is_bf16_supported())
    return out


def env(cuda=True):
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not cuda:
        e["CUDA_VISIBLE_DEVICES"] = ""
    return e


def cli(args, cuda=True, timeout=600, check=True):
    """Run `grpo-edge ARGS` in a fresh interpreter; returns the CompletedProcess (raises on exit != 0)."""
    r = subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args], cwd=str(ROOT),
                       env=env(cuda), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("grpo-edge %s: exit %d: %s" % (" ".join(map(str, args[:3])), r.returncode,
                                                           r.stderr.strip()[-600:]))
    return r


def trainer(config, overrides, device=None):
    from grpo_edge.training_run import GRPOTrainer
    return GRPOTrainer(config=str(ROOT / config), overrides=overrides, device=device or DEVICE, progress=False)


def params(model):
    import torch
    return torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])


# ---------------------------------------------------------------------------------------------- parts
def case_task(task, algo, amp):
    import math
    tr = trainer(TASKS[task], SMALL + ["grpo.algo=%s" % algo, "training.amp=%s" % str(amp).lower()])
    if tr.device.type != DEVICE:
        raise RuntimeError("trainer is on %s" % tr.device)
    ms = [tr.train_step() for _ in range(2)]
    bad = [k for m in ms for k, v in m.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise RuntimeError("non-finite metrics: %s" % bad)
    where = set(p.device.type for p in tr.policy.parameters())
    if where != {DEVICE}:
        raise RuntimeError("policy weights on %s" % where)
    ev = tr.evaluate(8)
    return {"step_time_s": ms[-1]["step_time"], "reward_mean": ms[-1]["reward_mean"],
            "eval_" + tr.task.metric_name: ev[tr.task.metric_name],
            "peak_memory_mb": round(ms[-1]["peak_memory_mb"], 1)}


def part_tasks(rep):
    for task in TASKS:
        for algo in ("grpo", "ppo"):
            for amp in (False, True):
                rep.case("tasks/%s/%s/%s" % (task, algo, "amp" if amp else "fp32"), case_task, task, algo, amp)


def case_repro(task):
    import torch
    runs = []
    for _ in range(2):
        tr = trainer(TASKS[task], SMALL + ["training.seed=3"])
        hist = [tr.train_step() for _ in range(3)]
        runs.append(([h["reward_mean"] for h in hist], params(tr.policy)))
    (r1, p1), (r2, p2) = runs
    diff = float((p1 - p2).abs().max())
    if r1[0] != r2[0]:
        raise RuntimeError("first rollouts differ: %s vs %s" % (r1, r2))
    ok = r1 == r2 and diff < 1e-4
    return {"pass": ok, "rewards_equal": r1 == r2, "weights_bit_equal": bool(torch.equal(p1, p2)),
            "max_weight_diff": diff}


def part_repro(rep):
    for task in ("cartpole", "arithmetic"):
        rep.case("repro/%s" % task, case_repro, task)


def case_resume(work, task, amp):
    import torch
    from grpo_edge.core.checkpoint import load_checkpoint
    base = ["--config", ROOT / TASKS[task], "--device", DEVICE, "--quiet"] + (["--amp"] if amp else [])
    sets = ["training.eval_every=2", "training.save_every=1", "training.warm_start_epochs=0", "training.eval_n=16",
            "training.batch_size=8", "grpo.group_size=4"]
    sets = sum([["--set", s] for s in sets], [])
    full, half = work / ("full-%s" % task), work / ("half-%s" % task)
    first = cli(["train"] + base + sets + ["--set", "training.steps=4", "--save-dir", full])
    cli(["train"] + base + sets + ["--set", "training.steps=2", "--save-dir", half])
    cli(["train"] + base + sets + ["--set", "training.steps=4", "--save-dir", half, "--resume"])

    def rewards(d):
        return [json.loads(x)["reward_mean"] for x in (d / "metrics.jsonl").read_text().splitlines()]
    a, b = load_checkpoint(full / "last.pt"), load_checkpoint(half / "last.pt")
    diff = max(float((a["model"][k].float() - b["model"][k].float()).abs().max()) for k in a["model"])
    ra, rb = rewards(full), rewards(half)
    device_line = [ln for ln in first.stderr.splitlines() if ln.startswith("device:")]
    summary = json.loads((full / "summary.json").read_text())
    return {"pass": ra == rb and diff < 1e-4 and a["generator_device"] == DEVICE,
            "rewards_full": ra, "rewards_resumed": rb, "max_weight_diff": diff,
            "cuda_rng_saved": "cuda" in a["rng"], "device_line": device_line[:1],
            "summary_peak_cuda_reserved_mb": summary.get("peak_cuda_reserved_mb"),
            "bit_equal": all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])}


def part_resume(rep, work):
    rep.case("resume/cartpole", case_resume, work, "cartpole", False)
    rep.case("resume/arithmetic/amp", case_resume, work, "arithmetic", True)


def case_cpu_load(work, task, keep):
    ckpt = work / ("full-%s" % task) / "last.pt"
    if not ckpt.exists():
        raise Skip("no GPU checkpoint (resume/%s failed)" % task)
    out = {}
    r = cli(["eval", ckpt, "--n", "8", "--json"], cuda=False)
    out["eval"] = json.loads(r.stdout.strip().splitlines()[-1])
    cli(["calibrate", ckpt, "--n", "16", "--out", work / ("calib-%s.npz" % task)], cuda=False)
    try:
        import onnxscript  # noqa: F401  (the exporter's dependency)
        cli(["export", ckpt, "--out", work / ("%s.onnx" % task), "--no-simplify"], cuda=False)
        out["export"] = True
    except ImportError:
        out["export"] = "skipped: onnxscript not installed"
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(str(ckpt), str(Path(keep) / ("cuda-%s.pt" % task)))
    return out


def part_cpu_load(rep, work, keep):
    for task in ("cartpole", "arithmetic"):
        rep.case("cpu_load/%s" % task, case_cpu_load, work, task, keep)


def online(args, wait=True):
    cmd = [sys.executable, "-m", "grpo_edge.online"] + [str(a) for a in args]
    if wait:
        return subprocess.run(cmd, cwd=str(ROOT), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=300)
    return subprocess.Popen(cmd, cwd=str(ROOT), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)


def case_online(work):
    import torch
    from grpo_edge.core.checkpoint import load_checkpoint, load_policy
    args = ["--env", "CartPole-v1", "--device", DEVICE, "--max-updates", 24, "--set", "online.checkpoint_every=4",
            "--set", "online.gate_every=4", "--set", "online.max_steps=100", "--set", "online.export_onnx=false",
            "--quiet"]
    ref = online(args + ["--save-dir", work / "online-ref"])
    if ref.returncode != 0:
        raise RuntimeError("reference run: exit %d: %s" % (ref.returncode, ref.stderr.strip()[-400:]))
    run = work / "online-run"
    p = online(args + ["--save-dir", run], wait=False)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 10):
        if p.poll() is not None:
            raise RuntimeError("online run ended before the kill: %s" % p.stderr.read()[-400:])
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    killed_at = json.loads(metrics.read_text().splitlines()[-1])["update"]
    load_policy(str(run / "served.pt"))                       # valid right after the kill
    r = online(args + ["--save-dir", run])
    if r.returncode != 0:
        raise RuntimeError("restart: exit %d: %s" % (r.returncode, r.stderr.strip()[-400:]))
    a, b = load_checkpoint(str(run / "state.pt")), load_checkpoint(str(work / "online-ref" / "state.pt"))
    same = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    lines = [json.loads(x) for x in (work / "online-ref" / "metrics.jsonl").read_text().splitlines()]
    updates = [json.loads(x)["update"] for x in metrics.read_text().splitlines()]
    decisions = [json.loads(x) for x in (work / "online-ref" / "decisions.jsonl").read_text().splitlines()]
    gates = [d["decision"] for d in decisions if d.get("event") == "gate"]
    return {"pass": same and updates == list(range(1, 25)), "killed_at_update": killed_at,
            "same_weights_as_reference": same, "updates_logged_once": updates == list(range(1, 25)),
            "max_memory_mb": max(x["memory_mb"] for x in lines), "max_rss_mb": max(x["rss_mb"] for x in lines),
            "max_cuda_reserved_mb": max(x.get("cuda_reserved_mb", 0.0) for x in lines), "gates": gates,
            "summary": json.loads(ref.stdout.strip().splitlines()[-1])}


def part_online(rep, work):
    rep.case("online/cartpole/kill9", case_online, work)


def step_time(tr, steps=3, metrics=None):
    """Median seconds of `steps` train steps after one warm-up; the last step's metrics go into `metrics`."""
    import torch
    tr.train_step()                                   # warm-up: allocator, first-call overheads
    times = []
    for _ in range(steps):
        if tr.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        m = tr.train_step()
        if tr.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if metrics is not None:
        metrics.update(m)
    return sorted(times)[len(times) // 2]


def case_auto(task, extra):
    import torch
    from grpo_edge.core import devices
    threads = torch.get_num_threads()
    out = {}
    for dev in ("cpu", DEVICE):
        tr = trainer(TASKS[task], ["training.eval_every=0", "training.warm_start_epochs=0"] + extra, device=dev)
        out["%s_step_s" % dev] = step_time(tr)
        out["parameters"] = tr.num_parameters
        out["cpu_threads"] = torch.get_num_threads()
        torch.set_num_threads(threads)
    out["faster"] = "cuda" if out["cuda_step_s"] < out["cpu_step_s"] else "cpu"
    out["auto_picks"] = "cuda" if out["parameters"] >= devices.AUTO_CUDA_MIN_PARAMETERS else "cpu"
    out["pass"] = True             # a measurement; whether auto agrees is reported, the threshold is set from it
    out["auto_agrees"] = out["faster"] == out["auto_picks"]
    return out


def part_auto(rep):
    for task, extra in (("cartpole", []), ("acrobot", []), ("digits", []),
                        ("arithmetic", ["task.max_new_tokens=8"] + MICRO_GPT["0.8M"]),
                        ("arithmetic", ["task.max_new_tokens=8"] + MICRO_GPT["3.9M"])):
        name = task if task != "arithmetic" else "arithmetic-%s" % ("0.8M" if extra[1].endswith("128") else "3.9M")
        rep.case("auto/%s" % name, case_auto, task, extra)


def case_speed(size, algo, amp, ckpt, micro_batch_mb=None):
    """amp: None (fp32), 'auto' (bfloat16 where the GPU has it) or 'float16' (with loss scaling);
    micro_batch_mb None: the default (sized from the free GPU memory), else that activation budget."""
    import torch
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    tr = trainer(TASKS["arithmetic"], ["training.eval_every=0", "training.warm_start_epochs=0", "task.max_new_tokens=8",
                                       "training.batch_size=32", "grpo.group_size=8", "grpo.algo=%s" % algo,
                                       "training.amp=%s" % str(amp is not None).lower(),
                                       "training.amp_dtype=%s" % (amp or "auto"),
                                       "training.gradient_checkpointing=%d" % (2 if ckpt else 0)] + MICRO_GPT[size]
                 + ([] if micro_batch_mb is None else ["training.micro_batch_mb=%d" % micro_batch_mb]))
    after_setup = torch.cuda.memory_allocated() / 2 ** 20
    m = {}
    dt = step_time(tr, metrics=m)
    n_train = sum(p.numel() for p in tr.optimizer.param_groups[0]["params"])
    out = {"parameters": tr.num_parameters, "step_time_s": dt, "samples_per_s": 256.0 / dt,
           "peak_cuda_allocated_mb": torch.cuda.max_memory_allocated() / 2 ** 20,
           "peak_cuda_reserved_mb": torch.cuda.max_memory_reserved() / 2 ** 20,
           "after_setup_mb": after_setup,
           # fp32 weights + gradients + Adam's two moments: what AMP and checkpointing cannot shrink
           "weights_grads_adam_mb": 16.0 * n_train / 2 ** 20,
           "amp_dtype": str(tr.amp_dtype) if tr.amp else None, "micro_batch_mb": tr.t["micro_batch_mb"],
           "passes": m.get("passes")}
    del tr
    return out


def part_speed(rep):
    for size in MICRO_GPT:              # the old default activation budget, beside the one sized from the GPU
        rep.case("speed/%s/grpo/fp32/mb128" % size, case_speed, size, "grpo", None, False, 128)
    for size in MICRO_GPT:
        for amp, ckpt in ((None, False), ("auto", False), ("float16", False), (None, True), ("auto", True)):
            for algo in ("grpo", "ppo"):
                rep.case("speed/%s/%s/%s%s" % (size, algo, {None: "fp32", "auto": "amp", "float16": "amp-fp16"}[amp],
                                                "+ckpt" if ckpt else ""), case_speed, size, algo, amp, ckpt)


def case_recipe(work):
    r = cli(["train", "--config", ROOT / "configs" / "arithmetic.yaml", "--device", DEVICE, "--amp", "--quiet",
             "--save-dir", work / "recipe"], timeout=420)
    s = json.loads((work / "recipe" / "summary.json").read_text())
    return {"pass": s["final_exact_match"] >= 0.8, "final_exact_match": s["final_exact_match"],
            "wall_seconds": s["wall_seconds"], "peak_cuda_reserved_mb": s.get("peak_cuda_reserved_mb"),
            "device": s.get("device"), "stdout": r.stdout.strip()[-200:]}


def part_recipe(rep, work):
    rep.case("recipe/arithmetic/amp", case_recipe, work)


def case_trl(work):
    try:
        import trl  # noqa: F401
    except ImportError:
        raise Skip("trl is not installed on this machine")
    out = work / "vs_trl.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vs_trl.py"), "--device", DEVICE, "--rounds", "2",
                        "--out", str(out)], cwd=str(ROOT), env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=400)
    if r.returncode != 0:
        raise RuntimeError(r.stdout.strip()[-600:])
    res = json.loads(out.read_text())
    return {"ratios": res.get("ratios"), "summary": res.get("summary"), "table": res.get("table")}


def part_trl(rep, work):
    rep.case("trl/vs_trl", case_trl, work)


PARTS = ["tasks", "repro", "resume", "cpu_load", "online", "auto", "speed", "recipe", "trl"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="gpu_check.json", help="the JSON report (rewritten after every case)")
    ap.add_argument("--only", nargs="*", choices=PARTS, help="run only these parts")
    ap.add_argument("--keep", help="copy the GPU-trained checkpoints into this folder")
    ap.add_argument("--list", action="store_true", help="list the parts and exit")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)     # cpu: dry-run the script itself
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    if a.list:
        print("\n".join(PARTS))
        return 0
    import torch
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("error: torch sees no CUDA GPU: this check needs one", file=sys.stderr)
        return 2
    rep = Report(a.out)
    work = Path(tempfile.mkdtemp(prefix="gpu_check."))
    t0 = time.time()
    for part in a.only or PARTS:
        fn = globals()["part_" + part]
        args = {"resume": (work,), "cpu_load": (work, a.keep), "online": (work,), "recipe": (work,),
                "trl": (work,)}.get(part, ())
        fn(rep, *args)
    rep.data["wall_s"] = round(time.time() - t0, 1)
    rep.write()
    s = rep.data["summary"]
    print("%d passed, %d failed, %d skipped in %.0f s" % (s["passed"], s["failed"], s["skipped"], time.time() - t0))
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
