"""Built test inputs (sample ONNX models, fixture checkpoints), made once per test session.

Each pytest process builds them into its own fresh temporary folder, removed when the process exits:
nothing outlives the session, so a build left over from older code can never hide a broken path (an
earlier, machine-wide cache did exactly that). Building everything the suite uses takes about half a
minute.
"""
import atexit
import os
import shutil
import tempfile
from pathlib import Path

_FOLDER = []


def folder() -> Path:
    """This session's build folder (created on first use, deleted at exit)."""
    if not _FOLDER:
        path = Path(tempfile.mkdtemp(prefix="grpo-edge-session-"))
        atexit.register(shutil.rmtree, str(path), True)
        _FOLDER.append(path)
    return _FOLDER[0]


def _once(name: str, make) -> Path:
    path = folder() / name
    if not path.exists():
        tmp = folder() / (".%d.%s" % (os.getpid(), name))
        made = make(tmp)
        os.replace(str(made), str(path))
    return path


def sample(name: str) -> Path:
    """grpo_edge.targets.esp32.samples.build(name): the quantized <name>.int8.onnx, with the fp32
    <name>.onnx it was made from in the same folder."""
    from grpo_edge.targets.esp32 import samples

    def make(tmp):
        tmp.mkdir()
        samples.build(name, tmp)
        return tmp
    return _once("sample-" + name, make) / (name + ".int8.onnx")


def checkpoint(kind: str) -> Path:
    """A trained fixture checkpoint: 'cartpole' or 'digits' (tests/edge_fixtures.py)."""
    from edge_fixtures import make_cartpole_checkpoint, make_digits_checkpoint
    make = {"cartpole": make_cartpole_checkpoint, "digits": make_digits_checkpoint}[kind]
    return _once(kind + ".pt", lambda tmp: make(tmp) and tmp)


def text_checkpoint(kind: str) -> Path:
    """A tiny text checkpoint: 'arithmetic' or 'zh-en-numbers' (tests/text_fixtures.py)."""
    from text_fixtures import make_text_checkpoint
    return _once("text-%s.pt" % kind, lambda tmp: make_text_checkpoint(tmp, kind) and tmp)
