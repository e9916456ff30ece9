"""Devices and random streams (grpo_edge/core/devices.py) and checkpoints trained on a GPU, read here.

The code that picks devices, generators and AMP types is the code CUDA runs, so these CPU tests exercise
it; the tests that need a GPU skip without one (benchmarks/gpu_check.py is the whole check on a GPU).
tests/fixtures/cuda-cartpole.pt is a real checkpoint written by `grpo-edge train --device cuda` on an
NVIDIA H200 (benchmarks/gpu_check.py --keep): its tensors are stored as CUDA tensors, its sampling
generator and CUDA RNG states are CUDA's.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo_edge.core import devices
from grpo_edge.core.checkpoint import load_checkpoint, load_policy, rng_state, set_rng_state
from grpo_edge.errors import ConfigError
from grpo_edge.training_run import GRPOTrainer

ROOT = Path(__file__).resolve().parent.parent
CUDA_CKPT = ROOT / "tests" / "fixtures" / "cuda-cartpole.pt"
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
need_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args], capture_output=True,
                          text=True, cwd=str(ROOT), timeout=600)


def test_explicit_cpu_and_reasons():
    assert devices.choose_device("cpu") == (torch.device("cpu"), "asked for")
    assert devices.choose_device(torch.device("cpu"), 10 ** 9)[0].type == "cpu"


@no_gpu
def test_auto_without_gpu_and_cuda_refused():
    assert devices.choose_device("auto", 10 ** 8) == (torch.device("cpu"), "auto: torch sees no CUDA GPU")
    with pytest.raises(ConfigError, match="torch sees no CUDA GPU"):
        devices.choose_device("cuda")
    r = cli("train", "--device", "cuda", "--save-dir", "/nonexistent-never-written", "--quiet")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: device 'cuda' asked for, but torch sees no CUDA GPU (use --device cpu)"]


@need_gpu
def test_auto_with_gpu_follows_the_measured_threshold():
    small, why = devices.choose_device("auto", devices.AUTO_CUDA_MIN_PARAMETERS - 1)
    assert small.type == "cpu" and "faster on the CPU" in why
    big, why = devices.choose_device("auto", devices.AUTO_CUDA_MIN_PARAMETERS)
    assert big.type == "cuda" and big.index is not None


def test_generator_helpers_draw_on_the_generator_and_return_cpu():
    g1, g2 = devices.make_generator("cpu", 5), torch.Generator().manual_seed(5)
    probs = torch.softmax(torch.randn(64, 7), -1)
    assert torch.equal(devices.multinomial(probs, g1), torch.multinomial(probs, 1, generator=g2).squeeze(-1))
    a, b = devices.randint(10, (6,), devices.make_generator("cpu", 1)), devices.randint(10, (6,), devices.make_generator("cpu", 1))
    assert a.device.type == "cpu" and torch.equal(a, b)
    p = devices.randperm(9, devices.make_generator("cpu", 2))
    assert sorted(p.tolist()) == list(range(9))


def test_generator_state_from_another_device_restarts_with_a_note():
    g = devices.make_generator("cpu", 7)
    before = g.get_state().clone()
    note = devices.set_generator_state(g, torch.zeros(16, dtype=torch.uint8), "cuda")
    assert "saved on cuda" in note and "this run is on cpu" in note
    assert torch.equal(g.get_state(), before)                    # kept its own seed
    state, where = devices.generator_state(devices.make_generator("cpu", 3))
    assert where == "cpu" and devices.set_generator_state(g, state, where) is None
    assert torch.equal(g.get_state(), state)


def test_rng_state_survives_a_cuda_map_location_shape():
    """A checkpoint read with map_location=<device> hands back states on that device; set_rng_state moves
    them to the CPU (what `--resume` of a CUDA run failed on: 'RNG state must be a torch.ByteTensor')."""
    st = rng_state()
    x = torch.rand(3)
    set_rng_state(st)
    assert torch.equal(torch.rand(3), x)


def test_amp_dtype_choices():
    assert devices.amp_dtype("cpu", "float16") == torch.bfloat16          # the CPU autocasts to bf16 only
    if not torch.cuda.is_available():
        return
    assert devices.amp_dtype("cuda", "float16") == torch.float16
    want = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    assert devices.amp_dtype("cuda", "auto") == want


def test_summary_names_the_device_and_peak_memory(tmp_path):
    cfg = {"task": {"name": "cartpole", "eval_episodes": 4},
           "training": {"steps": 2, "batch_size": 2, "eval_every": 0, "device": "cpu"}, "grpo": {"group_size": 4}}
    tr = GRPOTrainer(config=cfg, save_dir=tmp_path, progress=False)
    tr.train()
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["device"] == "cpu" and s["device_reason"] == "asked for" and s["peak_memory_mb"] > 10


# ---------------------------------------------------------------------------------------------- a GPU checkpoint
def test_gpu_checkpoint_loads_evaluates_and_exports_on_cpu(tmp_path):
    state = load_checkpoint(CUDA_CKPT)                    # map_location cpu
    assert state["generator_device"] == "cuda" and state["config"]["training"]["device"] == "cuda"
    assert all(t.device.type == "cpu" for t in state["model"].values())
    model, _ = load_policy(CUDA_CKPT)
    assert model(torch.zeros(1, 4)).shape == (1, 2)
    r = cli("eval", CUDA_CKPT, "--n", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n"] == 3
    r = cli("calibrate", CUDA_CKPT, "--n", "8", "--out", tmp_path / "c.npz")
    assert r.returncode == 0, r.stderr
    r = cli("export", CUDA_CKPT, "--out", tmp_path / "m.onnx")
    assert r.returncode == 0 and (tmp_path / "m.onnx").exists(), r.stderr


def test_gpu_checkpoint_deploys_to_a_pi_on_cpu(tmp_path):
    from grpo_edge.targets.rpi import deploy
    rep = deploy(str(CUDA_CKPT), "rpi4", tmp_path / "pi", {"runs": 50, "warmup": 5, "eval_n": 3,
                                                          "calibration_samples": 128})
    assert (tmp_path / "pi" / "model.int8.onnx").exists() and rep is not None


def test_gpu_run_resumes_on_cpu_with_a_note(tmp_path):
    """A run saved on CUDA continues on the CPU: weights, Adam and step carry over; the CUDA sampling
    stream cannot, so the generator keeps its seed and the CLI says so in one line."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(str(CUDA_CKPT), str(run / "last.pt"))
    state = load_checkpoint(CUDA_CKPT)
    steps = state["step"] + 1
    r = cli("train", "--config", ROOT / "configs" / "cartpole.yaml", "--device", "cpu", "--save-dir", run, "--resume",
            "--quiet", "--set", "training.batch_size=8", "--set", "grpo.group_size=4",
            "--set", "training.steps=%d" % steps, "--set", "training.eval_every=2", "--set", "training.eval_n=16",
            "--set", "training.save_every=1")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert "device: cpu (asked for)" in lines
    assert any(ln.startswith("note: the sampling generator was saved on cuda") for ln in lines), lines
    assert any(ln.startswith("resume: training.device 'cuda' -> 'cpu'") for ln in lines), lines
    assert load_checkpoint(run / "last.pt")["step"] == steps


@need_gpu
def test_cuda_resume_continues_the_same_stream(tmp_path):
    base = {"task": {"name": "arithmetic"}, "model": {"d_model": 32, "n_layer": 1, "n_head": 2},
            "training": {"steps": 4, "batch_size": 4, "eval_every": 0, "save_every": 1, "device": "cuda"},
            "grpo": {"group_size": 4}}
    full = GRPOTrainer(config=base, save_dir=tmp_path / "full", progress=False)
    full.train()
    half = dict(base, training=dict(base["training"], steps=2))
    GRPOTrainer(config=half, save_dir=tmp_path / "half", progress=False).train()
    resumed = GRPOTrainer(config=base, save_dir=tmp_path / "half", resume=True, progress=False)
    resumed.train()
    assert [m["reward_mean"] for m in full.history][2:] == [m["reward_mean"] for m in resumed.history][2:]
    for a, b in zip(full.policy.parameters(), resumed.policy.parameters()):
        assert torch.allclose(a, b, atol=1e-5)


# ---------------------------------------------------------------------------------------------- memory budget
BIG = ["model.d_model=256", "model.n_layer=4", "model.n_head=4", "training.device=cpu", "training.warm_start_epochs=0"]


def test_max_memory_refuses_a_model_whose_state_cannot_fit():
    with pytest.raises(ConfigError, match=r"needs at least 48.4 MB for its weights, gradients, Adam moments and "
                                          r"buffers \(buffers 4.0 KB\), more than 40.0 MB \(training.max_memory\)"):
        GRPOTrainer(config=str(ROOT / "configs" / "arithmetic.yaml"), overrides=BIG + ["training.max_memory=40M"],
                    progress=False)
    r = cli("train", "--max-memory", "lots", "--quiet", "--save-dir", "/nonexistent-never-written")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: training.max_memory must be a size such as 4G or 800M, got 'lots'"]
    r = cli("train", "--set", "training.max_memory=0", "--quiet", "--save-dir", "/nonexistent-never-written")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: training.max_memory must be a size such as 4G or 800M, got 0"]
    tr = GRPOTrainer(config={"task": {"name": "cartpole"}, "training": {"max_memory": 2 ** 30, "device": "cpu"}},
                     progress=False)                                       # a number is bytes
    assert tr.memory_budget == 2 ** 30


def test_max_memory_sizes_the_activation_budget():
    tr = GRPOTrainer(config=str(ROOT / "configs" / "arithmetic.yaml"), overrides=BIG + ["training.max_memory=160M"],
                     progress=False)
    state = devices.training_state_bytes([tr.policy])
    assert tr.t["micro_batch_mb"] == int(0.5 * (160 * 2 ** 20 - state) / 2 ** 20)       # half of what is left
    roomy = GRPOTrainer(config=str(ROOT / "configs" / "arithmetic.yaml"), overrides=BIG + ["training.max_memory=8G"],
                        progress=False)
    assert roomy.t["micro_batch_mb"] == 128                               # the CPU default caps it
    m = tr.train_step()
    assert m["loss"] == m["loss"]


def test_checkpointing_buys_larger_micro_batches():
    from grpo_edge.core import microbatch
    from grpo_edge.core.models import build_model
    model = build_model("micro-gpt", vocab_size=20, d_model=64, n_layer=6, n_head=4, max_len=32)
    plain = microbatch.floats_per_token(model, 24)
    model.set_gradient_checkpointing(2)
    assert microbatch.floats_per_token(model, 24) < 0.7 * plain


def test_out_of_memory_is_one_line(tmp_path):
    """A real allocator failure (the CPU's, for a tensor of a petabyte) inside a step: one line, what to change."""
    from grpo_edge.errors import OutOfMemoryError
    cfg = {"task": {"name": "cartpole"}, "training": {"steps": 2, "batch_size": 2, "eval_every": 0, "device": "cpu"},
           "grpo": {"group_size": 2}}
    tr = GRPOTrainer(config=cfg, save_dir=tmp_path, progress=False)
    tr.train_step = lambda: torch.empty(2 ** 50)
    with pytest.raises(OutOfMemoryError, match=r"^step 1 ran out of host memory: lower training.batch_size"):
        tr.train()


@need_gpu
def test_max_memory_caps_the_cuda_allocator():
    tr = GRPOTrainer(config=str(ROOT / "configs" / "arithmetic.yaml"), progress=False,
                     overrides=["training.device=cuda", "training.max_memory=2G", "training.warm_start_epochs=0"])
    tr.train_step()
    assert torch.cuda.max_memory_reserved() <= 2 * 2 ** 30


def test_activation_budget_defaults():
    base = {"task": {"name": "cartpole"}, "training": {"steps": 1, "batch_size": 2, "device": "cpu"},
            "grpo": {"group_size": 2}}
    assert GRPOTrainer(config=base, progress=False).t["micro_batch_mb"] == devices.CPU_MICRO_BATCH_MB
    set0 = dict(base, training=dict(base["training"], micro_batch_mb=0))
    assert GRPOTrainer(config=set0, progress=False).t["micro_batch_mb"] == 0          # a set value is kept


@need_gpu
def test_cuda_activation_budget_comes_from_the_free_memory():
    tr = GRPOTrainer(config=str(ROOT / "configs" / "arithmetic.yaml"), progress=False,
                     overrides=["training.device=cuda", "training.warm_start_epochs=0"])
    assert tr.t["micro_batch_mb"] > devices.CPU_MICRO_BATCH_MB
    assert tr.train_step()["passes"] == 1.0
