"""benchmarks/control_suite.py (issue 41, slice 2) runs as its users run it: in pieces, appending to one JSON,
resuming, refusing bad input in one line, recording a run that crashes inside a library and going on."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "control_suite.py"


def suite(*args):
    return subprocess.run([sys.executable, str(SUITE)] + [str(a) for a in args], capture_output=True, text=True,
                          cwd=str(ROOT), timeout=600)


@pytest.mark.parametrize("args, message", [
    (["--env", "CartPol-v1"], "error: unknown env 'CartPol-v1': the suite knows CartPole-v1, Acrobot-v1, "),
    (["--budget-s", "0"], "error: --budget-s must be > 0, got 0"),
    (["--algo", "sac"], "error: unknown algo 'sac': grpo-edge, sb3-ppo, sb3-sac"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    r = suite(*(args + ["--json", tmp_path / "r.json"]))
    assert r.returncode == 2 and r.stderr.startswith(message) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_results_file_of_another_version_is_refused(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"version": 0, "script": "benchmarks/control_suite.py", "runs": {}}))
    r = suite("--json", old, "--report")
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: %s is from version 0 of benchmarks/control_suite.py, this is version 1: give another --json (its "
        "runs are not comparable)" % old)
    other = tmp_path / "other.json"
    other.write_text("[1, 2]")
    r = suite("--json", other)
    assert r.returncode == 2 and "was not written by benchmarks/control_suite.py" in r.stderr


def test_runs_append_resume_and_report(tmp_path):
    out = tmp_path / "suite.json"
    r = suite("--env", "CartPole-v1", "--algo", "grpo-edge", "--seed", "0", "--budget-s", "1.5", "--json", out)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert data["version"] == 1 and list(data["runs"]) == ["CartPole-v1/grpo-edge/seed0/1.5s"]
    run = data["runs"]["CartPole-v1/grpo-edge/seed0/1.5s"]
    assert run["status"] == "ok" and run["threshold"] == 475.0 and run["final_n"] == 50
    assert run["recipe"].startswith("recipe: configs/classic_control.yaml, CartPole-v1 is a classic-control")
    t = [p[0] for p in run["curve"]]
    assert t == sorted(t) and t[0] == 0.0 and run["train_s"] >= 1.5 and len(t) >= 5
    assert run["curve"][-1][2] > run["curve"][0][2]           # it learned something in 1.5 s
    r = suite("--env", "CartPole-v1", "--algo", "grpo-edge", "--seed", "0", "1", "--budget-s", "1.5", "--json", out)
    assert r.returncode == 0 and "1 runs to do (1 already in" in r.stdout, r.stdout   # seed 0 is not run again
    data = json.loads(out.read_text())
    assert sorted(data["runs"]) == ["CartPole-v1/grpo-edge/seed0/1.5s", "CartPole-v1/grpo-edge/seed1/1.5s"]
    assert data["runs"]["CartPole-v1/grpo-edge/seed0/1.5s"] == run
    r = suite("--json", out, "--report")
    assert r.returncode == 0, r.stderr
    md = out.with_suffix(".md").read_text()
    assert "| CartPole-v1 | 1.5s | " in md and "(n 2)" in md
    assert (tmp_path / "suite" / "CartPole-v1.png").stat().st_size > 10000
    assert (tmp_path / "suite" / "overview.png").stat().st_size > 10000
    piece = tmp_path / "piece.json"                  # a piece run as its own process, merged in
    r = suite("--env", "CartPole-v1", "--algo", "grpo-edge", "--seed", "2", "--budget-s", "1.5", "--json", piece)
    assert r.returncode == 0, r.stderr
    r = suite("--json", out, "--merge", piece, "--report")
    assert r.returncode == 0 and "(n 3)" in out.with_suffix(".md").read_text(), r.stderr
    assert len(json.loads(out.read_text())["runs"]) == 3
    r = suite("--json", out, "--merge", tmp_path / "nope.json", "--report")
    assert r.returncode == 2 and r.stderr.strip() == "error: --merge %s: no such file" % (tmp_path / "nope.json")


def test_a_run_that_crashes_inside_a_library_is_recorded_as_failed():
    pytest.importorskip("stable_baselines3", reason="the bench extra (pip install -e '.[bench]'), not in ci/setup.sh")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import control_suite
    res = control_suite.worker({"env": "CartPole-v1", "algo": "sb3-sac", "seed": 0, "budget_s": 1})
    assert res["status"] == "failed" and "Discrete" in res["reason"] + res["traceback"], res


def test_recipe_sweep_runs_variants_side_by_side(tmp_path):
    sweep = ROOT / "benchmarks" / "recipe_sweep.py"
    out = tmp_path / "sweep.json"
    r = subprocess.run([sys.executable, str(sweep), "--env", "CartPole-v1", "--variant", "lr=training.lr",
                        "--json", str(out)], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert r.returncode == 2 and r.stderr.strip() == "error: --variant lr: 'training.lr' is not section.key=value"
    r = subprocess.run([sys.executable, str(sweep), "--env", "CartPole-v1", "--seed", "0", "--budget-s", "1",
                        "--variant", "base=", "--variant", "slow=training.lr=0.0001", "--json", str(out)],
                       capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert r.returncode == 0, r.stderr
    runs = json.loads(out.read_text())["runs"]
    assert sorted(runs) == ["CartPole-v1/base/seed0/1s", "CartPole-v1/slow/seed0/1s"]
    assert runs["CartPole-v1/slow/seed0/1s"]["overrides"] == ["training.lr=0.0001"]
    assert all(run["status"] == "ok" for run in runs.values())
    # lr 1e-4 barely moves the policy in a second; the recipe's 3e-3 does
    assert runs["CartPole-v1/base/seed0/1s"]["final_return"] > runs["CartPole-v1/slow/seed0/1s"]["final_return"]
    assert "| base | (the recipe) | 1 |" in r.stdout and "| slow | training.lr=0.0001 | 1 |" in r.stdout
