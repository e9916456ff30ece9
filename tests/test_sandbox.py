"""grpo_edge.sandbox against hostile programs: real processes, no mocks.

Every hostile test ends with `untouched()`: the files beside the test (tmp_path) are as they were, no sandboxed
process survives, and this process (the programs' parent, which some of them try to kill) is still running.
"""
import dataclasses
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from grpo_edge.sandbox import REASONS, Limits, counts, isolation, run_many, run_python
from grpo_edge import sandbox

FAST = Limits(cpu_s=1, wall_s=3)
SECRET = "s3cr3t-4f9a1c"


def _sandbox_processes():
    """pids of live processes started by a sandbox (their environment names a sandbox folder)."""
    marker = ("TMPDIR=" + os.path.join(os.path.realpath(tempfile.gettempdir()), "grpo_edge_sandbox_")).encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/environ" % name, "rb") as f:
                    if marker in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def _snapshot(folder):
    out = {}
    for root, dirs, files in os.walk(str(folder)):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            data = open(path, "rb").read() if stat.S_ISREG(st.st_mode) else None
            out[path] = (st.st_mode, st.st_mtime_ns, data)
    return out


@pytest.fixture
def untouched(tmp_path):
    """A file to protect in tmp_path; call the fixture's value to check nothing outside the sandbox changed."""
    keep = tmp_path / "keep.txt"
    keep.write_text("the user's file\n")
    (tmp_path / "secret.txt").write_text(SECRET)
    before = _snapshot(tmp_path)

    def check():
        assert _snapshot(tmp_path) == before
        deadline = time.monotonic() + 2.0
        while _sandbox_processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _sandbox_processes() == []
        os.kill(os.getpid(), 0)
    check.keep, check.secret = str(keep), str(tmp_path / "secret.txt")
    return check


def _assert_reasons(programs, expected, limits=FAST):
    results = run_many(programs, limits)
    got = [r.reason for r in results]
    assert got == [expected] * len(programs), "\n".join(
        "%s -> %s: %s" % (p.splitlines()[-1], r.reason, r.stderr[-300:]) for p, r in zip(programs, results))
    return results


def test_passing_failing_and_syntax():
    ok = run_python("print('hello')\nassert sum([1, 2]) == 3\n", limits=FAST)
    assert ok.passed and ok.reason == "ok" and ok.returncode == 0 and ok.stdout == "hello\n"
    bad = run_python("def f(x):\n    return x + 1\nassert f(1) == 3, 'off by one'\n", limits=FAST)
    assert not bad.passed and bad.reason == "failed" and bad.returncode == 1
    assert 'File "program.py", line 3' in bad.stderr and "AssertionError: off by one" in bad.stderr
    assert "_child_" not in bad.stderr                  # the traceback starts at the program, not the bootstrap
    raised = run_python("import json\njson.loads('{')\n", limits=FAST)
    assert raised.reason == "failed" and "JSONDecodeError" in raised.stderr
    syntax = run_python("def f(:\n    pass\n", limits=FAST)
    assert not syntax.passed and syntax.reason == "syntax" and "SyntaxError" in syntax.stderr
    assert run_python("x = 1\0\n", limits=FAST).reason == "syntax"
    crashed = run_python("import faulthandler\nfaulthandler.disable()\nfaulthandler._sigsegv()\n", limits=FAST)
    assert crashed.reason == "crashed" and crashed.returncode < 0
    assert run_python("import sys\nsys.exit(3)\n", limits=FAST)[1:3] == ("failed", 3)
    faked = run_python("import sys\nsys.exit(%d)\n" % sandbox.EXIT_FORBIDDEN, limits=FAST)
    assert faked.reason == "failed" and faked.returncode == 1       # a program cannot take a reserved code


def test_exit_before_the_tests_is_not_a_pass():
    early = ["import sys\nsys.exit(0)\nassert False\n", "import os\nos._exit(0)\nassert False\n",
             "exit()\nassert False\n", "def solve():\n    raise SystemExit\nsolve()\nassert solve() == 1\n"]
    for res in _assert_reasons(early, "exit"):
        assert not res.passed and res.returncode == sandbox.EXIT_EARLY
    unit = ("import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n"
            "        self.assertEqual(1 + 1, %d)\nunittest.main()\n")
    assert run_python(unit % 2, limits=FAST).reason == "ok"          # exit from the last statement: as usual
    failing = run_python(unit % 3, limits=FAST)
    assert failing.reason == "failed" and "FAILED (failures=1)" in failing.stderr
    assert run_python("import sys\nprint('done')\nsys.exit(0)\n", limits=FAST).passed


def test_ordinary_programs_pass():
    programs = [
        "import asyncio\nasync def f():\n    await asyncio.sleep(0.01)\n    return 3\nassert asyncio.run(f()) == 3\n",
        "import threading\nout = []\nt = threading.Thread(target=out.append, args=(1,))\nt.start()\nt.join()\n"
        "assert out == [1]\n",
        "import tempfile, pathlib, json, shutil, os\nwith tempfile.TemporaryDirectory() as d:\n"
        "    p = pathlib.Path(d) / 'a.json'\n    p.write_text(json.dumps([1]))\n    assert json.loads(p.read_text()) == [1]\n"
        "os.makedirs('a/b')\nopen('a/b/c.txt', 'w').write('x')\nshutil.rmtree('a')\nassert os.listdir('.') == ['program.py']\n",
        "open('helper.py', 'w').write('def twice(x):\\n    return 2 * x\\n')\nimport helper\nassert helper.twice(4) == 8\n",
        "import collections, decimal, fractions, heapq, itertools, math, random, re, statistics, string\n"
        "assert math.isclose(statistics.mean([1, 2, 3]), 2)\nprint('caf\\u00e9 \\u2603')\n",
        "import sqlite3\ndb = sqlite3.connect('mine.db')\ndb.execute('create table t(x)')\ndb.commit()\n"
        "assert sqlite3.connect(':memory:').execute('select 2').fetchone() == (2,)\n",
        "import os, sys\nassert os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR']\n"
        "assert __name__ == '__main__' and sys.argv == ['program.py']\n",
    ]
    results = _assert_reasons(programs, "ok")
    assert results[4].stdout == "caf\u00e9 \u2603\n"
    echo = run_python("n = int(input())\nprint(sum(map(int, input().split())) * n)\n", stdin="2\n1 2 3\n", limits=FAST)
    assert echo.passed and echo.stdout == "12\n"
    big_stdin = run_python("import sys\nprint(len(sys.stdin.read()))\n", stdin="x" * 300000, limits=FAST)
    assert big_stdin.stdout == "300000\n"
    assert run_python("print('ignores its input')\n", stdin="y" * 300000, limits=FAST).passed


def test_loops_and_sleeps_stop_at_the_limits(untouched):
    t0 = time.monotonic()
    spin = run_python("while True:\n    pass\n", limits=Limits(cpu_s=1, wall_s=2))
    assert spin.reason in ("cpu", "timeout") and not spin.passed
    assert time.monotonic() - t0 < 4.0
    t0 = time.monotonic()
    sleep = run_python("import time\ntime.sleep(60)\n", limits=Limits(cpu_s=1, wall_s=1))
    assert sleep.reason == "timeout" and 0.9 < sleep.seconds < 2.5 and time.monotonic() - t0 < 3.0
    blocked = run_python("import sys\nsys.stdin.close()\nimport time\ntime.sleep(60)\n", limits=Limits(wall_s=1))
    assert blocked.reason == "timeout"
    untouched()


def test_memory_hogs_fail_and_the_caller_lives(untouched):
    results = _assert_reasons(["x = bytearray(4 << 30)\n", "x = []\nwhile True:\n    x.append(' ' * 4096)\n",
                               "x = [0] * (1 << 34)\n"], "memory", Limits(cpu_s=2, wall_s=5, memory_mb=128))
    assert all(r.seconds < 5 for r in results)
    untouched()


def test_forks_and_subprocesses_are_forbidden(untouched):
    target = os.path.join(os.path.dirname(untouched.keep), "made_by_child")
    programs = [
        "import os\nwhile True:\n    os.fork()\n",
        "import os\ntry:\n    os.fork()\nexcept BaseException:\n    pass\nprint('went on')\n",
        "import subprocess\nsubprocess.run(['touch', %r])\n" % target,
        "import os\nos.system('touch %s')\n" % target,
        "import os\nos.posix_spawn('/usr/bin/touch', ['touch', %r], {})\n" % target,
        "import os\nos.execv('/usr/bin/touch', ['touch', %r])\n" % target,
        "import multiprocessing\nmultiprocessing.Process(target=print).start()\n",
        "import pty\npty.fork()\n",
        "import _posixsubprocess\n_posixsubprocess.fork_exec()\n",
        "import ctypes\nctypes.CDLL(None).fork()\n",
    ]
    results = _assert_reasons(programs, "forbidden")
    assert "went on" not in results[1].stdout and "blocked os.fork" in results[0].stderr
    assert not os.path.exists(target)
    untouched()


def test_the_whole_process_group_is_killed(untouched):
    """The second layer, under the hook: whatever a program starts is in its group and dies with it."""
    folder = tempfile.mkdtemp(prefix="grpo_edge_sandbox_")
    try:
        leader_exits = sandbox._launch(["/bin/sh", "-c", "sleep 30 & echo started"], folder, b"", FAST,
                                       time.monotonic())
        assert leader_exits.passed and leader_exits.stdout == "started\n" and leader_exits.seconds < 2.0
        runs_over = sandbox._launch(["/bin/sh", "-c", "(sleep 30 &); sleep 30"], folder, b"", Limits(wall_s=1),
                                    time.monotonic())
        assert runs_over.reason == "timeout" and runs_over.seconds < 2.5
    finally:
        os.rmdir(folder)
    untouched()


def test_writing_outside_its_folder_is_forbidden(untouched):
    keep = untouched.keep
    out = os.path.join(os.path.dirname(keep), "escaped.txt")
    programs = [
        "open(%r, 'w').write('x')\n" % out,
        "import os\nos.close(os.open(%r, os.O_WRONLY | os.O_CREAT))\n" % out,
        "import pathlib\npathlib.Path(%r).write_text('x')\n" % out,
        "import os\nopen(os.path.relpath(%r), 'a').write('x')\n" % keep,
        "open('mine.txt', 'w').close()\nimport shutil\nshutil.copy('mine.txt', %r)\n" % out,
        "open('mine.txt', 'w').close()\nimport os\nos.rename('mine.txt', %r)\n" % out,
        "import os\nos.link(%r, 'linked.txt')\n" % keep,
        "import os\nos.symlink(%r, 'link.txt')\n" % keep,
        "import os\nos.remove(%r)\n" % keep,
        "import os\nos.chmod(%r, 0o777)\n" % keep,
        "import os\nos.utime(%r, (0, 0))\n" % keep,
        "import os\nos.truncate(%r, 0)\n" % keep,
        "import os\nos.mkdir(%r)\n" % (out + ".d"),
        "import os\nos.chdir('/tmp')\n",
        "import shutil\nshutil.rmtree(%r)\n" % os.path.dirname(keep),
        "import sqlite3\nsqlite3.connect(%r).execute('create table t(x)')\n" % out,
        "import os\nos.mkfifo(%r)\n" % out,
    ]
    _assert_reasons(programs, "forbidden")
    assert not os.path.exists(out) and not os.path.exists(out + ".d")
    untouched()


def test_reading_the_users_files_is_forbidden(untouched, tmp_path):
    path = untouched.secret
    programs = [
        "print(open(%r).read())\n" % path,
        "import pathlib\nprint(pathlib.Path(%r).read_text())\n" % path,
        "import os\nfd = os.open(%r, os.O_RDONLY)\nprint(os.read(fd, 100))\n" % path,
        "import os\nprint(open(os.path.relpath(%r)).read())\n" % path,
        "import os\nprint(os.listdir(%r))\n" % str(tmp_path),
        "import glob\nprint(glob.glob(%r))\n" % (str(tmp_path) + "/*"),
        "print(open('/etc/passwd').read())\n",
        "print(open('/proc/self/environ').read())\n",
        "import os\nfd = os.open('/', os.O_RDONLY)\nprint(os.open('etc/passwd', os.O_RDONLY, dir_fd=fd))\n",
    ]
    for res in _assert_reasons(programs, "forbidden"):
        assert SECRET not in res.stdout + res.stderr and "secret.txt']" not in res.stdout
    untouched()


def test_sockets_are_forbidden_and_nothing_connects(untouched):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        programs = [
            "import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=1).sendall(b'hi')\n" % port,
            "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', %d))\n" % port,
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('127.0.0.1', %d))\n"
            % port,
            "import socket\nsocket.socket().bind(('127.0.0.1', 0))\n",
            "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:%d/')\n" % port,
            "import socket\nsocket.socket(socket.AF_UNIX).connect('/run/docker.sock')\n",
        ]
        for limits in (FAST, dataclasses.replace(FAST, network_namespace=False)):     # the hook alone, too
            _assert_reasons(programs, "forbidden", limits)
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    untouched()


def test_network_namespace_has_no_route_to_the_host():
    """The layer under the hook, where the machine allows it: a plain interpreter in the namespace cannot connect."""
    prefix = sandbox._probe(sys.executable).unshare
    if prefix is None:
        pytest.skip("unshare -n is refused here: the audit hook alone blocks sockets")
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.3)
        code = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=1)\n" \
               "    print('connected')\nexcept OSError as e:\n    print('refused', e)\n" % listener.getsockname()[1]
        done = subprocess.run(list(prefix) + [sys.executable, "-I", "-c", code], stdout=subprocess.PIPE, timeout=10)
        assert done.stdout.decode().startswith("refused")
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def test_killing_the_parent_is_forbidden(untouched):
    programs = [
        "import os\nos.kill(os.getppid(), 9)\n",
        "import os\nos.kill(%d, 15)\n" % os.getpid(),
        "import os\nos.killpg(0, 9)\n",
        "import os\nos.killpg(os.getpgid(os.getppid()), 9)\n",
        "import signal, threading\nsignal.pthread_kill(threading.main_thread().ident, 9)\n",
        "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), 9)\n",
        "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))\n",
    ]
    _assert_reasons(programs, "forbidden")
    untouched()


def test_output_is_capped(untouched):
    limits = Limits(cpu_s=2, wall_s=5, output_bytes=4096)
    flood = run_python("import sys\nsys.stdout.write('x' * 10_000_000)\n", limits=limits)
    assert flood.reason == "output" and flood.stdout == "x" * 4096 and flood.seconds < 3
    errs = run_python("import sys\nwhile True:\n    print('e' * 100, file=sys.stderr)\n", limits=limits)
    assert errs.reason == "output" and len(errs.stderr) == 4096
    big_file = run_python("open('big.bin', 'wb').write(b'0' * (2 << 20))\n", limits=limits)
    assert big_file.reason == "output" and "file_bytes" in big_file.stderr
    many = run_python("for i in range(100):\n    open('f%d' % i, 'w').close()\n", limits=limits)
    assert many.reason == "output" and "more than 64 files" in many.stderr
    untouched()


def test_environment_and_folder_are_the_programs_own(monkeypatch, untouched):
    monkeypatch.setenv("GRPO_EDGE_SECRET", "hunter2-7d1e")
    env = run_python("import os\nprint(sorted(os.environ.items()))\n", limits=FAST)
    assert env.passed and "hunter2" not in env.stdout and "GRPO_EDGE_SECRET" not in env.stdout
    assert "VIRTUAL_ENV" not in env.stdout and "PYTHONPATH" not in env.stdout
    messy = ("import os\nos.makedirs('a/b/c')\nopen('a/b/c/x.txt', 'w').write('x')\nos.chmod('a/b', 0)\n"
             "os.chmod('a', 0)\nprint(os.getcwd())\n")
    res = run_python(messy, limits=FAST)
    assert res.passed and "grpo_edge_sandbox_" in res.stdout
    assert not os.path.exists(res.stdout.strip())
    untouched()


def test_run_many_keeps_order_and_counts_reasons(untouched):
    kinds = [("print(1)\n", "ok"), ("assert 1 == 2\n", "failed"), ("def f(:\n", "syntax"),
             ("import os\nos.fork()\n", "forbidden"), ("import sys\nsys.exit(0)\nprint(2)\n", "exit"),
             ("import socket\nsocket.create_connection(('127.0.0.1', 9))\n", "forbidden"),
             ("x = bytearray(1 << 33)\n", "memory"), ("print('y' * 100000)\n", "output")]
    programs = [kinds[i % len(kinds)] for i in range(16)]
    results = run_many([p for p, _ in programs], FAST, workers=4)
    assert [r.reason for r in results] == [reason for _, reason in programs]
    tally = counts(results)
    assert list(tally) == list(REASONS) and tally["ok"] == 2 and tally["forbidden"] == 4 and sum(tally.values()) == 16
    assert [r.stdout for r in run_many(["print(%d)\n" % i for i in range(6)], FAST, workers=2)] == \
           ["%d\n" % i for i in range(6)]
    assert run_many([], FAST) == []
    untouched()


def test_bad_arguments_and_a_missing_interpreter():
    for kwargs, field in [({"cpu_s": 0}, "cpu_s"), ({"wall_s": -1}, "wall_s"), ({"memory_mb": float("nan")},
                          "memory_mb"), ({"output_bytes": 1.5}, "output_bytes"), ({"open_files": True},
                          "open_files"), ({"network_namespace": "yes"}, "network_namespace")]:
        with pytest.raises(ValueError) as err:
            Limits(**kwargs)
        assert field in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TypeError):
        run_python("pass", limits={"cpu_s": 1})
    with pytest.raises(ValueError):
        run_many(["pass"], workers=0)
    with pytest.raises(ValueError):
        run_many(["pass"], stdins=[])
    missing = run_python("pass\n", limits=FAST, python="/nonexistent/python3")
    assert missing.reason == "error" and not missing.passed and "/nonexistent/python3" in missing.stderr


def test_root_runs_programs_as_nobody_where_it_can():
    """As root, with an interpreter that nobody may read (a system Python), the program runs as nobody."""
    if os.geteuid() != 0:
        pytest.skip("the caller is not root")
    system = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if system is None or isolation(system)["runs_as"] != "nobody":
        pytest.skip("no interpreter here that nobody can run")
    res = run_python("import os, json\nprint(os.getuid(), os.geteuid())\nopen('mine.txt', 'w').write('x')\n",
                     limits=FAST, python=system)
    assert res.passed and res.stdout.split() == [str(sandbox._probe(system).drop_to[0])] * 2
    same = run_python("import os\nprint(os.getuid())\n", limits=Limits(drop_root=False), python=system)
    assert same.stdout == "0\n"


def test_the_docs_tests_pass_reward_scores_through_the_tasks_rewards(tmp_path, monkeypatch):
    """docs/own_task.md's code_rewards.py, named in task.rewards as a user writes it, on a batch with a tests column."""
    from tests.test_own_code import doc_files
    from grpo_edge.tasks.rewards import WeightedRewards
    (tmp_path / "code_rewards.py").write_text(doc_files()["code_rewards.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    rewards = WeightedRewards({"code_rewards:tests_pass": 1.0})
    good, fence = "def add(a, b):\n    return a + b", "`" * 3
    completions = [good, "def add(a, b):\n    return a - b", "def add(a, b)\n    return a + b",
                   "Here:\n%spython\n%s\n%s" % (fence, good, fence), "while True:\n    pass"]
    columns = [{"tests": "assert add(2, 3) == 5"}] * len(completions)
    total, parts = rewards.score(completions, [good] * 5, ["fix it"] * 5, columns)
    assert total.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0] and parts["code_rewards:tests_pass"].tolist() == total.tolist()
