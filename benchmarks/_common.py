"""Helpers shared by the issue-7 benchmarks (benchmarks/grpo_vs_ppo.py, vs_trl.py, vs_sb3.py, microgpt_memory.py).

Each configuration runs in its own subprocess (`<script> --worker '<json spec>'`), because peak memory is
ru_maxrss, a per-process high-water mark; the worker prints one JSON line. Configurations are interleaved
round by round (A B A B ...) so that load from other jobs on this shared machine hits all of them alike,
and the tables report medians and ratios of medians.
"""
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def peak_rss_mb():
    """This process's peak resident set size so far (Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def run_worker(script, spec, timeout=1800, threads=1):
    """Run `script --worker spec` in a fresh interpreter; return its last stdout line parsed as JSON."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t0 = time.time()
    res = subprocess.run([sys.executable, str(script), "--worker", json.dumps(spec)], cwd=str(ROOT), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    lines = [ln for ln in res.stdout.decode().splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError("worker %s failed (rc %d):\n%s" % (spec, res.returncode, res.stderr.decode()[-3000:]))
    out = json.loads(lines[-1])
    out["process_wall_s"] = time.time() - t0
    return out


def interleave(script, specs, rounds, **kw):
    """{name: [result per round]} for specs {name: spec}, run A B C, A B C, ... `rounds` times."""
    out = dict((name, []) for name in specs)
    for r in range(rounds):
        for name, spec in specs.items():
            res = run_worker(script, spec, **kw)
            out[name].append(res)
            print("  round %d %-28s %s" % (r + 1, name, short(res)), flush=True)
    return out


def short(res):
    keys = [k for k in ("steps_per_s", "samples_per_s", "peak_rss_mb", "wall_s", "env_steps", "reward_after")
            if k in res]
    return " ".join("%s=%.4g" % (k, res[k]) for k in keys if isinstance(res[k], (int, float)))


def med(results, key):
    vals = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def machine():
    load = os.getloadavg() if hasattr(os, "getloadavg") else (None,)
    import torch
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "gpu": torch.cuda.is_available(),
            "load_avg_1min_at_start": load[0],
            "note": "shared machine: other jobs ran at the same time; ratios of interleaved runs are the figures"}


def markdown_table(headers, rows):
    fmt = lambda v: ("%.4g" % v) if isinstance(v, float) else ("-" if v is None else str(v))
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path, obj):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str))
    print("wrote %s" % path)


def ratio(a, b):
    return (a / b) if (a is not None and b) else None


def worker_main(fn):
    """Entry for `script --worker '<json>'`: run fn(spec) and print its dict as the last JSON line."""
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        print(json.dumps(fn(json.loads(sys.argv[2]))), flush=True)
        sys.exit(0)
