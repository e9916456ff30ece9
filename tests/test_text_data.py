"""Task `text`: the user's own text data (JSONL, CSV, TSV in TRL's column names), trained, evaluated and
rebuilt from its checkpoint with the checkpoint's vocabulary; bad files are one line naming file and line."""
import json
import sys

import pytest
import torch

from grpo_edge.errors import ConfigError, GrpoEdgeError
from grpo_edge.tasks import get_task, task_from_state
from grpo_edge.training_run import GRPOTrainer

from conftest import cli_in, one_error_line

WORDS = ["ab", "ba", "abc", "cab", "bca", "cc", "acb", "bb", "aab", "cba", "bac", "ca"]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def reverse_rows(words=WORDS, ref="answer"):
    return [{"prompt": w + ">", ref: w[::-1], "length": len(w)} for w in words]


def test_jsonl_records_become_problems_with_their_other_columns(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", reverse_rows())
    task = get_task("text", {"data_path": str(data), "test_fraction": 0.25})
    assert len(task.train_problems) == 9 and len(task.test_problems) == 3
    assert task.tokenizer.chars == ">abc"
    assert task.prompt_len == 4 and task.max_new_tokens == 4                   # "abc>", "cba" + EOS
    assert all(c == {"answer": r, "length": len(p) - 1} for (p, r), c in zip(task.train_problems, task.train_columns))
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
    ("d.jsonl", b'{"prompt": [{"role": "user", "content": "hi"}], "answer": "b"}\n',
     "{p}:1: column 'prompt' is a list of chat messages (TRL's conversational form)"),
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
    r = cli_in(tmp_path, "train", "--set", "task.name=text", "--data-path", "d.jsonl", "--set", "training.steps=2",
            "--set", "training.warm_start_epochs=1", "--set", "model.d_model=32", "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    r = cli_in(tmp_path, "eval", "run/best.pt", "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)) >= {"exact_match", "chrf", "reward", "n"}
    r = cli_in(tmp_path, "train", "--set", "task.name=text", "--data-path", "missing.jsonl", "--save-dir", "r2")
    assert one_error_line(r).startswith("error: --data-path missing.jsonl does not exist (your data: a JSONL")
    assert not (tmp_path / "r2").exists()


# ---------------------------------------------------------------------------------------------- TRL's rewards
REWARDS = '''
import math


def reversed_ok(prompts, completions, answer, **kwargs):
    """TRL's form: a batch by keyword; answer is the data's column."""
    return [1.0 if c == a else 0.0 for c, a in zip(completions, answer)]


def long_only(completions, length, **kwargs):
    """None: not applicable (short words)."""
    return [float(len(c) == n) if n >= 3 else None for c, n in zip(completions, length)]


def named_out_of_order(prompt, completion, reference):
    """The per-sample form with its parameters in another order: they go by name."""
    return 1.0 if completion == reference and prompt.endswith(">") else 0.0


def one_arg(x):
    return 1.0


def too_few(prompts, completions, **kwargs):
    return [1.0]


def nan_reward(prompts, completions, **kwargs):
    return [math.nan for _ in completions]


def text_reward(prompts, completions, **kwargs):
    return ["good" for _ in completions]


def no_columns(prompts, completions):
    return [0.0 for _ in completions]


def raises_later(prompts, completions, **kwargs):
    if any(c == "" for c in completions) or len(completions) > 4:
        raise KeyError("score")
    return [0.0 for _ in completions]
'''


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_rewards", None)


def test_trl_rewards_get_the_batch_and_columns_by_keyword(rewards_module):
    data = write_jsonl(rewards_module / "d.jsonl", reverse_rows())
    task = get_task("text", {"data_path": str(data), "rewards": {"my_rewards:reversed_ok": 1.0,
                                                                 "my_rewards:long_only": 0.5,
                                                                 "my_rewards:named_out_of_order": 0.25}})
    prompts, refs = ["abc>", "ab>"], ["cba", "ba"]
    total, parts = task.rewards.score(["cba", "xx"], refs, prompts, [{"answer": "cba", "length": 3},
                                                                      {"answer": "ba", "length": 2}])
    assert parts["my_rewards:reversed_ok"].tolist() == [1.0, 0.0]
    assert parts["my_rewards:long_only"][0] == 1.0 and torch.isnan(parts["my_rewards:long_only"][1])
    assert parts["my_rewards:named_out_of_order"].tolist() == [1.0, 0.0]
    assert total.tolist() == [1.75, 0.0]                       # None adds nothing


def test_a_builtin_task_passes_its_reference_as_answer(rewards_module):
    task = get_task("arithmetic", {"max_operand": 9, "rewards": {"my_rewards:reversed_ok": 1.0}})
    _, parts = task.rewards.score(["3", "4"], ["3", "5"], ["1+2=", "2+3="])
    assert parts["my_rewards:reversed_ok"].tolist() == [1.0, 0.0]


@pytest.mark.parametrize("fn, message", [
    ("one_arg", "reward 'my_rewards:one_arg' raised TypeError: one_arg() takes 1 positional argument but 3 were given"),
    ("too_few", "called as fn(prompts=[...], completions=[...], answer=[...], length=[...]): reward "
                "'my_rewards:too_few' returned 1 values for 4 completions"),
    ("nan_reward", "reward 'my_rewards:nan_reward' returned nan for sample 0"),
    ("text_reward", "reward 'my_rewards:text_reward' returned str 'good', not a number for sample 0"),
    ("no_columns", "reward 'my_rewards:no_columns' raised TypeError: no_columns() got an unexpected keyword "
                   "argument 'answer'"),
])
def test_rewards_are_checked_at_start_in_one_line(rewards_module, fn, message):
    data = write_jsonl(rewards_module / "d.jsonl", reverse_rows())
    with pytest.raises(ConfigError) as e:
        get_task("text", {"data_path": str(data), "rewards": {"my_rewards:" + fn: 1.0}})
    assert message in str(e.value) and str(e.value).startswith("checking rewards on 4 samples of task text's train")
    assert "\n" not in str(e.value)


def test_your_rewards_replace_the_recipes(rewards_module):
    from grpo_edge.config import load_config
    cfg = load_config("arithmetic.yaml", overrides=["task.rewards={my_rewards:reversed_ok: 1.0}"])
    assert cfg.task["rewards"] == {"my_rewards:reversed_ok": 1.0}
    cfg = load_config("arithmetic.yaml", overrides=["task.reward=my_rewards:reversed_ok"])
    task = get_task("arithmetic", cfg.task)
    assert task.rewards.names == ["exact_match", "format", "my_rewards:reversed_ok"]


def test_per_reward_mean_and_std_are_logged_and_a_failing_reward_is_one_line(rewards_module):
    write_jsonl(rewards_module / "d.jsonl", reverse_rows())
    r = cli_in(rewards_module, "train", "--set", "task.name=text", "--data-path", "d.jsonl", "--set",
            "task.rewards={my_rewards:reversed_ok: 1.0, my_rewards:long_only: 0.5}", "--set", "training.steps=2",
            "--set", "training.warm_start_epochs=0", "--set", "model.d_model=32", "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    m = json.loads((rewards_module / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    for name in ("my_rewards:reversed_ok", "my_rewards:long_only"):
        assert 0.0 <= m["rewards/%s/mean" % name] <= 1.0 and m["rewards/%s/std" % name] >= 0.0
    r = cli_in(rewards_module, "train", "--set", "task.name=text", "--data-path", "d.jsonl", "--set",
            "task.rewards={my_rewards:raises_later: 1.0}", "--set", "training.steps=2", "--set",
            "training.warm_start_epochs=0", "--set", "model.d_model=32", "--save-dir", "r2", "--quiet")
    assert one_error_line(r).startswith("error: reward 'my_rewards:raises_later' raised KeyError: 'score' on prompt=")
    assert not (rewards_module / "r2").exists()


# ---------------------------------------------------------------------------------------------- either padding
@pytest.mark.parametrize("arch, padding, model", [
    ("micro-gpt", "right", {"d_model": 32, "n_layer": 1, "n_head": 2}),
    ("tiny-transformer", "left", {"d_model": 48, "nhead": 2, "num_layers": 1, "dim_feedforward": 96}),
])
def test_either_padding_deploys_to_esp32s3_bit_exact_and_rpi4(tmp_path, arch, padding, model):
    """micro-gpt prompts padded on the right, tiny-transformer sources on the left (the other way round from
    the built-in tasks): the ESP32-S3 C is bit-exact with its integer reference, which answers as the
    checkpoint does; the Pi runner too."""
    from grpo_edge.targets.esp32.text_deploy import deploy_text
    from grpo_edge.targets.rpi import deploy as deploy_rpi
    words = ["".join(w) for w in __import__("itertools").product("abcd", repeat=3)]
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": w + ">", "answer": w[::-1]} for w in words])
    tr = GRPOTrainer(config={"task": {"name": "text", "data_path": str(data), "padding": padding},
                             "model": dict(model, arch=arch),
                             "training": {"steps": 1, "batch_size": 4, "eval_every": 0, "device": "cpu",
                                          "warm_start_epochs": 40, "warm_start_lr": 0.004},
                             "grpo": {"group_size": 2}}, save_dir=tmp_path / "run", progress=False)
    tr.train()
    ckpt = str(tmp_path / "run" / "last.pt")
    rep = deploy_text(ckpt, "esp32s3", tmp_path / "esp", {"n_eval": 64, "n_calib": 64, "n_rv32": 2, "tflm": False})
    figures = dict((k, f["value"]) for k, f in rep.to_dict()["figures"].items())
    assert figures["host_bit_exact"] is True
    assert figures["exact_match_int"] >= figures["exact_match_fp32"] - 0.2 and figures["exact_match_fp32"] >= 0.5
    deploy_rpi(ckpt, "rpi4", tmp_path / "pi", {})
    pi = json.loads((tmp_path / "pi" / "report.json").read_text())["figures"]
    assert pi["sim_fp32_agreement"]["value"] == 1.0


def test_the_docs_reward_examples_pass_their_checks_and_score(tmp_path, monkeypatch):
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "own_task.md").read_text(encoding="utf-8")
    block = [t for lang, t in re.findall(r"```(\w+)\n(.*?)```", doc, re.S) if t.startswith("# my_rewards.py")][0]
    (tmp_path / "my_rewards.py").write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_rewards", None)
    data = write_jsonl(tmp_path / "d.jsonl", reverse_rows())
    task = get_task("text", {"data_path": str(data), "rewards": {"my_rewards:reversed_ok": 1.0,
                                                                 "my_rewards:short_answer": 0.5,
                                                                 "my_rewards:per_sample": 1.0}})
    total, parts = task.rewards.score(["ba", "x"], ["ba", "ab"], ["ab>", "b>"])
    assert parts["my_rewards:reversed_ok"].tolist() == [1.0, 0.0] and parts["my_rewards:per_sample"].tolist() == [1.0, 0.0]
    assert parts["my_rewards:short_answer"][0] == 1.0 and torch.isnan(parts["my_rewards:short_answer"][1])
    assert total.tolist() == [2.5, 0.0]
    sys.modules.pop("my_rewards", None)


def test_cli_bad_data_file_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "d.csv").write_text("prompt,answer\na>,b\nc>,d,e\n", encoding="utf-8")
    r = cli_in(tmp_path, "train", "--data-path", "d.csv", "--save-dir", "run")
    assert one_error_line(r) == "error: d.csv:3: 3 fields, the header has 2 (prompt, answer)"
    assert not (tmp_path / "run").exists()
