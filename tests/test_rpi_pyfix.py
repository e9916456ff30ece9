"""The pyfix model's Raspberry Pi folder (issue 42, slice 4): `runner.py --program FILE|-` prints the suggested fix
in a venv with only numpy and onnxruntime; a file it cannot take is one line and exit 2; the README says what it
fixes, by bug kind, as deploy measured it. The model here is a 2-step one (the mechanics, not the fix rate:
docs/results.md has the trained model's)."""
import json
import subprocess

import pytest

from conftest import cli_in, pi_python
from grpo_edge.targets.rpi import deploy
from grpo_edge.tasks.pyfix import PROMPT_END, apply_edit, numbered, unnumbered

FAST = {"calibration_samples": 128, "text_runs": 2, "text_warmup": 1, "eval_n": 8}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    work = tmp_path_factory.mktemp("pyfix_pi")
    r = cli_in(work, "train", "--set", "task.name=pyfix", "--set", "task.n_train=64", "--set", "task.n_test=16",
               "--set", "model.d_model=32", "--set", "model.n_layer=1", "--set", "training.steps=2",
               "--set", "training.batch_size=4", "--set", "grpo.group_size=2",
               "--set", "training.warm_start_epochs=1", "--set", "training.eval_n=8", "--save_dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    rep = deploy(work / "run" / "best.pt", "rpi4", work / "pi", FAST)
    return work / "pi", rep


def _runner(out, *args, stdin=None):
    return subprocess.run([pi_python(), "runner.py"] + list(args), cwd=str(out), input=stdin, capture_output=True,
                          timeout=120)


def test_the_folder_its_prompts_and_its_readme(folder):
    out, rep = folder
    for name in ("model.onnx", "model.int8.onnx", "runner.py", "textgen.py", "tokenizer.json", "prompts.jsonl",
                 "example_broken.py", "expected_completions.json", "README.md"):
        assert (out / name).is_file(), name
    tok = json.loads((out / "tokenizer.json").read_text())
    prompts = [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]
    assert tok["prompt_end"] == PROMPT_END and len(prompts) == 8 and all(p.endswith(PROMPT_END) for p in prompts)
    assert tok["output"] == "edit" and prompts[0].startswith("1|def ")
    assert (out / "example_broken.py").read_text() == unnumbered(prompts[0][:-len(PROMPT_END)]) + "\n"
    assert rep.figures["sim_fp32_agreement"].value == 1.0 and rep.figures["metric_onnx_fp32"].unit == "fix_rate"
    breakdown = rep.sections["simulation"]["fp32"]["breakdown"]
    assert "fix_rate" in breakdown and any(k.startswith("fix_rate/") for k in breakdown)
    readme = (out / "README.md").read_text()
    assert "python3 runner.py --program example_broken.py" in readme and "## What it fixes" in readme
    assert "| bug | fix rate |" in readme and "on 8 held-out functions" in readme


def test_runner_fixes_a_file_or_stdin_as_torch_does(folder):
    out, _ = folder
    expected = json.loads((out / "expected_completions.json").read_text())
    r = _runner(out, "--program", "example_broken.py", "--model", "model.onnx", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert numbered(res["program"]) + PROMPT_END == expected["prompts"][0]
    assert res["completion"] == expected["completions"][0]
    assert res["fix"] == apply_edit(res["program"], res["completion"])
    program = (out / "example_broken.py").read_bytes().replace(b"    ", b"\t").replace(b"\n", b"\r\n")
    r = _runner(out, "--program", "-", "--model", "model.onnx", stdin=program)      # tabs and CRLF, from stdin
    assert r.returncode == 0 and r.stdout.decode().rstrip("\n") == res["fix"], r.stderr
    r = _runner(out, "--check")
    assert r.returncode == 0 and r.stdout.decode().strip().endswith("check: PASS (2 models as deploy.json expects)")


@pytest.mark.parametrize("content, message", [
    (b"", "bad.py is empty: there is no program to fix"),
    (b"\n  \n", "bad.py is empty: there is no program to fix"),
    (b"def f(x):\x00\n", "bad.py is binary, not a Python program"),
    (b"def f(x):\n    return '\xff'\n", "bad.py is not UTF-8 text, so not a Python program"),
    (b"def f(x):\n" + b"    x = x + 1\n" * 40, "bad.py has 569 characters: this model fixes programs of at most"),
    (b"Dear teacher, my homework is attached.", "bad.py does not look like a Python function (no def line)"),
    ("def f(x):\n    return 'caf\u00e9'\n".encode(), "bad.py has characters this model does not know: \"\\u00e9\""),
])
def test_a_file_it_cannot_take_is_one_line_and_exit_2(folder, content, message):
    out, _ = folder
    (out / "bad.py").write_bytes(content)
    r = _runner(out, "--program", "bad.py")
    lines = r.stderr.decode().strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: runner: " + message), r.stderr
    (out / "bad.py").unlink()


def test_an_enormous_file_and_a_missing_one(folder, tmp_path):
    out, _ = folder
    big = tmp_path / "big.py"
    big.write_bytes(b"def f(x):\n" + b"    pass\n" * 200000)
    for path, message in ((big, "is 1800010 bytes: this model fixes small functions"),
                          (tmp_path / "nope.py", "program file not found")):
        r = _runner(out, "--program", str(path))
        assert r.returncode == 2 and message in r.stderr.decode() and len(r.stderr.decode().splitlines()) == 1
