"""configs/cartpole.yaml solves CartPole-v1 (100-episode greedy mean >= 475) on 3 seeds in CI-sized runs.

Measured (clip_eps 0.7): 8-14 updates (13k-44k environment steps to 475) on seeds 0-19; the cap of 30
updates leaves room."""
import pytest

pytestmark = pytest.mark.slow      # three short training runs

from grpo_edge.training_run import GRPOTrainer


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cartpole_recipe_solves(seed):
    tr = GRPOTrainer(config="configs/cartpole.yaml", progress=False,
                     overrides=["training.seed=%d" % seed, "training.steps=30", "training.threads=1"])
    tr.train()
    assert tr.last_eval["return"] >= 475, (seed, tr.step, tr.last_eval)
    assert tr.step < 30, "stopped by the step cap, not by the target"
