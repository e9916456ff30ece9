"""Run `python -m MODULE args...` as forked child processes of one that has already imported torch and
grpo_edge: each command is still its own process (own exit code, stdin/stdout/stderr files, signals), but
it does not pay the 3-10 s import again. The import is not what the hostile cases test.

    server: python forkserver.py           (PYTHONPATH = the checkout under test; reads JSON lines)
    request: {"module": "grpo_edge.cli.main", "argv": [...], "cwd": ..., "env": {...}, "stdin": path|null,
              "out": path, "err": path, "timeout": s}      -> reply {"rc": int or null}
"""
import json
import os
import signal
import sys
import time


def serve():
    import torch  # noqa: F401  (the point: imported once, before any fork)
    import grpo_edge.cli.main  # noqa: F401
    import grpo_edge.online  # noqa: F401
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        rc = _wait(pid, req["timeout"])
        sys.stdout.write(json.dumps({"rc": rc}) + "\n")
        sys.stdout.flush()


def _wait(pid, timeout):
    t0 = time.time()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        if time.time() - t0 > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.01)


def _child(req):
    code = 1
    try:
        os.setsid()
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        fd_in = os.open(req["stdin"] or os.devnull, os.O_RDONLY)
        fd_out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        fd_err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((fd_in, 0), (fd_out, 1), (fd_err, 2)):
            os.dup2(fd, target)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.path.insert(0, req["cwd"])                 # `python -m` puts the working folder first
        import importlib
        import runpy
        importlib.invalidate_caches()
        sys.argv = [req["module"]] + list(req["argv"])
        try:
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                sys.stderr.write("%s\n" % e.code)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)


if __name__ == "__main__":
    serve()
