"""Run the deploy-side hostile-input cases (cases_deploy.py) against a grpo-edge checkout; classify each.

    python benchmarks/hostile/run_deploy.py --repo . --out benchmarks/results/hostile_deploy.json
    python benchmarks/hostile/run_deploy.py --repo /tmp/before --fixtures DIR    # same fixtures, older code

Classes: clean (did what the case expects: exit 2 with one `error:` line and no file left behind, or
exit 0 and the check holds), traceback (a Python traceback on stderr), data lost (a file the case
keeps changed or vanished), wrong (anything else: exit 0 where an error was due, an error where the
command should work, several lines, files left behind, a failed check). Fixtures (checkpoints, ONNX
models, calibration sets) are built once with --fixture-repo (default: --repo) and copied per case.
Full-disk and read-only cases mount a small tmpfs (root only); without it they are skipped, with reason.
"""
import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cases_deploy import CASES  # noqa: E402


def grpo_edge(repo, args, cwd, timeout=900):
    env = dict(os.environ, PYTHONPATH=str(Path(repo).resolve()), PYTHONUNBUFFERED="1")
    env.pop("GRPO_EDGE_REQUIRE_TOOLS", None)
    t = time.time()
    try:
        r = subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + list(args), cwd=str(cwd), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
        return r.returncode, r.stdout, r.stderr, time.time() - t
    except subprocess.TimeoutExpired:
        return 124, "", "timeout after %d s" % timeout, time.time() - t


def build_fixtures(repo, folder: Path):
    """cp.pt (cartpole), arith.pt (micro-gpt), m.onnx (fp32), c.npz/c.npy (calibration), q.onnx (int8 QDQ),
    inf.npy (one inf), wide.npy (wrong width), ls.onnx (a log-softmax policy head)."""
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "done").exists():
        return folder
    code = ("import sys; sys.path.insert(0, %r); from edge_fixtures import make_cartpole_checkpoint; "
            "from text_fixtures import make_text_checkpoint; make_cartpole_checkpoint('cp.pt'); "
            "make_text_checkpoint('arith.pt', 'arithmetic')" % str(Path(repo).resolve() / "tests"))
    env = dict(os.environ, PYTHONPATH=str(Path(repo).resolve()))
    subprocess.run([sys.executable, "-c", code], cwd=str(folder), env=env, check=True)
    for args in (["export", "cp.pt", "--out", "m.onnx"], ["calibrate", "cp.pt", "--out", "c.npz", "--n", "256"],
                 ["quantize", "m.onnx", "--calibration", "c.npz", "--out", "q.onnx"]):
        rc, out, err, _ = grpo_edge(repo, args, folder)
        if rc != 0:
            raise SystemExit("fixture %s failed: %s" % (args, err[-500:]))
    import numpy as np
    x = np.load(str(folder / "c.npz"))["obs"].astype(np.float32)
    np.save(str(folder / "c.npy"), x)
    bad = x.copy()
    bad[3, 1] = np.inf
    np.save(str(folder / "inf.npy"), bad)
    np.save(str(folder / "wide.npy"), np.zeros((64, 7), np.float32))
    _log_softmax_onnx(folder / "ls.onnx")
    (folder / "done").write_text("ok\n")
    return folder


def _log_softmax_onnx(path):
    """ls.onnx: a CartPole-shaped policy whose head is log_softmax(logits), as Categorical code exports it."""
    import warnings
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2), torch.nn.LogSoftmax(-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m.eval(), (torch.randn(1, 4),), str(path), opset_version=17, dynamo=False,
                          input_names=["obs"], output_names=["logp"])


def _sha(p: Path):
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


def _listing(d: Path):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def _mount(path: Path, size, mode):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0777" % size, "tmpfs", str(path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode != 0:
        return "cannot mount a tmpfs (%s)" % (r.stderr.strip() or "not root")
    return None


def _remount_ro(path: Path):
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


def _umount(path: Path):
    subprocess.run(["umount", "-l", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def check(spec: str, d: Path, stdout: str):
    """None when the check holds, else what is wrong."""
    kind, _, arg = spec.partition(":")
    if kind == "exists":
        return None if (d / arg).exists() else "%s missing" % arg
    if kind == "new_next_to":
        return None if (d / (arg + ".new")).is_file() else "no %s.new written" % arg
    if kind == "no_new":
        news = [p for p in (d / arg).rglob("*.new")]
        return "unexpected %s" % news[0].name if news else None
    if kind == "readable":
        p = d / arg
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        bad = [str(f.relative_to(d)) for f in files if not f.stat().st_mode & stat.S_IROTH]
        return "not readable by others: %s" % ", ".join(bad[:3]) if bad else None
    if kind == "listing":
        lines = stdout.splitlines()
        long = [len(line) for line in lines if len(line) > 80]
        missing = [n for n in arg.split(",") if not any(n in line.split() for line in lines)]
        if long:
            return "%d lines over 80 columns" % len(long)
        return "names cut or missing: %s" % ", ".join(missing) if missing else None
    if kind == "json":
        try:
            json.loads(stdout)
        except ValueError as e:
            return "not JSON (%s)" % e
        return None
    raise ValueError(spec)


def run_case(case, repo, fixtures: Path, work: Path):
    d = work / case["name"]
    if d.exists():
        shutil.rmtree(str(d))
    d.mkdir(parents=True)
    fix = d / "FIX"
    shutil.copytree(str(fixtures), str(fix))
    mounts = []
    try:
        if case.get("needs") == "no-cuda":
            import importlib.util
            if importlib.util.find_spec("torch") is None:
                return {"class": "skipped", "why": "no torch"}
        for step in case.get("setup", []):
            if step[0] == "run":
                rc, _, err, _ = grpo_edge(repo, step[1], d)
                if rc != 0:
                    return {"class": "skipped", "why": "setup deploy failed: %s" % (err.strip().splitlines() or [""])[-1]}
            elif step[0] == "write":
                (d / step[1]).write_text(step[2])
            elif step[0] == "append":
                with open(str(d / step[1]), "a") as f:
                    f.write(step[2])
            elif step[0] == "mkdir":
                (d / step[1]).mkdir(parents=True, exist_ok=True)
            elif step[0] == "tmpfs":
                why = _mount(d / step[1], step[2], step[3])
                if why:
                    return {"class": "skipped", "why": why}
                mounts.append(d / step[1])
        for step in case.get("setup", []):          # read-only after the files are in place
            if step[0] == "tmpfs" and step[3] == "ro":
                _remount_ro(d / step[1])
        keep = {k: _sha(d / k) for k in case.get("keep", [])}
        before = set(_listing(d))
        rc, out, err, secs = grpo_edge(repo, case["args"], d)
        after = set(_listing(d))
        res = {"rc": rc, "seconds": round(secs, 1), "stderr_tail": err.strip().splitlines()[-1:] if err.strip() else []}
        lost = [k for k, h in keep.items() if _sha(d / k) != h]
        err_lines = [line for line in err.strip().splitlines() if line.strip()]
        if "Traceback (most recent call last)" in err:
            res["class"] = "traceback"
        elif lost:
            res.update({"class": "data lost", "why": "changed or removed: %s" % ", ".join(lost)})
        elif case["expect"] == "error":
            left = sorted(p for p in after - before if not p.startswith("FIX"))
            if rc != 2:
                res.update({"class": "wrong", "why": "exit %d, expected 2" % rc})
            elif len(err_lines) != 1 or not err_lines[0].startswith("error: "):
                res.update({"class": "wrong", "why": "stderr is %d lines, not one 'error:' line" % len(err_lines)})
            elif left:
                res.update({"class": "wrong", "why": "left behind: %s" % ", ".join(left[:3])})
            else:
                res["class"] = "clean"
        else:
            why = ("exit %d, expected 0" % rc) if rc != 0 else (check(case["check"], d, out) if case.get("check") else None)
            res.update({"class": "wrong", "why": why} if why else {"class": "clean"})
        return res
    finally:
        for m in mounts:
            _umount(m)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=str(HERE.parent.parent), help="grpo-edge checkout to test")
    ap.add_argument("--fixture-repo", default=None, help="checkout that builds the fixtures (default --repo)")
    ap.add_argument("--fixtures", default=None, help="fixture folder (reused when complete)")
    ap.add_argument("--work", default=None, help="scratch folder for the cases")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="hostile-deploy-"))
    fixtures = build_fixtures(a.fixture_repo or a.repo, Path(a.fixtures or work / "fixtures"))
    cases = [c for c in CASES if not a.only or c["name"] in a.only.split(",")]
    results = {}
    for c in cases:
        r = run_case(c, a.repo, fixtures, work / "cases")
        results[c["name"]] = r
        print("%-32s %-10s %5s s  %s" % (c["name"], r["class"], r.get("seconds", "-"),
                                         r.get("why") or " ".join(r.get("stderr_tail", []))[:90]), flush=True)
    counts = {}
    for r in results.values():
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    total = sum(v for k, v in counts.items() if k != "skipped")
    print("%d cases run (%d skipped): %s" % (total, counts.get("skipped", 0), ", ".join(
        "%s %d" % (k, counts.get(k, 0)) for k in ("clean", "traceback", "wrong", "data lost"))))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"repo": str(a.repo), "counts": counts, "cases": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
