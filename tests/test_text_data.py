"""Task `text`: the user's own text data (JSONL, CSV, TSV in TRL's column names), trained, evaluated and
rebuilt from its checkpoint with the checkpoint's vocabulary; bad files are one line naming file and line."""
import json
import subprocess
import sys

import pytest
import torch

from grpo_edge.errors import ConfigError, GrpoEdgeError
from grpo_edge.tasks import get_task, task_from_state
from grpo_edge.training_run import GRPOTrainer

WORDS = ["ab", "ba", "abc", "cab", "bca", "cc", "acb", "bb", "aab", "cba", "bac", "ca"]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def reverse_rows(words=WORDS, ref="answer"):
    return [{"prompt": w + ">", ref: w[::-1], "length": len(w)} for w in words]


def cli(cwd, *args):
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args], capture_output=True,
                          text=True, cwd=str(cwd), timeout=600)


def one_error_line(r):
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(("device:", "note:"))]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_jsonl_records_become_problems_with_their_other_columns(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", reverse_rows())
    task = get_task("text", {"data_path": str(data), "test_fraction": 0.25})
    assert len(task.train_problems) == 9 and len(task.test_problems) == 3
    assert task.tokenizer.chars == ">abc"
    assert task.prompt_len == 4 and task.max_new_tokens == 4                   # "abc>", "cba" + EOS
    assert all(c == {"length": len(p) - 1} for (p, _), c in zip(task.train_problems, task.train_columns))
    x = task.encode_inputs(["ab>"])
    assert x.tolist() == [[0] + task.tokenizer.encode("ab>")]                  # left-padded with PAD (0)
    right = get_task("text", {"data_path": str(data), "padding": "right"})
    assert right.encode_inputs(["ab>"]).tolist() == [task.tokenizer.encode("ab>") + [0]]


def test_completion_column_and_a_test_file(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", reverse_rows(WORDS[:8], ref="completion"))
    test = write_jsonl(tmp_path / "test.jsonl", reverse_rows(WORDS[8:], ref="completion"))
    task = get_task("text", {"data_path": str(train), "test_path": str(test)})
    assert len(task.train_problems) == 8 and task.test_problems[0] == ("aab>", "baa")


def test_csv_and_tsv(tmp_path):
    (tmp_path / "d.csv").write_text('prompt,answer,note\n"a,b>","b,a",x\nab>,ba,y\n', encoding="utf-8")
    (tmp_path / "d.tsv").write_text("prompt\tanswer\nab>\tba\nba>\tab\n", encoding="utf-8")
    task = get_task("text", {"data_path": str(tmp_path / "d.csv")})
    assert sorted(task.train_problems + task.test_problems) == [("a,b>", "b,a"), ("ab>", "ba")]
    task = get_task("text", {"data_path": str(tmp_path / "d.tsv")})
    assert sorted(task.train_problems + task.test_problems) == [("ab>", "ba"), ("ba>", "ab")]


@pytest.mark.parametrize("name, content, message", [
    ("d.jsonl", b"", "task.data_path {p} holds no records"),
    ("d.jsonl", b'{"prompt": "a", "answer": "b"}\n{"prompt": "a", answer}\n', "{p}:2: not JSON"),
    ("d.jsonl", b'[1, 2]\n', "{p}:1: a JSON object per line"),
    ("d.jsonl", b'{"prompt": "a", "answer": "\xff"}\n', "{p}:1: not UTF-8 text (byte 0xff)"),
    ("d.jsonl", b'{"prompt": "a", "answer": "b"}\n' + b'{"prompt": "' + b"x" * (2 << 20) + b'"}\n',
     "{p}:2: a line of 2097166 bytes (over 1048576)"),
    ("d.jsonl", b'{"question": "a", "answer": "b"}\n', "task.data_path {p}: no 'prompt' column (columns found: "
                                                        "question, answer)"),
    ("d.jsonl", b'{"prompt": "a", "solution": "b"}\n', "no 'completion' or 'answer' column (columns found: prompt, "
                                                       "solution)"),
    ("d.jsonl", b'{"prompt": "a", "answer": "b"}\n{"prompt": ["a"], "answer": "b"}\n',
     "{p}:2: column 'prompt' must be text, got list"),
    ("d.csv", b"prompt,answer\na>,b\nc>,d,e\n", "{p}:3: 3 fields, the header has 2 (prompt, answer)"),
    ("d.parquet", b"x", "unknown format '.parquet'"),
])
def test_bad_data_files_are_one_line(tmp_path, name, content, message):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(GrpoEdgeError) as e:
        get_task("text", {"data_path": str(p)})
    assert message.format(p=p) in str(e.value) and "\n" not in str(e.value)


def test_no_data_path_says_how_to_give_one():
    with pytest.raises(ConfigError, match="task text needs task.data_path"):
        get_task("text", {})


@pytest.mark.parametrize("arch, padding", [("micro-gpt", "left"), ("tiny-transformer", "right")])
def test_trains_and_rebuilds_with_the_checkpoints_vocabulary(tmp_path, arch, padding):
    data = write_jsonl(tmp_path / "d.jsonl", reverse_rows())
    tr = GRPOTrainer(config={"task": {"name": "text", "data_path": str(data), "padding": padding},
                             "model": {"arch": arch, "d_model": 32},
                             "training": {"steps": 2, "batch_size": 4, "eval_every": 0, "device": "cpu"},
                             "grpo": {"group_size": 4}}, progress=False)
    tr.train()
    state = tr.state_dict()
    assert state["task_meta"]["tokenizer"]["chars"] == ">abc" and state["task_meta"]["padding"] == padding
    write_jsonl(data, reverse_rows(WORDS + ["abd"]))                # the data grew a character
    with pytest.raises(Exception) as e:
        task_from_state(state)
    assert "d.jsonl:13: character 'd' is not in the model's vocabulary (4 characters" in str(e.value)
    write_jsonl(data, reverse_rows())
    task = task_from_state(state)
    assert task.tokenizer.chars == ">abc" and task.evaluate(tr.policy)["n"] == len(task.test_problems) == 1


def test_cli_trains_on_a_jsonl_file_and_evaluates(tmp_path):
    write_jsonl(tmp_path / "d.jsonl", reverse_rows())
    r = cli(tmp_path, "train", "--set", "task.name=text", "--data-path", "d.jsonl", "--set", "training.steps=2",
            "--set", "training.warm_start_epochs=1", "--set", "model.d_model=32", "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    r = cli(tmp_path, "eval", "run/best.pt", "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)) >= {"exact_match", "chrf", "reward", "n"}
    r = cli(tmp_path, "train", "--set", "task.name=text", "--data-path", "missing.jsonl", "--save-dir", "r2")
    assert "error: --data-path missing.jsonl does not exist" == one_error_line(r)
    assert not (tmp_path / "r2").exists()
