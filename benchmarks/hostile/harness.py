"""What the hostile runners share (benchmarks/hostile/run.py, cases_train.py, kills.py): running the code
under test as `python -m ...` (forked from fork servers when a pool is set), the result of one command and
how it is classified, and checkpoint checks. Only the standard library here, and torch inside the checks."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

class ForkPool(object):
    """Fork servers (benchmarks/hostile/forkserver.py), one per worker, with the code under test imported."""

    def __init__(self, code, n, env):
        import queue
        self.free = queue.Queue()
        for _ in range(n):
            p = subprocess.Popen([sys.executable, str(HERE / "forkserver.py")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env=env, universal_newlines=True, bufsize=1)
            self.free.put(p)
        self.all = list(self.free.queue)
        for p in self.all:
            assert p.stdout.readline().strip() == "ready", "fork server did not start"

    def run(self, module, argv, cwd, env, stdin, timeout):
        p = self.free.get()
        try:
            out, err = os.path.join(cwd, ".fs_out"), os.path.join(cwd, ".fs_err")
            p.stdin.write(json.dumps({"module": module, "argv": argv, "cwd": cwd, "env": env, "stdin": stdin,
                                      "out": out, "err": err, "timeout": timeout}) + "\n")
            p.stdin.flush()
            rc = json.loads(p.stdout.readline())["rc"]
            res = (rc, open(out, encoding="utf-8", errors="replace").read(),
                   open(err, encoding="utf-8", errors="replace").read())
            os.unlink(out)
            os.unlink(err)
            return res
        finally:
            self.free.put(p)

    def close(self):
        for p in self.all:
            p.stdin.close()
            p.wait()


POOL = None


def set_pool(pool):
    """Commands run forked from `pool` (a ForkPool) from now on; None: a fresh interpreter each."""
    global POOL
    POOL = pool


class Ctx(object):
    """What a case needs: the code under test, a private folder, shared fixtures, a command runner."""

    def __init__(self, code, work, fixtures, timeout):
        self.code, self.work, self.fixtures, self.timeout = str(code), Path(work), fixtures, timeout

    def env(self, extra=None):
        env = dict(os.environ, PYTHONPATH=self.code + os.pathsep + str(self.work), OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore", COLUMNS="100", GRPO_EDGE_HOSTILE="1")
        env.update(extra or {})
        return env

    def cli(self, args, stdin=None, timeout=None, env=None):
        return self.module("grpo_edge.cli.main", args, stdin, timeout, env)

    def online(self, args, stdin=None, timeout=None, env=None):
        return self.module("grpo_edge.online", args, stdin, timeout, env)

    def module(self, name, args, stdin=None, timeout=None, env=None):
        """`python -m name args`: forked from a fork server when one runs, else a fresh interpreter."""
        if POOL is None:
            return self.run([sys.executable, "-m", name] + [str(a) for a in args], stdin, timeout, env)
        t0 = time.time()
        rc, out, err = POOL.run(name, [str(a) for a in args], str(self.work), self.env(env),
                                str(stdin) if stdin else None, timeout or self.timeout)
        return Result(rc, out, err, time.time() - t0)

    def run(self, argv, stdin=None, timeout=None, env=None):
        t0 = time.time()
        try:
            with open(stdin, "rb") if stdin else open(os.devnull, "rb") as f:
                r = subprocess.run(argv, cwd=str(self.work), env=self.env(env), stdin=f, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=timeout or self.timeout)
            return Result(r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace"),
                          time.time() - t0)
        except subprocess.TimeoutExpired as e:
            return Result(None, (e.stdout or b"").decode("utf-8", "replace"),
                          (e.stderr or b"").decode("utf-8", "replace"), time.time() - t0)


class Result(object):
    def __init__(self, rc, out, err, wall):
        self.rc, self.out, self.err, self.wall = rc, out, err, wall

    @property
    def traceback(self):
        return "Traceback (most recent call last)" in self.err or "Traceback (most recent call last)" in self.out

    def error_lines(self):
        return [ln for ln in self.err.splitlines() if ln.startswith("error:")]

    def last_line(self):
        lines = [ln for ln in (self.err + "\n" + self.out).splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""


def classify_error(r):
    """An input that must be refused: exit 2, exactly one `error:` line, no traceback."""
    if r.rc is None:
        return "wrong", "timed out"
    if r.traceback:
        return "traceback", r.last_line()
    errs = r.error_lines()
    tail = [ln for ln in r.err.splitlines() if ln.strip()]
    if r.rc == 2 and len(errs) == 1 and tail and tail[-1] == errs[0]:
        return "clean", errs[0][:200]
    if r.rc == 0:
        return "wrong", "accepted (exit 0): " + r.last_line()
    return "wrong", "exit %s: %s" % (r.rc, r.last_line())


def classify_ok(r):
    """An input that must work: exit 0, no traceback."""
    if r.rc is None:
        return "wrong", "timed out"
    if r.traceback:
        return "traceback", r.last_line()
    if r.rc == 0:
        return "clean", r.last_line()
    return "wrong", "exit %s: %s" % (r.rc, r.last_line())


# ---------------------------------------------------------------------------------------------- checkpoints
def load_weights(path):
    """The `model` entry of a checkpoint (torch.load weights_only), or None when unreadable."""
    import torch
    try:
        st = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception:
        return None
    return st


def finite_checkpoint(path):
    import torch
    st = load_weights(path)
    if not isinstance(st, dict) or not isinstance(st.get("model"), dict):
        return False
    return all(torch.isfinite(v).all() for v in st["model"].values() if torch.is_tensor(v) and v.is_floating_point())


def nonfinite_files(folder):
    """Checkpoints under `folder` with NaN / inf weights (data lost: a poisoned state was written)."""
    bad = []
    for p in Path(folder).rglob("*.pt"):
        st = load_weights(p)
        if isinstance(st, dict) and isinstance(st.get("model"), dict) and not finite_checkpoint(p):
            bad.append(p.name)
    return bad


def same_weights(a, b):
    import torch
    x, y = load_weights(a), load_weights(b)
    if not (isinstance(x, dict) and isinstance(y, dict)):
        return False
    return set(x["model"]) == set(y["model"]) and all(torch.equal(x["model"][k], y["model"][k]) for k in x["model"])
