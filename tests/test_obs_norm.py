"""Observation normalization (issue 41, slice 4): model.obs_norm standardizes each feature by the running
statistics of the states the policy was trained on; the export folds it into the first layer, so the ONNX
graph, its raw-observation input and every deploy target stay as they were."""
import json

import numpy as np
import pytest
import torch

from conftest import cli_in
from grpo_edge.core.models.mlp import MLPPolicy


@pytest.mark.parametrize("continuous", [False, True])
def test_the_export_folds_the_standardization_exactly(continuous):
    torch.manual_seed(0)
    bounds = dict(action_low=[-2.0] * 3, action_high=[2.0] * 3) if continuous else {}
    m = MLPPolicy(5, 3, obs_norm=True, continuous=continuous, **bounds)
    x = torch.randn(2000, 5) * torch.tensor([1.0, 10.0, 0.1, 100.0, 1.0]) + torch.tensor([0.0, 5.0, -3.0, 50.0, 0.0])
    x[:, 4] = 2.0                                      # a feature that never varies: centred, not divided
    m.update_obs_stats(x[:1000])
    m.update_obs_stats(x[1000:])
    mean, std = m.obs_stats()
    assert float(m.obs_count) == 2000
    assert torch.allclose(mean, x.double().mean(0).float(), atol=1e-4)
    assert torch.allclose(std[:4], x[:, :4].double().std(0, unbiased=False).float(), rtol=1e-4)
    assert float(std[4]) == 1.0
    spec = m.export_spec()
    folded = spec.module.policy if continuous else spec.module
    assert not folded.obs_norm and not hasattr(folded, "obs_sum")
    ref = m(x).clamp(-2.0, 2.0) if continuous else m(x)
    assert float((spec.module(x) - ref).detach().abs().max()) < 1e-4
    w_before, w_after = m.net[0].weight[:, 4], folded.net[0].weight[:, 4]
    assert torch.equal(w_before, w_after)              # the constant feature's weights are not blown up
    before = MLPPolicy(5, 3, continuous=continuous, **bounds)
    assert "obs_sum" not in before.state_dict() and "obs_norm" not in before.config()


def test_train_export_and_deploy_a_normalized_policy(tmp_path):
    r = cli_in(tmp_path, "train", "--set", "task.name=Pendulum-v1", "--set", "model.obs_norm=true",
               "--set", "training.steps=3", "--set", "training.eval_every=0", "--set", "training.eval_n=4",
               "--save-dir", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    state = torch.load(str(tmp_path / "run" / "last.pt"), map_location="cpu", weights_only=False)
    assert state["model_config"]["obs_norm"] is True
    assert float(state["model"]["obs_count"]) == summary["env_steps"]      # every state of every episode
    r = cli_in(tmp_path, "train", "--set", "task.name=Pendulum-v1", "--set", "model.obs_norm=true",
               "--set", "training.steps=4", "--set", "training.eval_every=0", "--set", "training.eval_n=4",
               "--save-dir", "run", "--quiet", "--resume")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    state = torch.load(str(tmp_path / "run" / "last.pt"), map_location="cpu", weights_only=False)
    assert float(state["model"]["obs_count"]) == summary["env_steps"]      # the statistics resumed too

    r = cli_in(tmp_path, "export", "run/last.pt", "--out", "m.onnx")
    assert r.returncode == 0, r.stderr
    import onnx
    import onnxruntime as ort
    ops = sorted(set(n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node))
    assert set(ops) <= {"Gemm", "Relu", "Tanh", "Clip"}, ops            # nothing new for the deploy targets
    from grpo_edge.core.checkpoint import load_policy
    policy, _ = load_policy(str(tmp_path / "run" / "last.pt"))
    obs = (np.random.RandomState(0).uniform(-1, 1, (64, 3)) * [1, 1, 8]).astype(np.float32)
    want = policy(torch.as_tensor(obs)).detach().clamp(-2, 2).numpy()
    got = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"obs": obs})[0]
    assert np.abs(got - want).max() < 1e-4
    for target in ("rpi4", "esp32c3"):
        r = cli_in(tmp_path, "deploy", "--target", target, "--checkpoint", "run/last.pt", "--out", "d-" + target,
                   "--min-agreement", "0")
        assert r.returncode == 0, r.stderr
