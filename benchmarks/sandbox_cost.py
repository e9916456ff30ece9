"""What it costs to score a program in grpo_edge.sandbox: milliseconds per program, against a plain exec.

    .venv/bin/python benchmarks/sandbox_cost.py                         # 24 programs x 3 rounds per setting
    .venv/bin/python benchmarks/sandbox_cost.py --n 8 --rounds 1        # a quick look
    .venv/bin/python benchmarks/sandbox_cost.py --json /tmp/cost.json

Two programs: `trivial` (one passing assert) and `typical` (a ten-line function and three asserts, the size of
a completion a reward scores). Settings, each timed over --n programs a round, rounds interleaved (A B C ...
A B C) so that load from other jobs on this shared machine hits them alike; the table gives the median over
rounds of wall milliseconds per program, and of CPU milliseconds per program (this process and the
sandboxed interpreters together: what a program costs the machine, less swayed by the other jobs):
- exec: compile + exec with fresh globals in this process: no isolation at all, the floor;
- run_python: one program at a time, the default Limits (in a network namespace where the machine allows it);
- run_python, no netns: the same with Limits(network_namespace=False): what the namespace costs;
- run_many, workers=1 / workers=2: the thread pool, the way a reward scores a batch.
Writes the JSON (--json, default benchmarks/results/sandbox_cost.json) with machine() and sandbox.isolation().
"""
import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import RESULTS, machine, markdown_table, write_json  # noqa: E402
from grpo_edge.sandbox import Limits, isolation, run_many, run_python  # noqa: E402

PROGRAMS = {
    "trivial": "assert True\n",
    "typical": '''def longest_run(xs):
    """Length of the longest run of equal neighbours."""
    best = cur = 0
    prev = object()
    for x in xs:
        cur = cur + 1 if x == prev else 1
        best = max(best, cur)
        prev = x
    return best


assert longest_run([1, 1, 2, 2, 2, 3]) == 3
assert longest_run([]) == 0
assert longest_run("aabbbb") == 4
''',
}


def in_process(sources):
    for src in sources:
        exec(compile(src, "program.py", "exec"), {"__name__": "__main__"})
    return len(sources)


def sequential(sources, limits=None):
    return sum(run_python(src, limits=limits).passed for src in sources)


SETTINGS = {
    "exec": in_process,
    "run_python": sequential,
    "run_python, no netns": lambda s: sequential(s, Limits(network_namespace=False)),
    "run_many, workers=1": lambda s: sum(r.passed for r in run_many(s, workers=1)),
    "run_many, workers=2": lambda s: sum(r.passed for r in run_many(s, workers=2)),
}


def cpu_seconds():
    """CPU time of this process and of its reaped children (the sandboxed interpreters), user + system."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(n, rounds):
    """{program: {setting: {"wall_ms": [per program, one per round], "cpu_ms": [...]}}}; all must pass."""
    out = {name: {setting: {"wall_ms": [], "cpu_ms": []} for setting in SETTINGS} for name in PROGRAMS}
    for r in range(rounds):
        for name, src in PROGRAMS.items():
            for setting, fn in SETTINGS.items():
                c0, t0 = cpu_seconds(), time.perf_counter()
                passed = fn([src] * n)
                wall, cpu = (time.perf_counter() - t0) * 1000.0 / n, (cpu_seconds() - c0) * 1000.0 / n
                if passed != n:
                    raise RuntimeError("%s / %s: %d of %d programs passed" % (name, setting, passed, n))
                out[name][setting]["wall_ms"].append(wall)
                out[name][setting]["cpu_ms"].append(cpu)
                print("  round %d %-8s %-22s %8.2f ms/program wall %8.2f ms CPU" % (r + 1, name, setting, wall, cpu),
                      flush=True)
    return out


def medians(results):
    return {name: {setting: {k: statistics.median(v) for k, v in m.items()} for setting, m in per.items()}
            for name, per in results.items()}


def table(med):
    rows = []
    for setting in SETTINGS:
        row = [setting]
        for name in PROGRAMS:
            m, base = med[name][setting], med[name]["run_python"]["wall_ms"]
            row += [m["wall_ms"], m["cpu_ms"], base / m["wall_ms"] if setting.startswith("run_many") else None]
        rows.append(row)
    headers = ["setting"] + [h for name in PROGRAMS for h in ("%s wall ms" % name, "%s CPU ms" % name,
                                                              "speed-up vs run_python")]
    return markdown_table(headers, rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--n", type=int, default=24, help="programs per setting per round (default 24)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the table gives medians (default 3)")
    ap.add_argument("--json", default=str(RESULTS / "sandbox_cost.json"),
                    help="where to write the results (default benchmarks/results/sandbox_cost.json)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        ap.error("--n and --rounds must be >= 1")
    info, iso = machine(), isolation()
    print("sandbox isolation here: %s" % iso, flush=True)
    run_python("assert True\n")             # the probe and the first interpreter start, out of the timings
    results = measure(args.n, args.rounds)
    med = medians(results)
    md = table(med)
    print(md)
    write_json(args.json, {"machine": info, "isolation": iso, "n": args.n, "rounds": args.rounds,
                           "per_program_median": med, "per_program_rounds": results, "table": md})


if __name__ == "__main__":
    main()
