"""Data-parallel training (grpo_edge/core/distributed.py): 2 CPU processes with gloo train the same
parameters as one process rolling out the same 2 shards; torchrun + the CLI write files from rank 0 only.

    .venv/bin/python -m pytest -q tests/test_distributed.py
"""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp

from grpo_edge.core.distributed import shard_seed
from grpo_edge.tasks import get_task
from grpo_edge.training_run import GRPOTrainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE = {"task": {"name": "cartpole", "eval_episodes": 4},
            "training": {"steps": 3, "batch_size": 4, "lr": 3e-3, "lr_scaling": "none", "eval_every": 0,
                         "seed": 3, "threads": 1},
            "grpo": {"group_size": 4, "num_iterations": 2, "advantage": "reward_to_go"}}
ARITHMETIC = {"model": {"arch": "micro-gpt", "d_model": 32, "n_layer": 1, "n_head": 2, "max_len": 16},
              "task": {"name": "arithmetic", "max_operand": 9, "max_new_tokens": 6, "eval_size": 8},
              "training": {"steps": 3, "batch_size": 4, "minibatch_size": 8, "lr": 1e-3, "eval_every": 0, "seed": 1,
                           "threads": 1},
              "grpo": {"group_size": 4, "num_iterations": 1}}


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _worker(rank, world_size, port, config, out_dir):
    """One torchrun-like rank: the environment torchrun would set, then the ordinary trainer."""
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch.distributed as dist
    tr = GRPOTrainer(config=config, progress=False)
    for _ in range(config["training"]["steps"]):
        m = tr.train_step()
    params = torch.cat([p.detach().flatten() for p in tr.policy.parameters()])
    torch.save({"params": params, "metrics": m}, os.path.join(out_dir, "rank%d.pt" % rank))
    dist.destroy_process_group()


def _single_process_twin(config, shards):
    tr = GRPOTrainer(config=config, progress=False)
    seed = config["training"]["seed"]
    tr.add_rollout_shards([get_task(config["task"]["name"], config["task"], seed=shard_seed(seed, k))
                           for k in range(1, shards)])
    for _ in range(config["training"]["steps"]):
        m = tr.train_step()
    return torch.cat([p.detach().flatten() for p in tr.policy.parameters()]), m


@pytest.mark.slow
@pytest.mark.parametrize("config", [CARTPOLE, ARITHMETIC], ids=["cartpole", "arithmetic"])
def test_two_gloo_ranks_equal_single_process(tmp_path, config):
    mp.spawn(_worker, args=(2, _free_port(), config, str(tmp_path)), nprocs=2, join=True)
    r0 = torch.load(str(tmp_path / "rank0.pt"))
    r1 = torch.load(str(tmp_path / "rank1.pt"))
    assert torch.equal(r0["params"], r1["params"])                 # ranks stay in lockstep
    assert r0["metrics"] == r1["metrics"]                          # metrics aggregated on every rank
    single, m = _single_process_twin(config, 2)
    assert torch.allclose(r0["params"], single, atol=1e-5, rtol=1e-4), float((r0["params"] - single).abs().max())
    assert r0["metrics"]["samples"] == m["samples"] and r0["metrics"]["env_steps"] == m["env_steps"]
    assert abs(r0["metrics"]["reward_mean"] - m["reward_mean"]) < 1e-4
    start = GRPOTrainer(config=config, progress=False)            # and the update really moved them
    assert not torch.allclose(torch.cat([p.detach().flatten() for p in start.policy.parameters()]), single)


def test_one_shard_twin_is_the_plain_run():
    """add_rollout_shards([]) and a 1-process run are today's trainer, bit for bit."""
    a = GRPOTrainer(config=CARTPOLE, progress=False)      # the global RNG is shared: one trainer at a time
    for _ in range(2):
        a.train_step()
    b = GRPOTrainer(config=CARTPOLE, progress=False)
    b.add_rollout_shards([])
    for _ in range(2):
        b.train_step()
    assert all(torch.equal(p, q) for p, q in zip(a.policy.parameters(), b.policy.parameters()))


def test_sharding_checks():
    with pytest.raises(ValueError, match="divisible"):
        GRPOTrainer(config=CARTPOLE, progress=False).add_rollout_shards([None, None])      # 4 groups, 3 shards


@pytest.mark.slow
def test_torchrun_cli_rank0_writes(tmp_path):
    """`torchrun --nproc_per_node 2 -m grpo_edge.cli.main train`: one metrics line per step, one checkpoint."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), "-m", "grpo_edge.cli.main", "train", "-c", "configs/cartpole.yaml", "-q",
           "--save-dir", str(run), "--set", "training.steps=2", "--set", "training.batch_size=4",
           "--set", "task.eval_episodes=4", "--set", "training.threads=1"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert res.returncode == 0, res.stdout.decode()[-3000:]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert lines[-1]["samples"] == 2 * 4 * 8                       # both ranks' samples counted
    state = torch.load(str(run / "last.pt"), weights_only=True)
    assert state["step"] == 2 and len(state["shard_states"]) == 2
    assert json.loads((run / "summary.json").read_text())["steps"] == 2
    out = res.stdout.decode()
    assert out.count("done: ") == 1 and out.count("device: ") == 1, out[-2000:]     # rank 0 speaks for all


@pytest.mark.slow
@pytest.mark.parametrize("when, condition, message", [
    ("start", "True", "error: rank 1: checking rewards on 4 samples"),
    ("rollout", "completion != reference", "error: rank 1: reward 'rank_nan:reward' returned nan"),
])
def test_torchrun_bad_reward_on_one_rank_stops_every_rank(tmp_path, when, condition, message):
    """A reward that fails on rank 1 only, at the start-up check of the rewards or in a rollout: every rank
    prints the same one-line error naming the rank and exits 2 (none is left waiting in a collective)."""
    (tmp_path / "rank_nan.py").write_text(
        "import os\n\ndef reward(completion, reference, prompt):\n"
        "    return float('nan') if os.environ.get('RANK') == '1' and %s else 0.0\n" % condition)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), "-m", "grpo_edge.cli.main", "train", "-c", "configs/arithmetic.yaml", "-q",
           "--save-dir", str(tmp_path / "run"), "--set", "training.steps=3", "--set", "training.batch_size=2",
           "--set", "training.warm_start_epochs=0", "--set", "model.d_model=32", "--set", "model.n_layer=1",
           "--set", "task.reward=rank_nan:reward", "--set", "training.threads=1", "--set", "training.eval_every=0"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(tmp_path) + os.pathsep + ROOT)
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    out = res.stdout.decode()
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert res.returncode != 0
    assert len(errors) >= 1 and all(ln.startswith(message) and "reward 'rank_nan:reward' returned nan" in ln
                                    for ln in errors), out[-3000:]
    assert "terminate called" not in out and "grpo_edge/core" not in out, out[-3000:]   # no abort, no traceback of ours
    assert not (tmp_path / "run" / "last.pt").exists()             # nothing saved from the failed step
