"""Host instruction counts under valgrind callgrind: per call of one function, and per segment between
chosen functions (the per-op split of a model's invoke, ours and TFLite Micro's).

    instructions(cmd, "gx_invoke", n)                      # inclusive instructions per call
    segments(cmd, "*MicroInterpreter::Invoke*", [kernels])  # [(trigger, instructions)] in execution order
    callees(text, "*InvokeSubgraph*")                       # the functions one function called

Only what runs inside `collect` (a --toggle-collect glob) is counted. segments() adds a --dump-before for
each function in `dump_before`: callgrind writes the counts so far and starts again at zero each time one is
entered, so each segment is the work done since the previous trigger (the first trigger's segment is what
ran before it). The rv32 counts live in rv32.py.
"""
import fnmatch
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from grpo_edge.errors import TargetError

TRIGGER = re.compile(r"^desc: Trigger: (?:--dump-before=)?(.*)$", re.M)
TOTALS = re.compile(r"^(?:summary|totals): (\d+)", re.M)


def _run(cmd, collect, dump_before, stdin_path, workdir) -> list:
    """Run cmd under callgrind; -> the texts of its output files, in the order they were written."""
    if shutil.which("valgrind") is None:
        raise TargetError("valgrind not found (apt-get install valgrind)")
    out = Path(workdir) / "callgrind.out"
    full = (["valgrind", "--tool=callgrind", "--callgrind-out-file=%s" % out, "--toggle-collect=%s" % collect]
            + ["--dump-before=%s" % f for f in dump_before] + list(cmd))
    fin = open(stdin_path, "rb") if stdin_path is not None else subprocess.DEVNULL
    try:
        r = subprocess.run(full, stdin=fin, capture_output=True, timeout=900)
    finally:
        if stdin_path is not None:
            fin.close()
    if r.returncode != 0 or not out.exists():
        raise TargetError("callgrind failed: %s" % ((r.stderr.decode(errors="replace").strip().splitlines()
                                                     or ["?"])[-1]))
    dumps = sorted(Path(workdir).glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
    return [p.read_text(errors="replace") for p in dumps] + [out.read_text(errors="replace")]


def _total(text) -> int:
    m = TOTALS.findall(text)
    if not m:
        raise TargetError("callgrind wrote no totals")
    return int(m[-1])


def instructions(cmd, function_glob, n_calls, stdin_path=None) -> float:
    """Instructions executed inside function_glob (inclusive), per call, under valgrind callgrind."""
    with tempfile.TemporaryDirectory(prefix="cg_") as d:
        return _total(_run(cmd, function_glob, (), stdin_path, d)[-1]) / float(n_calls)


def profile_text(cmd, collect, stdin_path=None) -> str:
    """The callgrind output (one file, no dumps) of what ran inside `collect`, for callees()."""
    with tempfile.TemporaryDirectory(prefix="cg_") as d:
        return _run(cmd, collect, (), stdin_path, d)[-1]


def segments(cmd, collect, dump_before, stdin_path=None) -> list:
    """[(trigger, instructions)]: each segment ends where `trigger` was entered ("Program termination" last)."""
    with tempfile.TemporaryDirectory(prefix="cg_") as d:
        texts = _run(cmd, collect, dump_before, stdin_path, d)
    out = []
    for t in texts:
        m = TRIGGER.search(t)
        out.append((m.group(1).strip() if m else "", _total(t)))
    return out


def callees(text, caller_glob) -> list:
    """Names of the functions that a function matching caller_glob called (callgrind's compressed names:
    "(id) name" the first time, "(id)" after), in the order they first appear."""
    names, caller, found = {}, None, []
    for line in text.splitlines():
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if not m:
            continue
        kind, ident, name = m.groups()
        if name:
            names[ident] = name
        if kind == "fn":
            caller = names.get(ident, "")
        elif fnmatch.fnmatchcase(caller or "", caller_glob) and names.get(ident) not in found:
            found.append(names.get(ident))
    return [f for f in found if f]
