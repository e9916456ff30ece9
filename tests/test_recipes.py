"""Which recipe `train` uses without --config (issue 41, slice 1): the task's own, else its family's (classic
control, Box2D, MuJoCo balance / locomotion) with training.target_metric from the env's spec.reward_threshold,
named in one line; episodes as long as the env's own time limit; a run that stops early says why."""
import json

import pytest
import yaml

from conftest import cli_in, need_module
from grpo_edge.config import choose_recipe


@pytest.mark.parametrize("env_id, recipe, target", [
    ("CartPole-v1", "classic_control.yaml", 475.0),
    ("Acrobot-v1", "classic_control.yaml", -100.0),
    ("MountainCar-v0", "classic_control.yaml", -110.0),
    ("LunarLander-v3", "box2d.yaml", 200.0),              # the registry alone: Box2D need not be installed
    ("LunarLanderContinuous-v3", "box2d.yaml", 200.0),
    ("InvertedPendulum-v5", "mujoco_balance.yaml", 950.0),
    ("InvertedDoublePendulum-v5", "mujoco_balance.yaml", 9100.0),
    ("Hopper-v5", "mujoco_locomotion.yaml", 3800.0),
    ("HalfCheetah-v5", "mujoco_locomotion.yaml", 4800.0),
    ("Walker2d-v5", "mujoco_locomotion.yaml", None),       # its spec has no reward_threshold: no target
])
def test_a_gymnasium_env_gets_its_familys_recipe_and_its_own_threshold(env_id, recipe, target):
    raw, why = choose_recipe(env_id)
    assert why.startswith("recipe: configs/%s, %s is " % (recipe, env_id)) and "\n" not in why
    assert raw["task"] == {"name": env_id}
    assert raw["training"].get("target_metric") == target
    if target is None:
        assert "Walker2d-v5 has no spec.reward_threshold" in why
    else:
        assert "training.target_metric %g from %s's spec.reward_threshold" % (target, env_id) in why


def test_a_task_with_its_own_recipe_keeps_it():
    raw, why = choose_recipe("Pendulum-v1")
    assert why == "recipe: configs/pendulum.yaml, Pendulum-v1's own" and raw["training"]["target_metric"] == -200
    assert choose_recipe(None)[1] == "recipe: configs/cartpole.yaml, the default task's (cartpole)"
    assert choose_recipe("digits")[1] == "recipe: configs/digits.yaml, digits's own"
    raw, why = choose_recipe("MountainCarContinuous-v0")          # correlated exploration noise (issue 41)
    assert why == "recipe: configs/mountain_car_continuous.yaml, MountainCarContinuous-v0's own"
    assert raw["task"]["noise_correlation"] == 0.9 and raw["training"]["target_metric"] == 90


def test_an_own_env_class_gets_the_classic_recipe_without_a_borrowed_target(tmp_path, monkeypatch):
    (tmp_path / "walkers.py").write_text(
        "import gymnasium as gym\nimport numpy as np\n\nclass Line(gym.Env):\n"
        "    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)\n"
        "    action_space = gym.spaces.Discrete(2)\n"
        "    def reset(self, seed=None, options=None):\n        super().reset(seed=seed)\n"
        "        return np.zeros(2, np.float32), {}\n"
        "    def step(self, a):\n        return np.zeros(2, np.float32), 1.0, False, False, {}\n\n"
        "gym.register('Line-v0', entry_point=Line, max_episode_steps=30, reward_threshold=25.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    raw, why = choose_recipe("walkers:Line")
    assert why.startswith("recipe: configs/classic_control.yaml, walkers:Line is a control task of no known family")
    assert "target_metric" not in raw["training"]
    raw, why = choose_recipe("walkers:Line-v0")          # an id the module registers: its spec's threshold
    assert raw["training"]["target_metric"] == 25.0 and "of no known family" in why
    from grpo_edge.tasks import get_task
    assert get_task("walkers:Line-v0", {}).max_steps == 30         # the env's own time limit


def test_episodes_run_to_the_envs_own_time_limit():
    need_module("mujoco", 'pip install "gymnasium[mujoco]"')
    from grpo_edge.tasks import get_task
    assert get_task("InvertedPendulum-v5", {}).max_steps == 1000    # was capped at 500: 950 was out of reach
    assert get_task("cartpole", {}).max_steps == 500
    assert get_task("Pendulum-v1", {}).max_steps == 200
    assert get_task("InvertedPendulum-v5", {"max_steps": 50}).max_steps == 50


def test_train_hopper_names_the_mujoco_recipe_and_uses_it(tmp_path):
    """The issue's Done-when: `grpo-edge train --set task.name=Hopper-v5` picks the MuJoCo recipe and says so."""
    need_module("mujoco", 'pip install "gymnasium[mujoco]"')
    r = cli_in(tmp_path, "train", "--set", "task.name=Hopper-v5", "--set", "training.steps=1",
               "--set", "training.eval_n=2", "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    first = r.stderr.splitlines()[0]
    assert first == ("recipe: configs/mujoco_locomotion.yaml, Hopper-v5 is a MuJoCo locomotion robot "
                     "(gymnasium.envs.mujoco.hopper_v5); training.target_metric 3800 from Hopper-v5's "
                     "spec.reward_threshold"), r.stderr
    cfg = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert cfg["training"]["target_metric"] == 3800 and cfg["training"]["lr"] == 0.001
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stopped"] == "after all 1 steps"
    r = cli_in(tmp_path, "train", "--config", "mujoco_locomotion.yaml", "--save-dir", "run2", "--quiet",
               "--set", "training.steps=1", "--set", "training.eval_n=2")
    assert r.returncode == 0 and "recipe:" not in r.stderr, r.stderr    # --config given: nothing chosen, nothing said
    cfg = yaml.safe_load((tmp_path / "run2" / "config.yaml").read_text())
    assert cfg["task"]["name"] == "Hopper-v5" and cfg["training"].get("target_metric") is None


def test_a_run_that_stops_early_says_why(tmp_path):
    r = cli_in(tmp_path, "train", "--set", "training.target_metric=5", "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("done: cartpole return = ") and "after 2 steps (stopped early at step 2 of 100: " \
        "eval return " in last and "reached training.target_metric 5)" in last, r.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["stopped"].startswith("stopped early at step 2 of 100: eval return ")
    metrics = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["reached_target"] is True


def test_tasks_lists_the_family_recipes_for_an_env_by_its_id(tmp_path):
    r = cli_in(tmp_path, "tasks", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    gym = [row for row in rows if row["task"] == "gym"][0]
    assert gym["recipe (--config)"] == "its family's"
