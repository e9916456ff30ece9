"""The pyfix task (issue 42): its program generator, its split, its rewards and a short run of `train`."""
import json
from collections import Counter

import pytest
import torch

from grpo_edge.core.models import build_model
from grpo_edge.core.tokenizer import PAD
from grpo_edge.tasks import get_task
from grpo_edge.tasks.pyfix import PROMPT_END, PyFixTask, apply_edit, edit_of, numbered, unnumbered
from grpo_edge.tasks.pyfix_programs import BUG_KINDS, TEMPLATES, fails, make_split
from grpo_edge.tasks.rewards import parses, similarity
from tests.conftest import cli_in


@pytest.fixture(scope="module")
def split():
    return make_split()


def test_the_split_is_the_same_every_time_and_its_test_functions_are_held_out(split):
    train, test = split
    assert (train, test) == make_split()                     # no training seed in it: the same for every seed
    assert len(train) == 2000 and len(test) == 300
    assert not set(p.fixed for p in test) & set(p.fixed for p in train)
    for pairs in (train, test):
        kinds = Counter(p.bug for p in pairs)
        assert set(kinds) == set(BUG_KINDS) and min(kinds.values()) >= len(pairs) // 30, kinds
    assert set(p.template for p in test) == set(t[0] for t in TEMPLATES)     # every kind of function is tested
    assert make_split(split_seed=1)[1] != test


def test_every_fix_passes_its_asserts_and_every_broken_program_fails_them(split):
    for p in split[0][:400] + split[1]:
        assert p.broken != p.fixed and fails(p.broken, p.tests), p
        assert not fails(p.fixed, p.tests), p
        assert p.tests.startswith("assert ") and len(p.tests.splitlines()) >= 3
    syntax = Counter(p.bug for p in split[1] if not parses(p.broken))
    assert set(syntax) == {"missing_colon", "indentation", "bracket", "misspelling"}, syntax


def test_parses_and_similarity_rewards():
    assert parses("def f(x):\n    return x") == 1.0
    assert parses("def f(x)\n    return x") == 0.0 and parses("x = 1\n  y = 2") == 0.0 and parses("a\0") == 0.0
    assert parses("while True: pass") == 1.0                # parsed, never run
    assert parses("") == 0.0 and parses("  \n") == 0.0      # an empty answer parses but fixes nothing
    fix = "def f(x):\n    return x + 1"
    assert similarity(fix, fix) == 1.0 and similarity("", "") == 1.0 and similarity("", fix) == 0.0
    partly = similarity("def f(x):\n    return x", fix)
    assert 0.8 < partly < 1.0
    assert similarity("def f(x):\nreturn x + 1", fix) < 1.0            # whitespace counts (indentation bugs)


def test_the_task_its_prompts_columns_and_errors():
    task = get_task("pyfix", {"n_train": 50, "n_test": 20})
    assert isinstance(task, PyFixTask) and len(task.train_problems) == 50 and len(task.test_problems) == 20
    prompt, fix = task.train_problems[0]
    assert prompt.startswith("1|def ") and prompt.endswith(PROMPT_END) and not fix.endswith("\n")
    assert task.answers([fix], [prompt])[0] == task.train_columns[0]["answer"]        # the edit makes the fix
    assert set(task.train_columns[0]) == {"tests", "bug", "template", "answer"}
    x = task.encode_inputs([prompt, "def f():\n    pass" + PROMPT_END])
    assert x.shape == (2, task.prompt_len) and x[1, 0].item() == 0          # left-padded
    assert task.model_kwargs()["max_len"] >= task.prompt_len + task.max_new_tokens - 1
    from grpo_edge.errors import ConfigError
    with pytest.raises(ConfigError, match="a program of 500 characters is longer than"):
        task.encode_inputs(["x" * 500 + PROMPT_END])
    with pytest.raises(ConfigError, match="task.max_new_tokens=10 cannot hold the longest numbered changed line"):
        PyFixTask({"n_train": 20, "n_test": 5, "max_new_tokens": 10})
    with pytest.raises(ConfigError, match="task.max_new_tokens=10 cannot hold the longest fixed program"):
        PyFixTask({"n_train": 20, "n_test": 5, "max_new_tokens": 10, "output": "program"})
    with pytest.raises(ConfigError, match="task.output must be one of edit|program, got 'diff'"):
        PyFixTask({"n_train": 20, "n_test": 5, "output": "diff"})
    with pytest.raises(ConfigError, match=r"task.test_fraction must be in \(0, 1\)"):
        PyFixTask({"test_fraction": 1.5})


def test_rollout_rewards_by_name_and_evaluate_by_bug_kind():
    task = PyFixTask({"n_train": 40, "n_test": 21, "max_new_tokens": 160})
    torch.manual_seed(0)
    policy = build_model("micro-gpt", d_model=32, n_layer=1, n_head=2, **task.model_kwargs())
    r = task.rollout(policy, num_groups=2, group_size=3, generator=torch.Generator().manual_seed(0))
    assert set(r.reward_parts) == {"tests_pass", "parses", "similarity"} and r.rewards.shape == (6,)
    result = task.evaluate(policy)
    assert result["n"] == 21 and 0.0 <= result["similarity"] <= 1.0
    kinds = [k.split("/", 1)[1] for k in result if k.startswith("exact_match/")]
    assert kinds == [b for b in BUG_KINDS if any(c["bug"] == b for c in task.test_columns)]


def test_train_pyfix_picks_its_recipe_and_warm_starts(tmp_path):
    r = cli_in(tmp_path, "train", "--set", "task.name=pyfix", "--set", "task.n_train=64", "--set", "task.n_test=16",
               "--set", "model.d_model=32", "--set", "model.n_layer=1", "--set", "training.steps=2",
               "--set", "training.batch_size=4", "--set", "grpo.group_size=2", "--set", "training.warm_start_epochs=1",
               "--set", "training.eval_n=16", "--save_dir", "run")
    assert r.returncode == 0, r.stderr
    assert "recipe: configs/pyfix.yaml, pyfix's own" in r.stderr + r.stdout
    assert "warm start: fix_rate" in r.stdout + r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["task"] == "pyfix" and summary["eval"]["n"] == 16
    assert set(k.split("/")[0] for k in summary["eval"] if "/" in k) == {"fix_rate", "exact_match", "parses",
                                                                         "similarity", "sandbox"}
    assert summary["metric"] == "fix_rate" and 0.0 <= summary["eval"]["fix_rate"] <= 1.0
    state = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    assert state["task"] == "pyfix" and state["task_meta"]["prompt_end"] == PROMPT_END


def test_init_from_starts_grpo_from_a_warm_start_without_redoing_it(tmp_path):
    from tests.conftest import one_error_line
    small = ["--set", "task.name=pyfix", "--set", "task.n_train=64", "--set", "task.n_test=16", "--set",
             "model.d_model=32", "--set", "model.n_layer=1", "--set", "training.batch_size=4", "--set",
             "grpo.group_size=2", "--set", "training.eval_n=16"]
    r = cli_in(tmp_path, "train", *small, "--set", "training.steps=1", "--set", "training.warm_start_epochs=1",
               "--save_dir", "first")
    assert r.returncode == 0, r.stderr
    start = torch.load(tmp_path / "first" / "warm_start.pt", weights_only=True)
    r = cli_in(tmp_path, "train", *small, "--set", "training.steps=2", "--set", "training.warm_start_epochs=1",
               "--set", "task.temperature=0.7", "--set", "training.lr=1e-12", "--init-from", "first/warm_start.pt",
               "--save_dir", "second")
    assert r.returncode == 0, r.stderr
    assert "init from first/warm_start.pt (warm-started)" in r.stderr and "supervised warm start" not in r.stdout + r.stderr
    after = torch.load(tmp_path / "second" / "last.pt", weights_only=True)
    assert after["step"] == 2 and after["config"]["task"]["temperature"] == 0.7
    assert all(torch.allclose(after["model"][k], v, atol=1e-6) for k, v in start["model"].items())   # the weights it took
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert summary["warm_start"] == json.loads((tmp_path / "first" / "summary.json").read_text())["warm_start"]
    r = cli_in(tmp_path, "train", *small, "--set", "model.d_model=48", "--init-from", "first/warm_start.pt",
               "--save_dir", "third")
    assert "--init-from first/warm_start.pt: its model config differs from this run's (d_model 32 vs 48)" in one_error_line(r)
    assert not (tmp_path / "third" / "last.pt").exists()
    r = cli_in(tmp_path, "train", *small, "--resume", "--init-from", "first/warm_start.pt", "--save_dir", "second")
    assert "give one of them" in one_error_line(r)
    r = cli_in(tmp_path, "train", *small, "--init-from", "nowhere.pt", "--save_dir", "fourth")
    assert "nowhere.pt" in one_error_line(r)


@pytest.mark.parametrize("output", ["edit", "program"])
def test_the_fix_rate_runs_each_fix_with_its_tests_in_the_sandbox(output):
    task = PyFixTask({"n_train": 20, "n_test": 60, "output": output})
    refs = [r for _, r in task.test_problems]
    broken = [task.program_of(p) for p, _ in task.test_problems]
    good = task.report(refs, task.test_problems)
    assert good["fix_rate"] == 1.0 and good["sandbox/ok"] == 60 and good["fix_rate/operator"] == 1.0
    bad = task.report(broken if output == "program" else ["9|" + b for b in broken], task.test_problems)
    assert bad["fix_rate"] == 0.0 and bad["sandbox/syntax"] + bad["sandbox/failed"] == 60
    assert "sandbox/ok" not in bad and bad["parses/missing_colon"] == 0.0
    assert task.metric_of(refs[:10], task.test_problems[:10]) == 1.0


def test_an_edit_is_the_one_changed_line_numbered(split):
    """Every pair differs in one line: the edit puts it back; an edit naming no line changes nothing."""
    for p in split[0][:300] + split[1]:
        assert unnumbered(numbered(p.broken)) == p.broken
        edit = edit_of(p.broken, p.fixed)
        assert apply_edit(p.broken, edit) == p.fixed and edit.split("|", 1)[0].isdigit()
    program = "def f(x):\n    return x"
    assert numbered(program) == "1|def f(x):\n2|    return x"
    for bad in ("", "return x", "0|x", "3|x", "x|y", "2|a\nb", "-1|x"):
        assert apply_edit(program, bad) == program, bad
    assert apply_edit(program, "2|    return x + 1\n") == "def f(x):\n    return x + 1"
    with pytest.raises(ValueError, match="exactly one line"):
        edit_of(program, "def f(x):\n    return x\n")


def test_tests_pass_scores_hostile_fixes_zero_and_counts_why(tmp_path):
    from grpo_edge.tasks.rewards import SANDBOX_REASONS, tests_pass
    marker = tmp_path / "touched"
    hostile = ["def add(a, b):\n    while True:\n        pass",
               "import os\ndef add(a, b):\n    os.fork()\n    return a + b",
               "def add(a, b):\n    open(%r, 'w').write('x')\n    return a + b" % str(marker),
               "import sys\ndef add(a, b):\n    return a + b\nsys.exit(0)",
               "def add(a, b):\n    return a + b"]
    before = SANDBOX_REASONS.copy()
    scores = tests_pass(hostile, tests=["assert add(2, 3) == 5"] * 5)
    assert scores == [0.0, 0.0, 0.0, 0.0, 1.0] and not marker.exists()
    seen = SANDBOX_REASONS - before
    assert seen["forbidden"] == 2 and seen["ok"] == 1 and seen["exit"] == 1 and seen["cpu"] + seen["timeout"] == 1
    assert tests_pass(["x = 1", "x = 2"], tests=["assert x == 1", None]) == [1.0, None]


def test_names_are_many_so_a_model_must_copy_them(split):
    """A role's word with or without a prefix or suffix: far more names than a train set can teach by heart,
    and held-out functions with names no train function has."""
    import re
    import keyword

    def names(pairs):
        return set(n for p in pairs for n in re.findall(r"\b[A-Za-z_]\w*\b", p.fixed) if not keyword.iskeyword(n))
    train, test = names(split[0]), names(split[1])
    assert len(train) > 1000 and len(test - train) > 50, (len(train), len(test - train))


def test_right_padding_puts_each_program_at_the_start(tmp_path):
    task = PyFixTask({"n_train": 40, "n_test": 10, "padding": "right"})
    x = task.encode_inputs([task.train_problems[0][0]])
    ids = task.tokenizer.encode(task.train_problems[0][0])
    assert x[0, :len(ids)].tolist() == ids and (x[0, len(ids):] == PAD).all()
    assert task.checkpoint_meta()["padding"] == "right"
    assert PyFixTask.restore_cfg(task.checkpoint_meta())["padding"] == "right"
    assert PyFixTask.restore_cfg(task.checkpoint_meta())["output"] == "edit"
    assert PyFixTask.restore_cfg({"padding": "left"})["output"] == "program"     # a checkpoint from before edits
    with pytest.raises(Exception, match="task.padding must be left or right"):
        PyFixTask({"n_train": 40, "n_test": 10, "padding": "middle"})


def test_augment_makes_fresh_pairs_never_a_held_out_function_with_the_names_asked_for():
    import random
    import re
    from grpo_edge.tasks.pyfix_programs import TEMPLATE_BY_NAME, fresh_pair
    task = PyFixTask({"n_train": 200, "n_test": 40, "augment": 0.5})
    epoch = [p for b in task.warm_start_batches(200, torch.Generator().manual_seed(0)) for p in b["prompt"].tolist()]
    again = [p for b in task.warm_start_batches(200, torch.Generator().manual_seed(0)) for p in b["prompt"].tolist()]
    assert epoch == again                                      # the training seed decides
    originals = set(tuple(r) for r in task.encode_inputs([p for p, _ in task.train_problems]).tolist())
    fresh = [p for p in epoch if tuple(p) not in originals]
    assert 60 <= len(fresh) <= 140, len(fresh)                 # about half, each epoch
    plain = list(task.warm_start_batches(200, torch.Generator().manual_seed(0), task.train_problems))
    assert set(tuple(r) for b in plain for r in b["prompt"].tolist()) == originals
    rng = random.Random(0)
    held = set(p.fixed for p in make_split(n_train=20, n_test=300)[1])
    made = 0
    for pair in task._train_pairs[:100]:
        new = fresh_pair(pair.template, pair.bug, rng, avoid=held)
        if new is None:
            continue
        made += 1
        assert new.bug == pair.bug and new.fixed not in held and fails(new.broken, new.tests)
        assert not fails(new.fixed, new.tests)
        name = re.match(r"def (\w+)\(", new.fixed).group(1)         # the function's name still says what it does
        assert any(name.startswith(f.format(k=k)) for f in TEMPLATE_BY_NAME[pair.template][1] for k in range(11))
    assert made >= 90
    from grpo_edge.tasks.pyfix_programs import NAMES, PREFIXES, SUFFIXES
    known = set(n for names in NAMES.values() for w in names for n in [w] + [a + w for a in PREFIXES]
                + [w + z for z in SUFFIXES])
    def roles(source):                                          # the names a function's roles have
        return set(re.findall(r"\b[a-z_][a-z_0-9]*\b", source.split(":", 1)[0].split("(", 1)[1]))
    split_like = [fresh_pair(p.template, p.bug, rng, held, made_up=0.0) for p in task._train_pairs[:60]]
    assert all(roles(f.fixed) <= known for f in split_like if f)      # made_up_names 0: names as the split's
    made_up = [fresh_pair(p.template, p.bug, rng, held, made_up=1.0) for p in task._train_pairs[:60]]
    assert sum(not roles(f.fixed) <= known for f in made_up if f) >= 50
    from grpo_edge.errors import ConfigError
    with pytest.raises(ConfigError, match=r"task.augment must be in \[0, 1\], got 1.5"):
        PyFixTask({"n_train": 20, "n_test": 5, "augment": 1.5})
    with pytest.raises(ConfigError, match=r"task.made_up_names must be in \[0, 1\], got -0.5"):
        PyFixTask({"n_train": 20, "n_test": 5, "made_up_names": -0.5})
