"""Config loading: precedence, validation messages, the seed's spellings."""
import pytest
import yaml

from grpo_edge.config import load_config, parse_overrides
from grpo_edge.errors import ConfigError


def test_precedence_defaults_yaml_set(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"training": {"batch_size": 16, "lr": 0.01}, "task": {"name": "cartpole"}}))
    cfg = load_config(p, overrides=["training.lr=0.5"])
    assert cfg.training.batch_size == 16          # YAML over default
    assert cfg.training.lr == 0.5                 # --set over YAML
    assert cfg.training.adam_beta2 == 0.99        # default
    assert cfg.model["arch"] == "mlp"             # the task's default architecture


def test_seed_document_shape_and_path():
    cfg = load_config("config/tiny_transformer.yaml")   # the seed's spelling of configs/tiny_transformer.yaml
    assert cfg.model == {"arch": "tiny-transformer", "d_model": 128, "nhead": 4, "num_layers": 4}
    assert cfg.training.batch_size == 32 and cfg.training.grad_norm_clip == 0.8


@pytest.mark.parametrize("data,overrides,message", [
    ({"training": {"batch_szie": 3}}, [], "unknown key training.batch_szie (did you mean 'batch_size'?)"),
    ({"grpo": {"clip_eps": "wide"}}, [], "grpo.clip_eps must be a number"),
    ({"grpo": {"group_size": 1}}, [], "grpo.group_size must be >= 2, got 1"),
    ({"grpo": {"loss_type": "dapoo"}}, [], "did you mean 'dapo'"),
    ({"model": {"arch": "mlp", "nhead": 4}}, [], "unknown key model.nhead for arch mlp"),
    ({"model": {"arch": "gpt5"}}, [], "model.arch must be one of"),
    ({"task": {"name": "cartpol"}}, [], "did you mean 'cartpole'"),
    ({"task": {"name": "cartpole", "max_stepz": 3}}, [], "unknown key task.max_stepz"),
    ({"trainin": {}}, [], "unknown config section 'trainin'"),
    ({}, ["training.steps=abc"], "training.steps must be an integer"),
    ({}, ["steps=3"], "--set key must be <section>.<key>"),
    ({"grpo": {"clip_eps": 0.3, "clip_eps_high": 0.2}}, [], "clip_eps_high (0.2) is below"),
    ({"training": {"batch_size": 4, "minibatch_size": 12}, "grpo": {"group_size": 8}}, [], "must divide"),
    ({"grpo": {"algo": "ppo", "grad_penalty_lambda": 0.3}}, [], "applies to algo grpo only"),
])
def test_errors_name_the_key(data, overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(data=data, overrides=overrides)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("training: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_aliases_from_other_frameworks():
    cfg = load_config(data={"grpo": {"num_generations": 4, "epsilon_high": 0.28}, "task": {"name": "cartpole"}})
    assert cfg.grpo.group_size == 4 and cfg.grpo.clip_eps_high == 0.28
    cfg = load_config(data={"model": {"arch": "micro-gpt", "nhead": 4, "num_layers": 2}, "task": {"name": "arithmetic"}})
    assert cfg.model["n_head"] == 4 and cfg.model["n_layer"] == 2


def test_parse_overrides_types():
    assert parse_overrides(["training.amp=true", "grpo.beta=0.04", "task.name=digits"]) == {
        "training": {"amp": True}, "grpo": {"beta": 0.04}, "task": {"name": "digits"}}


def test_every_recipe_loads(root, tmp_path, monkeypatch):
    """A recipe for a kind of task (bandit.yaml: task.name null) loads with a task of that kind named."""
    import pathlib
    (tmp_path / "kind_tasks.py").write_text(
        "import numpy as np\nfrom grpo_edge.tasks.bandit import BanditTask\n\nclass Two(BanditTask):\n"
        "    def load(self):\n        x = np.eye(2, dtype=np.float32)\n        return x, np.arange(2), x, np.arange(2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    recipes = sorted(pathlib.Path(root, "configs").glob("*.yaml"))
    assert recipes
    for p in recipes:
        if yaml.safe_load(p.read_text())["task"]["name"] is None:
            with pytest.raises(ConfigError, match="task.name is missing"):
                load_config(p)
            assert load_config(p, overrides=["task.name=kind_tasks:Two"]).task["name"] == "kind_tasks:Two"
        else:
            load_config(p)


def test_yaml_as_people_get_it_wrong_is_one_line(tmp_path):
    """issue 31: a key given twice took the last value silently; amp: "yes" was accepted while steps: "2" was
    refused; an empty file trained CartPole; a folder as --config said "not found"."""
    cases = [("training:\n  lr: 0.1\n  steps: 2\n  lr: 0.2\n", "key 'lr' appears twice (lines 2 and 4): keep one"),
             ("", "is empty: a recipe holds sections"), ("# only a comment\n", "is empty"),
             ('training: {amp: "yes"}\n', "training.amp must be true or false, got 'yes' (written in quotes: drop them)"),
             ('training: {steps: "2"}\n', "training.steps must be an integer, got '2' (written in quotes: drop them)")]
    for i, (text, message) in enumerate(cases):
        p = tmp_path / ("c%d.yaml" % i)
        p.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_config(p)
        assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="is a folder, not a config file"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="task arithmetic makes its own problems and reads no data file"):
        load_config(data={"task": {"name": "arithmetic", "data_path": "x.jsonl"}})
    assert load_config(data={"training": {"amp": True}}).training.amp is True


def test_help_shows_flags_as_flags():
    """issue 31: typer printed `--resume <bool>`, as if the flag took a value."""
    import subprocess
    import sys
    for cmd in (["train"], ["deploy"], ["eval"], ["quantize"]):
        r = subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + cmd + ["--help"], stdout=subprocess.PIPE,
                           universal_newlines=True, env=dict(__import__("os").environ, COLUMNS="120"))
        assert r.returncode == 0 and "--help" in r.stdout and "<bool>" not in r.stdout, r.stdout
    assert "<int>" in subprocess.run([sys.executable, "-m", "grpo_edge.cli.main", "train", "--help"],
                                     stdout=subprocess.PIPE, universal_newlines=True).stdout   # values keep theirs


def test_a_log_std_init_may_be_negative_but_not_infinite():
    """model.log_std_init is a logarithm: SB3's MuJoCo settings start at -2 (std 0.14); it was refused as < 0."""
    cfg = load_config(data={"task": {"name": "Pendulum-v1"}, "model": {"arch": "mlp", "log_std_init": -2}})
    assert cfg.model["log_std_init"] == -2.0
    with pytest.raises(ConfigError, match="model.log_std_init must be a finite number"):
        load_config(data={"task": {"name": "Pendulum-v1"}, "model": {"arch": "mlp", "log_std_init": float("inf")}})
