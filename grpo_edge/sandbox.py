"""Run untrusted Python programs (code a model writes during RL training) in a throwaway process, with limits.

    from grpo_edge.sandbox import Limits, counts, run_many, run_python
    res = run_python("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n")
    res.passed, res.reason                      # True, "ok"
    results = run_many(programs, Limits(cpu_s=1.0, wall_s=3.0))
    counts(results)                             # {"ok": 12, "failed": 3, "timeout": 1, ...} to log

Threat model
------------
The programs come from a model being trained: mostly wrong, sometimes looping, allocating, forking or poking
at the machine by accident, and sometimes learning to game the reward (exiting 0 before the tests run). The
sandbox keeps such programs from hurting the trainer or the machine, and scores them: `Result.passed` is true
only for a program that ran to its end and exited 0 within every limit, and `Result.reason` says why not, from
a fixed set (REASONS) that the trainer counts and logs.

It is NOT a security boundary against a determined attacker. The audit hook below is a tripwire inside the
program's own interpreter, which Python's documentation says cannot sandbox code: a program that goes
looking can get around it (introspection into the bootstrap, crafted bytecode, interpreter bugs, ctypes were
it allowed), and nothing here stops kernel bugs. The process-level layers (limits, process group, network
namespace, user nobody) hold whatever the program does in Python; for code written to escape, run the
trainer inside a container or VM that is itself the boundary.

Design
------
Parent (this process), for each program:
- an empty temporary folder (deleted after) as the working directory, HOME and TMPDIR;
- a fresh interpreter `python -I -S -B` (isolated: no PYTHON* variables, no user or site packages, no .pyc
  written), with an environment of its own (no variable of the trainer's), in a new session: at the end or at
  a limit its whole process group is killed with SIGKILL, so anything it started dies with it;
- inside a new network namespace (`unshare -n`, probed once) where the machine allows it: no network at all;
- as user nobody when the trainer runs as root and nobody can run the interpreter (probed once): then the
  kernel, not only the hook, stops it from killing the trainer or writing the trainer's files;
- stdin fed and stdout / stderr read as they come, at most output_bytes each (more is killed: "output"); a
  wall clock ("timeout"). Programs run in parallel in threads (run_many), each thread waiting on its child.
Child (the bootstrap: the `_child_*` functions below, shipped through `-c`; as bytecode to this interpreter):
- resource limits: RLIMIT_CPU ("cpu"), RLIMIT_AS ("memory"), RLIMIT_FSIZE ("output"), RLIMIT_NOFILE,
  RLIMIT_CORE = 0. Not RLIMIT_NPROC: it counts every process and thread of the user (the trainer's own,
  the other programs running beside it), so no value stops a fork without breaking threads or racing the
  programs in parallel; forks are stopped by the hook, and the group kill ends any that get through;
- an audit hook (PEP 578) that ends the program ("forbidden") at: fork / exec / spawn / system /
  subprocess, kill / killpg / pthread_kill, a network socket (a Unix socketpair, which asyncio needs, is
  allowed; connect / bind / send / name look-ups are not), ctypes, os.chdir, symlinks, setrlimit, reading
  outside its folder (but for the interpreter's own library, imported from) and changing anything outside it;
  the escapes that raise no event (os.pidfd_open, signal.pidfd_send_signal, os.mknod / mkfifo, os.chroot,
  os.unshare / setns, os.setpriority and sched_set* on other pids, _posixsubprocess.fork_exec) are replaced
  in their modules by functions that end the program the same way;
- os._exit and exit() become SystemExit, so that an exit with status 0 before the program's last statement
  (`sys.exit(0)` ahead of the tests) scores "exit", not a pass; `unittest.main()` as the last statement
  exits as usual;
- the program compiled ("syntax") and run as __main__ with fresh globals; MemoryError -> "memory". The
  bootstrap reports through reserved exit codes (EXIT_*), which a program's own exit status cannot take.
"""
import dataclasses
import inspect
import marshal
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

try:
    import pwd
except ImportError:                     # not a POSIX system: there is no nobody to become
    pwd = None

REASONS = {
    "ok": "ran to its end and exited 0 within every limit",
    "failed": "exited non-zero: a failed assert, an uncaught exception, sys.exit(1)",
    "syntax": "did not compile",
    "exit": "exited with status 0 before its last statement (sys.exit(0), os._exit(0)): its tests did not run",
    "timeout": "ran past wall_s (sleeping, blocked on input, or starved of CPU)",
    "cpu": "used more than cpu_s of CPU time",
    "memory": "needed more than memory_mb of memory",
    "output": "wrote more than output_bytes to stdout or stderr, a file over file_bytes, or over files_written files",
    "forbidden": "tried a blocked operation: a process, a signal, a socket, ctypes, a file outside its folder",
    "crashed": "killed by a signal (a segfault, an abort)",
    "error": "the sandbox could not run it (the machine's fault, not the program's: see stderr)",
}

EXIT_FORBIDDEN = 91
EXIT_MEMORY = 92
EXIT_SYNTAX = 93
EXIT_EARLY = 94
EXIT_OUTPUT = 95
EXIT_ERROR = 96
_EXIT_REASONS = {EXIT_FORBIDDEN: "forbidden", EXIT_MEMORY: "memory", EXIT_SYNTAX: "syntax", EXIT_EARLY: "exit",
                 EXIT_OUTPUT: "output", EXIT_ERROR: "error"}

_WHOLE = ("output_bytes", "open_files", "file_bytes", "files_written")
_FLAGS = ("network_namespace", "drop_root")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one program may use. Every number must be > 0."""
    cpu_s: float = 2.0              # CPU seconds; RLIMIT_CPU counts whole seconds, so this is rounded up
    wall_s: float = 5.0             # wall-clock seconds, interpreter start included
    memory_mb: float = 256          # address space (RLIMIT_AS), the interpreter's own ~20 MB included
    output_bytes: int = 65536       # each of stdout and stderr; Result keeps at most this much of each
    open_files: int = 64            # file descriptors (RLIMIT_NOFILE), stdin / stdout / stderr included
    file_bytes: int = 1 << 20       # the largest file it may write in its folder (RLIMIT_FSIZE)
    files_written: int = 64         # how many times it may open a file for writing (with file_bytes: disk)
    network_namespace: bool = True  # run in a new network namespace where the machine allows it
    drop_root: bool = True          # run as nobody when the caller is root, where nobody can run Python

    def __post_init__(self):
        for field in dataclasses.fields(self):
            _check_limit(field.name, getattr(self, field.name))


def _check_limit(name, value):
    if name in _FLAGS:
        ok, need = isinstance(value, bool), "True or False"
    elif name in _WHOLE:
        ok, need = isinstance(value, int) and not isinstance(value, bool) and value > 0, "a whole number > 0"
    else:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and value > 0)
        need = "a number > 0"
    if not ok:
        raise ValueError("Limits.%s must be %s, got %r" % (name, need, value))


class Result(NamedTuple):
    """How one program ended. `passed` is `reason == "ok"`; stdout / stderr are cut at output_bytes."""
    passed: bool
    reason: str                     # one of REASONS
    returncode: Optional[int]       # the exit status, -N for signal N, None if it never ran
    stdout: str
    stderr: str
    seconds: float                  # wall clock, interpreter start to reaped


def run_python(source: str, stdin="", limits: Optional[Limits] = None, python: Optional[str] = None) -> Result:
    """Run the program `source` in a sandbox (see the module docstring); never raises for what it does.

    stdin: text (or bytes) it reads on standard input. python: the interpreter (default sys.executable).
    """
    limits = _limits(limits)
    if not isinstance(source, str):
        raise TypeError("source must be str, got %s" % type(source).__name__)
    data = stdin.encode("utf-8") if isinstance(stdin, str) else bytes(stdin)
    python = python or sys.executable
    return _run(source, data, limits, python, _probe(python))


def run_many(sources: Sequence[str], limits: Optional[Limits] = None, workers: Optional[int] = None,
             stdins: Optional[Sequence[str]] = None, python: Optional[str] = None) -> List[Result]:
    """run_python over many programs, `workers` at a time (default: os.cpu_count()); results in order."""
    sources = list(sources)
    stdins = [""] * len(sources) if stdins is None else list(stdins)
    if len(stdins) != len(sources):
        raise ValueError("stdins has %d entries for %d sources" % (len(stdins), len(sources)))
    workers = (os.cpu_count() or 1) if workers is None else workers
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError("workers must be a whole number > 0, got %r" % (workers,))
    limits = _limits(limits)
    if not sources:
        return []
    _probe(python or sys.executable)        # once, before the threads start
    with ThreadPoolExecutor(max_workers=min(workers, len(sources))) as pool:
        return list(pool.map(lambda s, i: run_python(s, i, limits, python), sources, stdins))


def counts(results) -> Dict[str, int]:
    """{reason: how many results have it} over every reason in REASONS, zeros included (steady log keys)."""
    out = dict.fromkeys(REASONS, 0)
    for res in results:
        out[res.reason] += 1
    return out


def isolation(python: Optional[str] = None) -> Dict[str, object]:
    """What this machine allows the sandbox, probed once per interpreter: for reports and logs."""
    iso = _probe(python or sys.executable)
    return {"network_namespace": iso.unshare is not None, "unshare": " ".join(iso.unshare or ()) or None,
            "runs_as": "nobody" if iso.drop_to else "the caller",
            "caller_is_root": hasattr(os, "geteuid") and os.geteuid() == 0}


def _limits(limits):
    if limits is None:
        return Limits()
    if not isinstance(limits, Limits):
        raise TypeError("limits must be a grpo_edge.sandbox.Limits, got %s" % type(limits).__name__)
    return limits


# --- what the machine allows, probed once ------------------------------------------------------------------

class _Isolation(NamedTuple):
    unshare: Optional[Tuple[str, ...]]      # argv prefix that starts a new network namespace, or None
    drop_to: Optional[Tuple[int, int]]      # (uid, gid) of nobody, or None


_PROBED: Dict[str, _Isolation] = {}
_PROBE_LOCK = threading.Lock()
_DROP_PROBE = "import os, json, decimal, collections, re, unittest\nprint(os.getuid())\n"


def _probe(python):
    with _PROBE_LOCK:
        if python not in _PROBED:
            unshare = _probe_unshare()
            _PROBED[python] = _Isolation(unshare, _probe_drop(python, unshare))
        return _PROBED[python]


def _probe_unshare():
    """`unshare -n` (as root), else `unshare -r -n` (an unprivileged user namespace); None if neither runs."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    for flags in (("-n",), ("-r", "-n")):
        try:
            done = subprocess.run((exe,) + flags + ("true",), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=3)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return (exe,) + flags
    return None


def _probe_drop(python, unshare):
    """nobody's (uid, gid) if the caller is root and a sandboxed program can import the stdlib as nobody."""
    if pwd is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return None
    drop = (nobody.pw_uid, nobody.pw_gid)
    res = _run(_DROP_PROBE, b"", Limits(), python, _Isolation(unshare, drop))
    return drop if res.passed and res.stdout.strip() == str(nobody.pw_uid) else None


# --- the parent: one program ---------------------------------------------------------------------------------

def _run(source, data, limits, python, iso):
    start = time.monotonic()
    folder = os.path.realpath(tempfile.mkdtemp(prefix="grpo_edge_sandbox_"))
    try:
        argv = _child_argv(folder, source, limits, python, iso)
        return _launch(argv, folder, data, limits, start)
    finally:
        _remove_tree(folder)


def _child_argv(folder, source, limits, python, iso):
    program = os.path.join(folder, "program.py")
    with open(program, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(source)
    drop = iso.drop_to if limits.drop_root else None
    if drop:
        os.chown(folder, drop[0], drop[1])
    cfg = {"folder": folder, "program": program, "cpu_seconds": max(1, int(math.ceil(limits.cpu_s))),
           "memory_bytes": int(limits.memory_mb * 2 ** 20), "file_bytes": limits.file_bytes,
           "open_files": limits.open_files, "files_written": limits.files_written,
           "uid": drop[0] if drop else None, "gid": drop[1] if drop else None}
    prefix = iso.unshare if (limits.network_namespace and iso.unshare) else ()
    if python == sys.executable:        # this interpreter reads our bytecode: 3 ms less than compiling source
        boot = "import marshal, sys\nexec(marshal.loads(bytes.fromhex(sys.argv.pop(1))))\n_child_main(%r)\n"
        return list(prefix) + [python, "-I", "-S", "-B", "-c", boot % (cfg,), _child_bytecode()]
    return list(prefix) + [python, "-I", "-S", "-B", "-c", _child_source() + "\n_child_main(%r)\n" % (cfg,)]


def _child_env(folder):
    # MALLOC_ARENA_MAX: glibc reserves 64 MB of address space per thread arena, which RLIMIT_AS counts
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": folder, "TMPDIR": folder, "MALLOC_ARENA_MAX": "2"}


def _launch(argv, folder, data, limits, start):
    try:
        proc = subprocess.Popen(argv, cwd=folder, env=_child_env(folder), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return Result(False, "error", None, "", "sandbox: cannot start %s: %s" % (argv[0], exc),
                      time.monotonic() - start)
    pidfd = _pidfd(proc.pid)
    pipes = _Pipes(proc, data, limits.output_bytes, pidfd)
    try:
        status = _wait(proc, pipes, start + limits.wall_s, pidfd is not None)
        _kill_group(proc)
        if status != "output":
            pipes.drain(0.5)            # what it wrote before it ended; its group is dead, so EOF comes soon
            status = "output" if pipes.overflow else status
    finally:
        _kill_group(proc)
        rc = _reap(proc)
        pipes.close()
        if pidfd is not None:
            os.close(pidfd)
    reason = _reason(status, rc)
    if reason == "failed" and os.path.basename(argv[0]) == "unshare" and pipes.text("stderr").startswith("unshare: "):
        reason = "error"                        # the namespace could not be made: the machine's fault
    return Result(reason == "ok", reason, rc, pipes.text("stdout"), pipes.text("stderr"),
                  time.monotonic() - start)


def _wait(proc, pipes, deadline, have_pidfd):
    """Pump the pipes until the program exits ("exited"), overflows ("output") or runs out of time ("timeout")."""
    while True:
        if _exited(proc):
            return "exited"
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        # a pidfd wakes select() at the exit; without one, look every 10 ms
        if pipes.pump(left if have_pidfd else min(left, 0.01)):
            return "output"


def _reason(status, rc):
    if status in ("output", "timeout"):
        return status
    if rc == 0:
        return "ok"
    if rc is None:
        return "error"
    if rc in _EXIT_REASONS:
        return _EXIT_REASONS[rc]
    if rc in (-signal.SIGXCPU, -signal.SIGKILL):        # RLIMIT_CPU's soft, then hard limit
        return "cpu"
    if rc == -signal.SIGXFSZ:
        return "output"
    return "crashed" if rc < 0 else "failed"


def _pidfd(pid):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):           # Python < 3.9, Linux < 5.3, not Linux
        return None


def _exited(proc):
    """Has the program exited? Without reaping it: while it is a zombie its pid, hence its group id, stays
    reserved, so the group kill after it cannot hit a stranger that got the number."""
    if hasattr(os, "waitid"):
        try:
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True
    return proc.poll() is not None


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:                             # nothing left in the group
        pass


def _reap(proc):
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:           # stuck in the kernel even after SIGKILL: leave it
        return None


def _remove_tree(folder):
    shutil.rmtree(folder, ignore_errors=True)
    if os.path.lexists(folder):                 # the program made a subfolder unreadable: open it up, retry
        for root, dirs, _ in os.walk(folder):
            for d in dirs:
                try:
                    os.chmod(os.path.join(root, d), 0o700)
                except OSError:
                    pass
        shutil.rmtree(folder, ignore_errors=True)


class _Pipes:
    """The child's stdin, stdout and stderr, pumped without blocking: stdin fed, each output kept up to `cap`
    bytes (`overflow` is set, and reading stops, when one has more)."""

    def __init__(self, proc, data, cap, pidfd):
        self.sel = selectors.DefaultSelector()
        self.cap, self.overflow = cap, False
        self.proc = proc
        self.buf = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
        self.names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        self.reading = set(self.buf)
        for fd in self.buf:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
        self.stdin, self.data = proc.stdin, memoryview(data)
        if data:
            os.set_blocking(proc.stdin.fileno(), False)
            self.sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        else:
            self._close_stdin()
        self.pidfd = pidfd
        if pidfd is not None:
            self.sel.register(pidfd, selectors.EVENT_READ)

    def pump(self, timeout):
        """Wait up to `timeout` s for the pipes (or the pidfd), move what is ready; True once an output overflowed."""
        for key, _ in self.sel.select(timeout):
            if key.fd in self.buf:
                self._read(key.fd)
            elif self.stdin is not None and key.fd == self.stdin.fileno():
                self._write()
        return self.overflow

    def drain(self, seconds):
        if self.pidfd is not None:
            self.sel.unregister(self.pidfd)     # readable from now on: it would spin select()
            self.pidfd = None
        end = time.monotonic() + seconds
        while self.reading and not self.overflow and time.monotonic() < end:
            self.pump(max(0.0, end - time.monotonic()))

    def _read(self, fd):
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.sel.unregister(fd)
            self.reading.discard(fd)
            return
        buf = self.buf[fd]
        buf += chunk
        if len(buf) > self.cap:
            del buf[self.cap:]
            self.overflow = True

    def _write(self):
        try:
            n = os.write(self.stdin.fileno(), self.data[:65536])
        except BlockingIOError:
            return
        except OSError:                         # it closed stdin or ended: what it did not read is dropped
            n = len(self.data)
        self.data = self.data[n:]
        if not self.data:
            self.sel.unregister(self.stdin.fileno())
            self._close_stdin()

    def _close_stdin(self):
        try:
            self.stdin.close()
        except OSError:
            pass
        self.stdin = None

    def text(self, name):
        fd = next(fd for fd, n in self.names.items() if n == name)
        return bytes(self.buf[fd]).decode("utf-8", "replace")

    def close(self):
        self.sel.close()
        if self.stdin is not None:
            self._close_stdin()
        self.proc.stdout.close()
        self.proc.stderr.close()


# --- the child: the bootstrap, shipped through -c (it runs before, and around, the program) ------------------

# events that end the program whatever their arguments
_CHILD_BANNED = frozenset((
    "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "os.startfile",
    "os.kill", "os.killpg", "signal.pthread_kill", "os.chdir", "os.symlink", "resource.setrlimit",
    "resource.prlimit", "webbrowser.open", "pty.spawn", "sqlite3.enable_load_extension", "sqlite3.load_extension"))
_CHILD_BANNED_PREFIXES = ("subprocess.", "ctypes.", "syslog.", "_winapi.", "winreg.", "msvcrt.")
_CHILD_BANNED_IMPORTS = frozenset(("_ctypes", "_testcapi", "_testinternalcapi", "_xxsubinterpreters",
                                   "_xxinterpchannels", "_testmultiphase", "_testsinglephase"))
_CHILD_AF_UNIX = 1                  # socket.AF_UNIX on Linux and macOS
# event: (changes something?, ((index of a path argument, index of its dir_fd argument or None), ...)),
# the argument layouts CPython (3.8 and later) raises them with, checked on 3.11
_CHILD_PATH_EVENTS = {
    "os.listdir": (False, ((0, None),)), "os.scandir": (False, ((0, None),)), "os.fwalk": (False, ((0, 4),)),
    "os.getxattr": (False, ((0, None),)), "os.listxattr": (False, ((0, None),)),
    "os.mkdir": (True, ((0, 2),)), "os.remove": (True, ((0, 1),)), "os.rmdir": (True, ((0, 1),)),
    "os.chmod": (True, ((0, 2),)), "os.chown": (True, ((0, 3),)), "os.utime": (True, ((0, 3),)),
    "os.truncate": (True, ((0, None),)), "os.rename": (True, ((0, 2), (1, 3))),
    "os.link": (True, ((0, 2), (1, 3))), "os.setxattr": (True, ((0, None),)),
    "os.removexattr": (True, ((0, None),)),
    "sqlite3.connect": (True, ((0, None),)), "dbm.open": (True, ((0, None),)),    # files opened from C
}
_CHILD_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
# os / posix functions that raise no audit event but reach other processes, make files or leave the jail
_CHILD_UNAUDITED = ("pidfd_open", "mknod", "mkfifo", "chroot", "unshare", "setns", "setpriority",
                    "sched_setaffinity", "sched_setscheduler", "sched_setparam")


def _child_main(cfg):
    """The bootstrap: read the program, set the limits, become nobody, arm the guards, then run it."""
    import os
    import sys
    with open(cfg["program"], "rb") as f:
        source = f.read()
    roots = tuple(sorted({os.path.realpath(p) for p in sys.path if p}))    # the stdlib, imported from
    real_exit, write, stdout = os._exit, os.write, sys.stdout

    def finish(code, message=None):
        for stream in (sys.stdout, stdout, sys.stderr, sys.__stderr__):   # the program may have swapped them
            try:
                stream.flush()
            except BaseException:
                pass
        if message:
            try:
                write(2, ("\nsandbox: %s\n" % message).encode("utf-8", "replace"))
            except BaseException:
                pass
        real_exit(code)

    try:
        _child_limits(cfg)
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        _child_disarm(finish)
        sys.addaudithook(_child_hook(cfg, roots, finish))
    except Exception as exc:                    # the sandbox's failure, not the program's
        finish(EXIT_ERROR, "cannot set up the sandbox: %s: %s" % (type(exc).__name__, exc))
    code = _child_compile(source, finish)
    _child_run(code, source, cfg, finish)


def _child_limits(cfg):
    import resource

    def cap(which, soft, hard):
        old = resource.getrlimit(which)[1]
        if old != resource.RLIM_INFINITY:       # never above the hard limit we were given
            soft, hard = min(soft, old), min(hard, old)
        resource.setrlimit(which, (soft, hard))
    cap(resource.RLIMIT_CPU, cfg["cpu_seconds"], cfg["cpu_seconds"] + 1)    # SIGXCPU, a second later SIGKILL
    cap(resource.RLIMIT_AS, cfg["memory_bytes"], cfg["memory_bytes"])
    cap(resource.RLIMIT_FSIZE, cfg["file_bytes"], cfg["file_bytes"])
    cap(resource.RLIMIT_NOFILE, cfg["open_files"], cfg["open_files"])
    cap(resource.RLIMIT_CORE, 0, 0)


def _child_disarm(finish):
    """Take out the escapes that raise no audit event; make os._exit and exit() raise SystemExit."""
    import builtins
    import os
    import posix
    import sys
    import _signal

    def early_exit(code=None):
        raise SystemExit(code)

    def blocker(what):
        return lambda *args, **kwargs: finish(EXIT_FORBIDDEN, "blocked %s" % what)
    try:
        import _posixsubprocess
    except ImportError:
        _posixsubprocess = None
    # `signal` copies _signal's functions when it is first imported: patching _signal (and signal, had start-up
    # imported it) covers both without importing signal here, which would add 5 ms to every program
    for mod, names in ((os, _CHILD_UNAUDITED), (posix, _CHILD_UNAUDITED), (_signal, ("pidfd_send_signal",)),
                       (sys.modules.get("signal"), ("pidfd_send_signal",)), (_posixsubprocess, ("fork_exec",))):
        for name in names:
            if mod is not None and hasattr(mod, name):
                setattr(mod, name, blocker("%s.%s" % (mod.__name__, name)))
    os._exit = posix._exit = early_exit
    builtins.exit = builtins.quit = early_exit      # site (skipped by -S) would have added them


def _child_hook(cfg, roots, finish):
    """The audit hook: ends the program at a banned event, a file outside its folder, too many files written."""
    import os
    folder, written = cfg["folder"], [0]
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

    def inside(real):
        return real == folder or real.startswith(folder + os.sep)

    def library(real):
        return any(real == r or real.startswith(r + os.sep) for r in roots)

    def resolve(path, dir_fd=None):
        """The real path an argument names; None for an open descriptor (it passed the check when opened)."""
        if path is None:
            path = "."
        if isinstance(path, int):
            return None
        if type(path) not in (str, bytes):
            path = os.fspath(path)
            if type(path) not in (str, bytes):
                finish(EXIT_FORBIDDEN, "blocked a path of type %s" % type(path).__name__)
        path = os.fsdecode(path)
        if dir_fd not in (None, -1, -100) and not os.path.isabs(path):
            path = os.path.join(os.readlink("/proc/self/fd/%d" % dir_fd), path)
        return os.path.realpath(path)

    def check_open(path, mode, flags):
        real = resolve(path)
        if real is None:
            return
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags):
            if real == "/dev/null":
                return
            if not inside(real):
                finish(EXIT_FORBIDDEN, "blocked writing %s (outside its folder)" % real)
            written[0] += 1
            if written[0] > cfg["files_written"]:
                finish(EXIT_OUTPUT, "opened more than %d files for writing" % cfg["files_written"])
        elif not (inside(real) or real in _CHILD_DEVICES or (library(real) and not os.path.isdir(real))):
            # no directory outside: a descriptor of one would let dir_fd paths slip past resolve()
            finish(EXIT_FORBIDDEN, "blocked reading %s (outside its folder)" % real)

    def check_paths(event, args, changes, pairs):
        for path_at, fd_at in pairs:
            if path_at < len(args):
                dir_fd = args[fd_at] if fd_at is not None and fd_at < len(args) else None
                real = resolve(args[path_at], dir_fd)
                if real is not None and not (inside(real) or (not changes and library(real))):
                    finish(EXIT_FORBIDDEN, "blocked %s %s (outside its folder)" % (event, real))

    def hook(event, args):
        try:
            if event in _CHILD_BANNED or event.startswith(_CHILD_BANNED_PREFIXES):
                finish(EXIT_FORBIDDEN, "blocked %s" % event)
            elif event.startswith("socket."):
                if not (event == "socket.__new__" and len(args) > 1 and args[1] == _CHILD_AF_UNIX):
                    finish(EXIT_FORBIDDEN, "blocked %s (no network)" % event)
            elif event == "import":
                if args[0] in _CHILD_BANNED_IMPORTS:
                    finish(EXIT_FORBIDDEN, "blocked import %s" % args[0])
            elif event == "open":
                check_open(*args[:3])
            elif event in _CHILD_PATH_EVENTS:
                check_paths(event, args, *_CHILD_PATH_EVENTS[event])
        except MemoryError:
            raise
        except Exception as exc:                # a check that cannot decide blocks
            finish(EXIT_FORBIDDEN, "blocked %s (%s)" % (event, type(exc).__name__))
    return hook


def _child_compile(source, finish):
    import sys
    try:
        return compile(source, "program.py", "exec", dont_inherit=True)
    except MemoryError:
        finish(EXIT_MEMORY, "MemoryError while compiling")
    except (SyntaxError, ValueError, RecursionError) as exc:      # ValueError: a null byte (Python <= 3.11)
        sys.__excepthook__(type(exc), exc.with_traceback(None), None)
        finish(EXIT_SYNTAX)


def _child_run(code, source, cfg, finish):
    """Run the program as __main__ with fresh globals; map how it ended to an exit code."""
    import sys
    main = type(sys)("__main__")
    main.__file__, main.__builtins__ = cfg["program"], __builtins__
    sys.modules["__main__"], sys.argv = main, ["program.py"]
    sys.path.insert(0, cfg["folder"])           # as `python program.py` would: its own modules import
    try:
        exec(code, main.__dict__)
    except MemoryError:
        finish(EXIT_MEMORY, "MemoryError: over the memory limit")
    except SystemExit as exc:
        finish(*_child_exit_status(exc, source))
    except BaseException as exc:
        tb = exc.__traceback__.tb_next                # from the program's frame: not the bootstrap's
        sys.__excepthook__(type(exc), exc.with_traceback(tb), tb)
        too_big = isinstance(exc, OSError) and exc.errno == 27             # EFBIG: over RLIMIT_FSIZE
        finish(EXIT_OUTPUT if too_big else 1, "a file over the file_bytes limit" if too_big else None)
    finish(0)


def _child_exit_status(exc, source):
    """(exit code, message) for a SystemExit: status 0 counts only from the program's last statement."""
    import sys
    code = exc.code
    if code is None or code is False or code == 0:
        tb = exc.__traceback__.tb_next
        import ast
        body = ast.parse(source).body
        if tb is not None and body and tb.tb_lineno >= body[-1].lineno:
            return 0, None
        return EXIT_EARLY, "exit with status 0 on line %s, before the program's end" % (tb and tb.tb_lineno)
    if isinstance(code, int):
        code = code & 0xFF
        reserved = (0, EXIT_FORBIDDEN, EXIT_MEMORY, EXIT_SYNTAX, EXIT_EARLY, EXIT_OUTPUT, EXIT_ERROR)
        return (1 if code in reserved else code), None
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1, None


_CHILD_FUNCTIONS = (_child_main, _child_limits, _child_disarm, _child_hook, _child_compile, _child_run,
                    _child_exit_status)
_CHILD_CONSTANTS = ("EXIT_FORBIDDEN", "EXIT_MEMORY", "EXIT_SYNTAX", "EXIT_EARLY", "EXIT_OUTPUT", "EXIT_ERROR",
                    "_CHILD_BANNED", "_CHILD_BANNED_PREFIXES", "_CHILD_BANNED_IMPORTS", "_CHILD_AF_UNIX",
                    "_CHILD_PATH_EVENTS", "_CHILD_DEVICES", "_CHILD_UNAUDITED")
_CHILD_CACHE = {}


def _child_source():
    """The bootstrap's source: its constants and functions, read from this file once."""
    if "source" not in _CHILD_CACHE:
        parts = ["%s = %r" % (name, globals()[name]) for name in _CHILD_CONSTANTS]
        parts += [inspect.getsource(fn) for fn in _CHILD_FUNCTIONS]
        _CHILD_CACHE["source"] = "\n".join(parts)
    return _CHILD_CACHE["source"]


def _child_bytecode():
    """The bootstrap compiled by this interpreter, marshalled, as hex (an argv string)."""
    if "bytecode" not in _CHILD_CACHE:
        code = compile(_child_source(), "<sandbox bootstrap>", "exec", dont_inherit=True)
        _CHILD_CACHE["bytecode"] = marshal.dumps(code).hex()
    return _CHILD_CACHE["bytecode"]
