"""The user's own code as a task: a gymnasium Env class (module:Class), an env id their module registers
(module:Id), a grpo-edge Task class (module:Class, with task.kwargs). Each is used as a user would: the CLI
in a fresh process, run in their project folder with their module beside it; bad input is one line."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo_edge.errors import CheckpointError, ConfigError
from grpo_edge.tasks import get_task, task_from_state
from grpo_edge.tasks.bandit import BanditTask
from grpo_edge.training_run import GRPOTrainer

from conftest import cli_in, one_error_line

OWN_ENV = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class GridWorld(gym.Env):
    """Walk right along a line of `size` cells to the goal: +1 there, -0.01 a step."""
    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, size=6):
        self.size = size

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = int(self.np_random.integers(0, self.size // 2))
        return self._obs(), {}

    def _obs(self):
        return np.array([self.pos / self.size, 1.0], np.float32)

    def step(self, action):
        self.pos = max(0, min(self.size - 1, self.pos + (1 if action == 1 else -1)))
        done = self.pos == self.size - 1
        return self._obs(), (1.0 if done else -0.01), done, False, {}


class Broken(GridWorld):
    def reset(self, seed=None, options=None):
        raise RuntimeError("sensor offline")


class StepFails(GridWorld):
    def step(self, action):
        raise ValueError("motor stalled")


class WrongShape(GridWorld):
    def _obs(self):
        return np.zeros(3, np.float32)


class LateFailure(GridWorld):
    resets = 0

    def reset(self, seed=None, options=None):
        LateFailure.resets += 1
        if LateFailure.resets > 2:            # the probe and the first rollout's reset pass, then it fails
            raise RuntimeError("battery low")
        return super().reset(seed=seed, options=options)


class OffsetSpaces(GridWorld):
    """Discrete spaces that do not start at 0: observations 1..6, actions -1 (left) and 0 (right)."""
    observation_space = spaces.Discrete(6, start=1)
    action_space = spaces.Discrete(2, start=-1)

    def _obs(self):
        return self.pos + 1

    def step(self, action):
        assert action in (-1, 0), action
        return super().step(action + 1)


class DictObs(GridWorld):
    observation_space = spaces.Dict({"a": spaces.Box(0.0, 1.0, (2,))})


class TwoActions(GridWorld):
    action_space = spaces.MultiDiscrete([2, 2])


class NotAnEnv:
    def reset(self, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


NOT_A_CLASS = 3
gym.register("GridWorld-v0", entry_point=GridWorld, max_episode_steps=30)
'''

OWN_TASK = '''
import numpy as np
from grpo_edge.tasks.bandit import BanditTask


class Loudest(BanditTask):
    """Which of 4 microphones hears the loudest sound? Input: 4 levels; action: a microphone."""
    n_actions = 4

    def __init__(self, cfg, seed=0, n=1000):
        self.n = n
        super().__init__(cfg, seed)

    def load(self):
        rng = np.random.RandomState(0)
        x = rng.rand(self.n, 4).astype(np.float32)
        y = x.argmax(1)
        k = self.n * 4 // 5
        return x[:k], y[:k], x[k:], y[k:]


class BadLoad(Loudest):
    def load(self):
        return np.zeros((5, 4), np.float32)


class BadLabels(Loudest):
    def load(self):
        x = np.zeros((8, 4), np.float32)
        return x, np.zeros((8, 2), np.int64), x, np.zeros(8, np.int64)
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "mygrid.py").write_text(OWN_ENV)
    (tmp_path / "mytasks.py").write_text(OWN_TASK)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for mod in ("mygrid", "mytasks"):
        sys.modules.pop(mod, None)


@pytest.mark.parametrize("name", ["mygrid:GridWorld", "mygrid:GridWorld-v0"])
def test_own_env_class_or_id_trains_evaluates_and_deploys(project, name):
    run = ["--set", "training.steps=4", "--set", "training.eval_n=4", "--quiet"]
    r = cli_in(project, "train", "--set", "task.name=%s" % name, "--save-dir", "run", *run)
    assert r.returncode == 0, r.stderr
    r = cli_in(project, "eval", "run/best.pt", "--n", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n"] == 3
    r = cli_in(project, "deploy", "--target", "esp32c3", "--checkpoint", "run/best.pt", "--out", "esp", "--option",
                "tflm=false", "--option", "callgrind=false")
    assert r.returncode == 0, r.stderr
    f = json.loads((project / "esp" / "report.json").read_text())["figures"]
    assert f["host_bit_exact"]["value"] is True and f["rv32_bit_exact"]["value"] is True
    prefix = "mygrid_gridworld_v0" if name.endswith("-v0") else "mygrid_gridworld"
    assert list(project.joinpath("esp").rglob(prefix + "_model.h"))
    r = cli_in(project, "deploy", "--target", "rpi4", "--checkpoint", "run/best.pt", "--out", "pi")
    assert r.returncode == 0, r.stderr
    assert json.loads((project / "pi" / "report.json").read_text())["figures"]["int8_metric_retention"]["value"] > 0.5


def test_own_task_class_with_kwargs_trains_evaluates_and_deploys(project):
    r = cli_in(project, "train", "--set", "task.name=mytasks:Loudest", "--set", 'task.kwargs={"n": 600}',
                "--set", "training.steps=150", "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    state = torch.load(str(project / "run" / "best.pt"), weights_only=True)
    assert state["task_class"] == "mytasks:Loudest" and state["task"] == "loudest"   # name from the class
    r = cli_in(project, "eval", "run/best.pt", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["n"] == 120 and res["accuracy"] > 0.5          # kwargs n=600 -> 120 test inputs; chance is 0.25
    (project / "elsewhere").mkdir()
    r = cli_in(project / "elsewhere", "eval", "../run/best.pt")
    assert ("error: cannot rebuild task 'mytasks:Loudest' from the checkpoint (cannot import module 'mytasks' for "
            "'mytasks:Loudest': ModuleNotFoundError: No module named 'mytasks' (run where it is importable: the "
            "folder holding mytasks.py, or with its package installed))") == one_error_line(r)
    r = cli_in(project, "deploy", "--target", "esp32c3", "--checkpoint", "run/best.pt", "--out", "esp", "--option",
                "tflm=false", "--option", "callgrind=false")
    assert r.returncode == 0, r.stderr
    f = json.loads((project / "esp" / "report.json").read_text())["figures"]
    assert f["host_bit_exact"]["value"] is True and f["rv32_bit_exact"]["value"] is True
    assert list(project.joinpath("esp").rglob("loudest_model.h"))
    r = cli_in(project, "deploy", "--target", "rpi4", "--checkpoint", "run/best.pt", "--out", "pi")
    assert r.returncode == 0, r.stderr
    assert (project / "pi" / "model.int8.onnx").exists() and (project / "pi" / "runner.py").exists()


@pytest.mark.parametrize("sets, message", [
    (["task.name=nomod:X"], "error: cannot import module 'nomod' for 'nomod:X': ModuleNotFoundError"),
    (["task.name=mygrid:Nope"], "error: module mygrid defines no 'Nope'"),
    (["task.name=mygrid:NOT_A_CLASS"], "is neither a gymnasium Env class nor a grpo-edge Task class"),
    (["task.name=mygrid:Broken"], "error: environment mygrid:Broken failed in reset: RuntimeError: sensor offline"),
    (["task.name=mygrid:StepFails"], "error: environment mygrid:StepFails failed in step: ValueError: motor stalled"),
    (["task.name=mygrid:WrongShape"], "error: environment mygrid:WrongShape: reset returned an observation of "
                                      "shape (3,); its observation_space is a Box of shape (2,)"),
    (["task.name=mygrid:LateFailure"], "error: environment mygrid:LateFailure failed in reset: RuntimeError: battery"),
    (["task.name=mygrid:GridWorld", 'task.env_kwargs={"sizee": 3}'],
     "error: task.env_kwargs for mygrid:GridWorld: GridWorld.__init__() got an unexpected keyword argument 'sizee'"),
    (["task.name=mygrid:GridWorld", 'task.kwargs={"sizee": 3}'], "unexpected keyword argument 'sizee'"),
    (["task.name=mygrid:DictObs"], "error: mygrid:DictObs's observation space is Dict, which grpo-edge does not "
                                   "support (it takes Box or Discrete)"),
    (["task.name=mygrid:TwoActions"], "error: mygrid:TwoActions's action space is MultiDiscrete"),
    (["task.name=mygrid:NotAnEnv"], "NotAnEnv has no observation_space: a gymnasium-API env declares"),
    (["task.name=mytasks:Loudest", 'task.kwargs={"m": 3}'],
     "error: task.kwargs for mytasks:Loudest: Loudest.__init__() got an unexpected keyword argument 'm'"),
    (["task.name=mytasks:Loudest", "task.kwargs=3"], "error: task.kwargs must be a mapping"),
    (["task.name=mytasks:BadLoad"], "error: BadLoad.load() must return (x_train, y_train, x_test, y_test)"),
    (["task.name=mytasks:BadLabels"], "error: BadLabels.load(): y_train must be (8,) integer labels, got shape (8, 2)"),
])
def test_own_code_bad_input_is_one_line_and_writes_nothing(project, sets, message):
    args = sum([["--set", s] for s in sets], [])
    r = cli_in(project, "train", "--save-dir", "run", "--quiet", "--set", "training.steps=2", *args)
    assert message in one_error_line(r)
    assert not (project / "run").exists()


def test_a_failed_start_in_an_existing_folder_leaves_the_folder(project):
    (project / "run").mkdir()
    (project / "run" / "notes.txt").write_text("mine")
    r = cli_in(project, "train", "--save-dir", "run", "--quiet", "--set", "task.name=mygrid:LateFailure")
    assert "battery low" in one_error_line(r)
    assert sorted(p.name for p in (project / "run").iterdir()) == ["notes.txt"]


def test_task_kwargs_reach_an_env_class(project):
    task = get_task("mygrid:GridWorld", {"kwargs": {"size": 9}})
    assert task.env_kwargs == {"size": 9}
    assert task._make().unwrapped.size == 9


def test_a_task_class_another_process_cannot_import_is_named(project):
    class Local(BanditTask):
        n_actions = 2

        def load(self):
            x = np.eye(2, dtype=np.float32)
            return x, np.arange(2), x, np.arange(2)

    tr = GRPOTrainer(task=Local({}), config={"task": {"name": "cartpole"}, "training": {
        "steps": 1, "eval_every": 0, "device": "cpu"}, "grpo": {"group_size": 2}}, progress=False)
    state = tr.state_dict()
    assert state["task"] == "local" and state["task_class"].endswith(":test_a_task_class_another_process_cannot_"
                                                                      "import_is_named.<locals>.Local")
    with pytest.raises(CheckpointError, match="task class Local was defined inside a function, which another "
                                              "process cannot import: move it into a module"):
        task_from_state(state)


def test_bandit_data_is_checked():
    class Nan(BanditTask):
        def load(self):
            x = np.full((4, 2), np.nan, np.float32)
            return x, np.zeros(4, np.int64), x, np.zeros(4, np.int64)

    with pytest.raises(ConfigError, match=r"Nan.load\(\): x_train holds NaN or inf"):
        Nan({})


@pytest.mark.parametrize("spec", ["mygrid:GridWorld", "mygrid:GridWorld-v0"])
def test_online_trainer_makes_the_users_env(project, spec):
    from grpo_edge.online.sources import make_env_factory
    env = make_env_factory(spec, {"size": 4})()
    obs, _ = env.reset(seed=0)
    assert np.shape(obs) == (2,) and env.unwrapped.size == 4


def test_online_trainer_names_a_missing_env(project):
    from grpo_edge.online.sources import make_env_factory
    with pytest.raises(ConfigError, match="online.env: module mygrid defines no 'Nope'"):
        make_env_factory("mygrid:Nope", {})


def test_a_task_class_that_raises_is_one_line(project):
    (project / "failing_task.py").write_text(
        "from mytasks import Loudest\n\nclass NoData(Loudest):\n    def load(self):\n"
        "        return open('missing.csv').read()\n")
    r = cli_in(project, "train", "--save-dir", "run", "--quiet", "--set", "task.name=failing_task:NoData")
    assert "error: task failing_task:NoData could not be built: FileNotFoundError: [Errno 2] No such file or " \
           "directory: 'missing.csv'" in one_error_line(r)


# ---------------------------------------------------------------------------------------------- docs/own_task.md
def doc_files():
    import re
    text = (Path(__file__).resolve().parent.parent / "docs" / "own_task.md").read_text(encoding="utf-8")
    return dict((t.splitlines()[0][2:].strip(), t) for lang, t in re.findall(r"```(\w+)\n(.*?)```", text, re.S)
                if lang == "python")


@pytest.mark.parametrize("name, sets, metric, above", [
    ("my_control:DryLake", ["training.steps=40"], "return", 0.9),          # reaches the goal: +1
    ("my_bandit:Thermostat", [], "accuracy", 0.85),                          # bandit.yaml's 300 steps
    ("my_text:Doubling", ["task.max_operand=499", "training.steps=2", "training.warm_start_epochs=1",
                          "training.eval_n=8", "task.eval_size=8"], "exact_match", None),
])
def test_own_task_doc_examples_train_and_evaluate(tmp_path, name, sets, metric, above):
    for fname, text in doc_files().items():
        (tmp_path / fname).write_text(text)
    config = ["--config", "arithmetic.yaml"] if name.startswith("my_text") else []
    r = cli_in(tmp_path, "train", *config, "--set", "task.name=" + name, *sum([["--set", s] for s in sets], []),
                "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    if above is not None:
        assert summary["best_" + metric] > above, summary
    r = cli_in(tmp_path, "eval", "run/best.pt", "--n", "8", "--json")
    assert r.returncode == 0, r.stderr
    assert metric in json.loads(r.stdout)


def test_train_without_config_uses_the_tasks_recipe_or_its_kinds(project):
    from grpo_edge.config import default_recipe
    assert default_recipe(None)["task"]["name"] == "cartpole"
    assert default_recipe("Pendulum-v1")["grpo"]["gamma"] == 0.95               # configs/pendulum.yaml
    assert default_recipe("digits")["model"]["arch"] == "lite-resnet"
    bandit = default_recipe("mytasks:Loudest")
    assert bandit["task"] == {"name": "mytasks:Loudest"} and bandit["training"]["batch_size"] == 32
    control = default_recipe("mygrid:GridWorld")
    assert control["task"] == {"name": "mygrid:GridWorld"} and control["grpo"]["advantage"] == "reward_to_go"


def test_discrete_spaces_that_do_not_start_at_zero(project):
    """Observation 1..6 is one-hot 0..5; the policy's action 0 is the env's first action (-1): the env asserts
    every action it receives is -1 or 0, in training, evaluation and the calibration rollout."""
    tr = GRPOTrainer(config={"task": {"name": "mygrid:OffsetSpaces", "eval_episodes": 3}, "training": {
        "steps": 2, "batch_size": 2, "eval_every": 0, "device": "cpu"}, "grpo": {"group_size": 2}}, progress=False)
    tr.train_step()
    assert tr.task.evaluate(tr.policy)["n"] == 3
    x = tr.task.calibration_inputs(16, policy=tr.policy)
    assert x.shape == (16, 6) and set(x.sum(1)) == {1.0}
    assert tr.state_dict()["task_meta"]["action_start"] == -1
