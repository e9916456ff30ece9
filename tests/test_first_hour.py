"""Issue 40: what a new user saw in their first hour, each through the CLI as they ran it: a resume that would
go backwards, a resume with nothing to do, CSV columns typed as `datasets` types them, the single reward named
on the progress line, and `eval --show` examples for every kind of task."""
import json

import yaml

from conftest import cli_in, one_error_line

SMALL = ["--set", "training.batch_size=4", "--set", "grpo.group_size=2", "-q"]


def _train(tmp_path, *args):
    r = cli_in(tmp_path, "train", *args)
    assert r.returncode == 0, r.stderr
    return r


def test_resume_that_would_go_backwards_is_refused_and_nothing_to_do_is_said(tmp_path):
    _train(tmp_path, "--save-dir", "run", "--set", "training.steps=3", *SMALL)
    files = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()}
    r = cli_in(tmp_path, "train", "--save-dir", "run", "--resume", "--set", "training.steps=2", "-q")
    line = one_error_line(r)
    assert "already did 3 steps; training.steps=2 would go backwards" in line
    r = cli_in(tmp_path, "train", "--save-dir", "run", "--resume", "-q")
    assert r.returncode == 0, r.stderr
    assert "nothing to train: run already did 3 of 3 steps" in r.stdout and "done:" not in r.stdout
    assert "resuming from step" not in r.stderr
    # neither call touched the run: config.yaml and summary.json still agree on 3 steps
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()} == files
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["training"]["steps"] == 3
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 3
    r = cli_in(tmp_path, "train", "--save-dir", "run", "--resume", "--set", "training.steps=4", "-q")
    assert r.returncode == 0 and "resuming from step 3 of 4" in r.stderr, r.stderr


REWARDS = '''
SEEN = []


def typed(prompts, completions, answer, difficulty, note, flag, **kwargs):
    SEEN.append(1)
    for a, d, n, f in zip(answer, difficulty, note, flag):
        assert isinstance(d, int) or d is None, ("difficulty", d)
        assert n is None or isinstance(n, str), ("note", n)
        assert isinstance(f, bool), ("flag", f)
        assert isinstance(a, int), ("answer", a)
    return [float(c == str(a)) + 0.1 * (d or 0) for c, a, d in zip(completions, answer, difficulty)]
'''


def test_csv_columns_reach_a_reward_typed_and_the_single_reward_is_named(tmp_path):
    rows = ["prompt,answer,difficulty,note,flag"]
    for i in range(24):
        rows.append("%d+%d=,%d,%s,%s,%s" % (i, i, 2 * i, "" if i % 5 == 0 else i % 3, "x" if i % 2 else "",
                                           "TRUE" if i % 2 else "false"))
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (tmp_path / "csv_rewards.py").write_text(REWARDS, encoding="utf-8")
    r = cli_in(tmp_path, "train", "--data-path", "d.csv", "--save-dir", "run", "--set", "training.steps=2",
               "--set", "training.warm_start_epochs=0", "--set", 'task.rewards={"csv_rewards:typed": 1.0}',
               "--set", "training.batch_size=4", "--set", "grpo.group_size=2")
    assert r.returncode == 0, r.stderr
    steps = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("step ")]
    assert steps and all("(csv_rewards:typed)" in ln for ln in steps), steps
    from grpo_edge.data.records import read_records
    recs = read_records(tmp_path / "d.csv")
    assert recs[0].values["difficulty"] is None and recs[1].values["difficulty"] == 1
    assert recs[0].values["note"] is None and recs[1].values["note"] == "x" and recs[1].values["flag"] is True
    assert recs[1].values["answer"] == 2 and recs[1].text["answer"] == "2"


def test_a_weighted_single_reward_shows_its_own_mean(capsys):
    from grpo_edge.progress import TrainProgress
    p = TrainProgress(total=1)                 # stderr is not a terminal here: plain step lines
    p.update(1, {"reward_mean": 0.25, "rewards/mine/mean": 0.5}, None)
    p.update(1, {"reward_mean": 0.5, "rewards/mine/mean": 0.5}, None)
    text = capsys.readouterr().err
    assert "reward 0.250 (mine 0.500)" in text and "reward 0.500 (mine)" in text


def test_eval_show_prints_examples_for_control_text_and_images(tmp_path):
    _train(tmp_path, "--save-dir", "cp", "--set", "training.steps=1", *SMALL)
    r = cli_in(tmp_path, "eval", "cp/last.pt", "--n", "3", "--show", "2")
    assert r.returncode == 0, r.stderr
    shown = [ln for ln in r.stdout.splitlines() if ln.startswith("  episode: ")]
    assert len(shown) == 2 and all("| return: " in ln and "| length: " in ln for ln in shown)
    r = cli_in(tmp_path, "eval", "cp/last.pt", "--n", "3", "--show", "1", "--json")
    ex = json.loads(r.stdout)["examples"]
    assert len(ex) == 1 and ex[0]["return"] == ex[0]["length"] > 0          # CartPole: 1 per step

    _train(tmp_path, "--save-dir", "ar", "--set", "task.name=arithmetic", "--set", "training.steps=1",
           "--set", "training.warm_start_epochs=0", *SMALL)
    r = cli_in(tmp_path, "eval", "ar/last.pt", "--n", "4", "--show", "3")
    assert r.returncode == 0, r.stderr
    shown = [ln for ln in r.stdout.splitlines() if ln.startswith("  prompt: ")]
    assert len(shown) == 3 and all("| answer: " in ln and "| reference: " in ln for ln in shown)

    _train(tmp_path, "--save-dir", "dg", "--set", "task.name=digits", "--set", "training.steps=1", "-q")
    r = cli_in(tmp_path, "eval", "dg/last.pt", "--n", "4", "--show", "2")
    shown = [ln for ln in r.stdout.splitlines() if ln.startswith("  input: ")]
    assert len(shown) == 2 and all("| predicted: " in ln and "| label: " in ln for ln in shown)


def test_the_docs_typed_column_reward_scores_a_csv(tmp_path, monkeypatch):
    """docs/own_task.md's reward reading a numeric CSV column, run as written on a CSV with an empty cell."""
    import re
    import sys
    from pathlib import Path
    from grpo_edge.tasks import get_task
    doc = (Path(__file__).resolve().parent.parent / "docs" / "own_task.md").read_text(encoding="utf-8")
    block = [t for lang, t in re.findall(r"```(\w+)\n(.*?)```", doc, re.S) if t.startswith("# csv_rewards.py")][0]
    (tmp_path / "doc_rewards.py").write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("doc_rewards", None)
    rows = ["prompt,answer,difficulty"] + ["%d+1=,%d,%s" % (i, i + 1, "" if i == 0 else i % 4) for i in range(20)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    task = get_task("text", {"data_path": str(tmp_path / "d.csv"), "test_fraction": 0.1,
                             "rewards": {"doc_rewards:harder_counts_more": 1.0}})
    cols = task.columns("train")[:2]
    refs = [str(c["answer"]) for c in cols]
    total, _ = task.rewards.score(refs, refs, ["p", "p"], cols)
    want = [1.0 + (c["difficulty"] or 0) / 10.0 for c in cols]
    import torch
    assert total.tolist() == torch.tensor(want).tolist() and any(c["difficulty"] for c in cols)
    sys.modules.pop("doc_rewards", None)


def test_the_default_reward_is_not_named_after_itself(capsys):
    """The sweep of the README's commands (issue 40): digits printed "reward 0.090 (reward)"."""
    from grpo_edge.progress import TrainProgress
    TrainProgress(total=1).update(1, {"reward_mean": 0.25, "rewards/reward/mean": 0.25}, None)
    text = capsys.readouterr().err
    assert "reward 0.250 |" in text and "(reward)" not in text


def test_a_calibration_array_without_samples_is_one_line(tmp_path):
    """The sweep (issue 40): docs/rpi.md's `deploy --onnx model.onnx --calibration calib.npy` with a .npy that
    holds one value (here the __meta__ entry of a calibrate .npz, saved alone) was a TypeError traceback."""
    import numpy as np
    from session_cache import checkpoint
    r = cli_in(tmp_path, "export", checkpoint("cartpole"), "--out", "model.onnx")
    assert r.returncode == 0, r.stderr
    np.save(str(tmp_path / "calib.npy"), np.array('{"task": "cartpole"}'))
    np.save(str(tmp_path / "words.npy"), np.array(["a", "b"] * 200))
    for target in ("rpi5", "esp32"):
        r = cli_in(tmp_path, "deploy", "--target", target, "--onnx", "model.onnx", "--calibration", "calib.npy",
                   "--out", "out-" + target)
        assert one_error_line(r) == ("error: calibration file calib.npy: array 'inputs' is a single value of <U20, "
                                     "not samples along a first axis (N, ...) of numbers")
    r = cli_in(tmp_path, "deploy", "--target", "rpi5", "--onnx", "model.onnx", "--calibration", "words.npy",
               "--out", "out-w")
    assert "array 'inputs' is shape (400,) of <U1" in one_error_line(r)


def test_a_missing_data_path_says_what_a_data_path_is(tmp_path):
    """The sweep (issue 40): the article's command, `--data_path ./data/translation_pairs`, without the data."""
    r = cli_in(tmp_path, "train", "--config", "config/tiny_transformer.yaml", "--data_path",
               "./data/translation_pairs", "--save_dir", "./checkpoints")
    assert one_error_line(r) == ("error: --data-path ./data/translation_pairs does not exist (your data: a JSONL / "
                                 "CSV / TSV file, or a folder with train and test files; the built-in tasks make "
                                 "their own data without --data-path)")
    assert not (tmp_path / "checkpoints").exists()


def test_quantize_says_when_the_inputs_it_measures_on_lie_outside_the_calibration_range(tmp_path):
    """The sweep (issue 40): `quantize ... --task cartpole` reported max_abs_diff 2.88 (0.066 on held-out
    calibration samples) without saying why: the task's states reach 8x past the calibrated range."""
    import numpy as np
    from session_cache import checkpoint
    assert cli_in(tmp_path, "export", checkpoint("cartpole"), "--out", "model.onnx").returncode == 0
    rng = np.random.RandomState(0)
    np.savez(str(tmp_path / "narrow.npz"), obs=(0.01 * rng.randn(400, 4)).astype(np.float32))
    np.savez(str(tmp_path / "wide.npz"), obs=(3.0 * rng.randn(400, 4)).astype(np.float32))
    r = cli_in(tmp_path, "quantize", "model.onnx", "--calibration", "narrow.npz", "--out", "n.int8.onnx",
               "--task", "cartpole")
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "outside the calibration set's range" in ln]
    assert len(warn) == 1 and warn[0].startswith("warning: ") and "task cartpole's input 'obs'" in warn[0], r.stderr
    assert warn[0] in ["warning: " + w for w in json.loads(r.stdout)["warnings"]]
    r = cli_in(tmp_path, "quantize", "model.onnx", "--calibration", "wide.npz", "--out", "w.int8.onnx",
               "--task", "cartpole")
    assert r.returncode == 0 and "outside the calibration" not in r.stderr, r.stderr
