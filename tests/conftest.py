import importlib
import os
import shutil
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)   # tiny models: one thread is faster and steadier on a shared 2-core machine


def require_tools():
    """GRPO_EDGE_REQUIRE_TOOLS=1 (set by CI) turns 'tool missing' skips into failures."""
    return os.environ.get("GRPO_EDGE_REQUIRE_TOOLS") == "1"


def unavailable_here(reason):
    """Skip because a tool or package the test needs is missing here, saying which and how to get it;
    a failure instead under GRPO_EDGE_REQUIRE_TOOLS=1. Only for things ci/setup.sh installs: what cannot
    be installed on this kind of machine at all (TensorRT, a CUDA GPU) skips with a plain pytest.skip."""
    if require_tools():
        pytest.fail("required tool missing (GRPO_EDGE_REQUIRE_TOOLS=1): " + reason)
    pytest.skip(reason, allow_module_level=True)


def need(ok, reason):
    if not ok:
        unavailable_here(reason)


def need_tool(name, hint=None):
    """The path of command `name`, or unavailable_here."""
    path = shutil.which(name) or (os.path.join(os.path.dirname(sys.executable), name)
                                  if os.path.exists(os.path.join(os.path.dirname(sys.executable), name)) else None)
    if not path:
        unavailable_here("%s not found (%s)" % (name, hint or "apt-get install " + name))
    return path


def need_module(name, hint=None):
    """Import a third-party module, or unavailable_here. An ImportError raised inside the module (or
    anywhere in grpo_edge) is a real failure and propagates."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if (e.name or "").split(".")[0] != name.split(".")[0]:
            raise
        unavailable_here("%s not importable (pip install %s)" % (name, hint or name))


def slow_opt_in(reason):
    """Skip a test too slow for the default run unless GRPO_EDGE_SLOW=1."""
    return pytest.mark.skipif(os.environ.get("GRPO_EDGE_SLOW") != "1", reason=reason + ": GRPO_EDGE_SLOW=1")


@pytest.fixture
def root():
    return ROOT


def cli_in(cwd, *args):
    """`grpo-edge ARGS` as a user runs it in their project folder: a fresh process, their modules beside them."""
    import subprocess
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args], capture_output=True,
                          text=True, cwd=str(cwd), timeout=600)


def one_error_line(r):
    """The one `error:` line of a refused command (exit 2; device and note lines aside)."""
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(("device:", "note:", "recipe:"))]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


_PI_PYTHON = []


def pi_python():
    """The python of a venv that holds only numpy and onnxruntime (what a Pi user installs from the deploy
    folder's requirements.txt), linked from this environment's copies: nothing is downloaded, torch and
    grpo_edge are not importable there. Made once per test session, in TMPDIR."""
    if _PI_PYTHON:
        return _PI_PYTHON[0]
    import subprocess
    import tempfile
    import numpy
    import onnxruntime
    root = tempfile.mkdtemp(prefix="pi_venv_")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.path.join(root, "venv")], check=True)
    site = os.path.join(root, "site")
    os.mkdir(site)
    for mod in (numpy, onnxruntime):
        src = os.path.dirname(mod.__file__)
        os.symlink(src, os.path.join(site, os.path.basename(src)))
        libs = src + ".libs"                    # numpy.libs: the wheel's bundled shared libraries
        if os.path.isdir(libs):
            os.symlink(libs, os.path.join(site, os.path.basename(libs)))
    py = os.path.join(root, "venv", "bin", "python")
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "only_numpy_onnxruntime.pth"), "w") as f:
        f.write(site + "\n")
    _PI_PYTHON.append(py)
    return py
