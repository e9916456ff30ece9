"""Any gymnasium environment as a task: continuous (Gaussian) and discrete actions, Box and Discrete
observations, the environment recorded in the checkpoint, names from the environment, one-line errors.
Real gymnasium environments throughout (Pendulum-v1, FrozenLake-v1, MountainCar-v0)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo_edge.core import distributions
from grpo_edge.core.checkpoint import load_policy
from grpo_edge.errors import ConfigError, NonFiniteError
from grpo_edge.tasks import get_task, task_from_state, task_slug
from grpo_edge.training_run import GRPOTrainer

ROOT = Path(__file__).resolve().parent.parent
PENDULUM = {"task": {"name": "Pendulum-v1", "eval_episodes": 4},
            "training": {"steps": 3, "batch_size": 2, "eval_every": 0, "device": "cpu", "lr": 3e-3},
            "grpo": {"group_size": 4, "num_iterations": 2, "advantage": "reward_to_go"}}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args], capture_output=True,
                          text=True, cwd=str(ROOT), timeout=600)


def test_gaussian_logp_is_torch_normal():
    mean, log_std = torch.randn(5, 3), torch.randn(3) * 0.3
    a = mean + torch.randn(5, 3)
    want = torch.distributions.Normal(mean, log_std.exp()).log_prob(a).sum(-1)
    assert torch.allclose(distributions.gaussian_logp(mean, log_std.expand_as(mean), a), want, atol=1e-5)


def test_pendulum_by_id_trains_with_gaussian_actions(tmp_path):
    tr = GRPOTrainer(config=PENDULUM, save_dir=tmp_path, progress=False)
    assert tr.task.continuous and tr.policy.continuous and tr.policy.config()["action_low"] == [-2.0]
    ro = tr.task.rollout(tr.policy, 2, 4)
    assert ro.actions.shape[:2] == ro.mask.shape and ro.actions.shape[2] == 1 and ro.actions.dtype == torch.float32
    assert float(ro.actions.abs().max()) > 0                              # sampled, not the (near 0) mean
    logp, ent = tr.task.logprobs(tr.policy, ro)                           # same policy: the stored log-probs
    m = ro.mask > 0
    assert torch.allclose(logp[m], ro.old_logp[m], atol=1e-5) and bool((ent[m] > 0).all())
    before = tr.policy.log_std.detach().clone()
    tr.train()
    assert not torch.equal(before, tr.policy.log_std.detach())             # the log-std is learned
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    assert state["task"] == "Pendulum-v1" and state["task_meta"]["env_id"] == "Pendulum-v1"
    assert state["task_meta"]["action_high"] == [2.0] and task_slug(state) == "pendulum_v1"


def test_pendulum_checkpoint_rebuilds_evaluates_and_exports_bounded(tmp_path):
    GRPOTrainer(config=PENDULUM, save_dir=tmp_path, progress=False).train()
    model, state = load_policy(tmp_path / "last.pt")
    task = task_from_state(state)
    assert task.name == "Pendulum-v1" and task.continuous
    r = cli("eval", tmp_path / "last.pt", "--n", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["episode_length"] == 200.0
    spec = model.export_spec()
    with torch.no_grad():
        model.net[-1].bias.fill_(10.0)                                    # a mean far outside [-2, 2]
        out = spec.module(torch.randn(7, 3))
    assert spec.output_names == ["action"] and float(out.max()) == 2.0
    x = task.calibration_inputs(16, policy=model)
    assert x.shape == (16, 3) and np.isfinite(x).all()


def test_discrete_observations_are_one_hot():
    task = get_task("FrozenLake-v1", {"eval_episodes": 3})
    assert task.obs_dim == 16 and task.n_actions == 4 and not task.continuous
    tr = GRPOTrainer(config={"task": {"name": "FrozenLake-v1"}, "training": {"steps": 1, "batch_size": 2,
                             "device": "cpu"}, "grpo": {"group_size": 2}}, progress=False)
    obs = tr.task.rollout(tr.policy, 2, 2).inputs["obs"]
    real = obs[0, 0]
    assert float(real.sum()) == 1.0 and float(real.max()) == 1.0


def test_no_learning_signal_warns_once(tmp_path):
    r = cli("train", "--set", "task.name=MountainCar-v0", "--set", "training.steps=6", "--set", "training.eval_every=0",
            "--set", "training.eval_n=1", "--save-dir", tmp_path, "--quiet")
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "no learning signal" in warn[0] and "grpo.group_size" in warn[0]


@pytest.mark.parametrize("name, message", [
    ("Pendulm-v1", "unknown task 'Pendulm-v1'"),
    ("Blackjack-v1", "observation space is Tuple, which grpo-edge does not support"),
])
def test_bad_environments_are_one_line(tmp_path, name, message):
    r = cli("train", "--set", "task.name=%s" % name, "--save-dir", tmp_path, "--quiet")
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(("device:", "recipe:"))]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
    if name == "Pendulm-v1":
        assert "did you mean Pendulum-v1" in lines[0]


def test_missing_extra_names_the_pip_extra(monkeypatch):
    """Box2D absent (made unimportable when it is installed): the install line that works here, a wheel
    (gymnasium[box2d]'s box2d-py builds from source and failed to build on this kind of machine)."""
    import sys
    monkeypatch.setitem(sys.modules, "Box2D", None)          # `import Box2D` raises ImportError
    for name in [m for m in sys.modules if m.startswith("gymnasium.envs.box2d")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ConfigError, match=r'LunarLander-v3 needs a package that is not installed: pip install box2d '):
        get_task("LunarLander-v3", {})


def test_nan_observation_is_one_line():
    import gymnasium as gym
    from gymnasium import spaces

    class NanEnv(gym.Env):
        observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.array([np.nan, 0.0], np.float32), 1.0, False, False, {}

    if "GrpoEdgeNan-v0" not in gym.registry:
        gym.register("GrpoEdgeNan-v0", entry_point=NanEnv, max_episode_steps=10)
    tr = GRPOTrainer(config={"task": {"name": "GrpoEdgeNan-v0"}, "training": {"steps": 1, "batch_size": 2,
                             "device": "cpu"}, "grpo": {"group_size": 2}}, progress=False)
    with pytest.raises(NonFiniteError, match="GrpoEdgeNan-v0 returned a non-finite observation"):
        tr.train_step()


@pytest.fixture(scope="module")
def pendulum_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("pendulum")
    GRPOTrainer(config=PENDULUM, save_dir=out, progress=False).train()
    return out / "last.pt"


def test_continuous_policy_deploys_to_esp32_bit_exact(tmp_path, pendulum_checkpoint):
    from typer.testing import CliRunner
    from grpo_edge.cli.main import app
    out = tmp_path / "esp32"
    r = CliRunner().invoke(app, ["deploy", "--target", "esp32c3", "--checkpoint", str(pendulum_checkpoint), "--out",
                                 str(out), "--option", "tflm=false", "--option", "callgrind=false"])
    assert r.exit_code == 0, r.output
    f = json.loads((out / "report.json").read_text())["figures"]
    assert f["host_bit_exact"]["value"] is True and f["rv32_bit_exact"]["value"] is True
    assert f["action_error_max_relative"]["value"] < 0.05            # int8 actions within 5% of the range
    assert abs(f["task_metric_integer"]["value"] - f["task_metric_fp32"]["value"]) < 0.1 * abs(
        f["task_metric_fp32"]["value"])
    header = list(out.rglob("pendulum_v1_model.h"))
    assert header and "int pendulum_v1_invoke(" in header[0].read_text()


def test_continuous_policy_pi_runner_prints_actions(tmp_path, pendulum_checkpoint):
    from grpo_edge.targets.rpi import deploy
    out = tmp_path / "pi"
    rep = deploy(str(pendulum_checkpoint), "rpi4", out, {"runs": 50, "warmup": 5, "eval_n": 3,
                                                         "calibration_samples": 128})
    assert rep.figures["sim_int8_action_agreement"].value >= 0.9
    r = subprocess.run([sys.executable, "runner.py", "--input", "sample_inputs.npy", "--json"], cwd=str(out),
                       capture_output=True, text=True, timeout=120)
    actions = np.asarray(json.loads(r.stdout)["actions"])
    assert actions.shape == (100, 1) and float(np.abs(actions).max()) <= 2.0


def test_mujoco_robot_or_its_missing_extra():
    """A MuJoCo robot (6 continuous actions) trains a step where gymnasium[mujoco] is installed; elsewhere
    building it is one line naming the extra (gymnasium raises a plain ImportError for it)."""
    try:
        import imageio  # noqa: F401
        import mujoco  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r'HalfCheetah-v5 needs a package that is not installed: '
                                              r'pip install "gymnasium\[mujoco\]"'):
            get_task("HalfCheetah-v5", {})
        return
    tr = GRPOTrainer(config={"task": {"name": "HalfCheetah-v5", "max_steps": 50}, "training": {
        "steps": 1, "batch_size": 2, "device": "cpu", "eval_every": 0}, "grpo": {"group_size": 2}}, progress=False)
    assert tr.task.continuous and tr.task.n_actions == 6
    m = tr.train_step()
    assert m["loss"] == m["loss"]
