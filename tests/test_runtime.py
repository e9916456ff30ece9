"""grpo_edge/runtime: the modules that run on devices are shipped byte-identical, import nothing of
grpo_edge, are Python 3.6-valid, and work as loose files in a deploy folder (as shipped)."""
import filecmp
import importlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need_tool
from grpo_edge import runtime
from test_jetson_tegrastats import NANO_5W_BUSY, ORIN_JP6

MODULES = sorted(p.stem for p in runtime.HERE.glob("*.py") if p.stem != "__init__")


def test_every_runtime_module_is_standalone():
    assert {"ort_session", "char_tokenizer", "textgen", "pi_runner", "tegrastats", "build_engine",
            "run_engine"} <= set(MODULES)
    for m in MODULES:
        text = runtime.path_of(m).read_text()
        assert "grpo_edge." not in "".join(ln for ln in text.splitlines(True) if "import" in ln), m


def test_runtime_is_python36_valid():
    vermin = need_tool("vermin", "pip install vermin")
    r = subprocess.run([vermin, "-t=3.6-", "--no-tips", "--violations"] + [str(runtime.path_of(m)) for m in MODULES],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ship_copies_bytes_and_modes(tmp_path):
    names = runtime.ship(tmp_path, {"runner.py": "pi_runner", "ort_session.py": "ort_session"})
    assert names == ["runner.py", "ort_session.py"]
    assert filecmp.cmp(str(tmp_path / "runner.py"), str(runtime.path_of("pi_runner")), shallow=False)
    assert stat.S_IMODE(os.stat(str(tmp_path / "runner.py")).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(str(tmp_path / "ort_session.py")).st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_jetson_folder_ships_runtime_unchanged(tmp_path):
    import torch
    from grpo_edge.core.models import build_model
    from grpo_edge.export.torch2onnx import torch2onnx
    from grpo_edge.targets.jetson import deploy
    torch.manual_seed(0)
    torch2onnx(build_model("mlp", obs_dim=4, n_actions=2, hidden=16).eval(), tmp_path / "m.onnx")
    deploy(str(tmp_path / "m.onnx"), "jetson-nano", str(tmp_path / "out"), {"precision": "fp16"})
    for name in ("build_engine.py", "run_engine.py", "tegrastats.py"):
        assert filecmp.cmp(str(tmp_path / "out" / name), str(runtime.path_of(name[:-3])), shallow=False), name


class _StandInEngine(object):
    """TensorRT cannot be installed here: an object with the engine interface run_engine.benchmark drives."""

    class stream(object):
        @staticmethod
        def synchronize():
            pass

    def prepare(self, feed):
        self.feed = feed

    def run(self):
        sum(range(2000))


@pytest.mark.parametrize("line, rail, mw", [(ORIN_JP6, "VDD_IN", 4981), (NANO_5W_BUSY, "POM_5V_IN", 4685)])
def test_shipped_run_engine_samples_power_through_shipped_tegrastats(tmp_path, monkeypatch, line, rail, mw):
    """run_engine.py imported as a loose file from a folder (as on the Jetson) finds tegrastats.py next to
    it; a stand-in `tegrastats` executable prints recorded Nano / Orin lines."""
    folder = tmp_path / "kit"
    folder.mkdir()
    runtime.ship(folder, {"run_engine.py": "run_engine", "tegrastats.py": "tegrastats"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "tegrastats"
    exe.write_text("#!%s\nimport sys, time\nms = int(sys.argv[sys.argv.index('--interval') + 1])\n"
                   "while True:\n    print(%r, flush=True)\n    time.sleep(ms / 1000.0)\n" % (sys.executable, line))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    monkeypatch.syspath_prepend(str(folder))
    for name in ("run_engine", "tegrastats"):
        sys.modules.pop(name, None)
    run_engine = importlib.import_module("run_engine")
    assert Path(run_engine.__file__).parent == folder
    out = run_engine.benchmark(_StandInEngine(), {}, iters=50, warmup=5, tegrastats=True)
    for name in ("run_engine", "tegrastats"):
        sys.modules.pop(name, None)
    assert out["power_rail"] == rail and out["power_samples"] >= 3
    assert out["power_mw_mean"] == mw and out["energy_j"] == pytest.approx(mw / 1000.0 * out["median_s"])
