"""The README's "Your own problem" examples, run as written: its files are written into a fresh folder and
its commands run there, one by one, with the package's `grpo-edge` on PATH (as with .venv active)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Your own problem"


def readme_blocks(section=SECTION):
    """[(language, text)] of the fenced code blocks in one README section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    body = text[start:end if end > 0 else len(text)]
    return re.findall(r"```(\w+)\n(.*?)```", body, re.S)


def example_files_and_commands():
    files, commands = {}, []
    for lang, text in readme_blocks():
        first = text.splitlines()[0]
        if lang == "python":
            assert first.startswith("# ") and first.endswith(".py"), "a python block starts with '# file.py'"
            files[first[2:].strip()] = text
        elif lang == "bash":
            commands += [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return files, commands


def test_the_section_has_the_three_kinds_of_own_code():
    files, commands = example_files_and_commands()
    assert set(files) == {"mygrid.py", "mytasks.py", "make_data.py", "my_rewards.py"}
    names = " ".join(commands)
    for form in ("task.name=Pendulum-v1", "mygrid:GridWorld ", "mygrid:GridWorld-v0", "mytasks:Loudest",
                 "--data-path reverse.jsonl", "my_rewards:reversed_ok"):
        assert form in names + " "


@pytest.mark.slow
def test_readme_own_problem_examples_run_as_written(tmp_path):
    files, commands = example_files_and_commands()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for cmd in commands:
        r = subprocess.run(["bash", "-c", cmd], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, "%s\n%s" % (cmd, r.stderr[-3000:])
    for run in ("pendulum", "grid", "grid-v0", "loudest", "reverse"):
        assert (tmp_path / "runs" / run / "best.pt").exists()
    for out in ("grid-esp32", "loudest-esp32", "reverse-esp32s3"):
        f = json.loads((tmp_path / "deploy" / out / "report.json").read_text())["figures"]
        assert f["host_bit_exact"]["value"] is True and f["rv32_bit_exact"]["value"] is True, out
    for out in ("pendulum-rpi4", "grid-rpi4", "loudest-rpi4"):
        assert (tmp_path / "deploy" / out / "model.int8.onnx").exists(), out
    grid = json.loads((tmp_path / "runs" / "grid" / "summary.json").read_text())
    loudest = json.loads((tmp_path / "runs" / "loudest" / "summary.json").read_text())
    assert loudest["best_accuracy"] > 0.6, loudest          # chance is 0.25
    assert grid["best_return"] > 0.8, grid                # +1 at the goal, -0.01 a step
    reverse = json.loads((tmp_path / "runs" / "reverse" / "summary.json").read_text())
    assert reverse["best_exact_match"] > 0.8, reverse
    last = json.loads((tmp_path / "runs" / "reverse" / "metrics.jsonl").read_text().splitlines()[-1])
    assert "rewards/my_rewards:reversed_ok/mean" in last
