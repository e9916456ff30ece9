"""The trainer on real tasks: learning, exact resume, PPO mode, checkpoints, CLI end to end."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import need_tool
import torch

from grpo_edge.core.checkpoint import load_checkpoint, load_policy, save_checkpoint
from grpo_edge.errors import CheckpointError
from grpo_edge.training_run import GRPOTrainer

CARTPOLE = {"task": {"name": "cartpole", "eval_episodes": 10},
            "training": {"steps": 4, "batch_size": 2, "lr": 3e-3, "lr_scaling": "none", "eval_every": 2, "save_every": 1},
            "grpo": {"group_size": 4, "num_iterations": 2}}


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_resume_is_exact(tmp_path):
    """2N steps in one go == N steps, then --resume for N more (CPU)."""
    full = GRPOTrainer(config=CARTPOLE, save_dir=tmp_path / "full", progress=False)
    full.train()
    half_cfg = {**CARTPOLE, "training": {**CARTPOLE["training"], "steps": 2}}
    GRPOTrainer(config=half_cfg, save_dir=tmp_path / "half", progress=False).train()
    resumed = GRPOTrainer(config=CARTPOLE, save_dir=tmp_path / "half", resume=True, progress=False)
    assert resumed.step == 2
    resumed.train()
    assert resumed.step == 4
    assert torch.equal(_params(full.policy), _params(resumed.policy))
    lines = [json.loads(x) for x in (tmp_path / "half" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3, 4]


def test_run_folder_contents(tmp_path):
    tr = GRPOTrainer(config=CARTPOLE, save_dir=tmp_path, progress=False)
    summary = tr.train()
    for name in ("config.yaml", "metrics.jsonl", "last.pt", "best.pt", "curves.svg", "summary.json"):
        assert (tmp_path / name).exists(), name
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["metric"] == "return" and s["steps"] == 4 and s["env_steps"] > 0 and s["wall_seconds"] > 0
    assert summary["final_return"] == s["final_return"]
    m = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("reward_mean", "loss", "grad_norm", "frac_zero_std", "clip_frac", "entropy", "steps_per_s",
                "samples_per_s", "peak_memory_mb"):
        assert key in m, key
    model, state = load_policy(tmp_path / "best.pt")      # self-describing: no other file needed
    assert state["task_meta"]["obs_dim"] == 4
    with torch.no_grad():
        assert model(torch.zeros(1, 4)).shape == (1, 2)


def test_cartpole_learns():
    """A few seconds of GRPO: sampled return x3 over the first batch, greedy return >= 300."""
    cfg = {"task": {"name": "cartpole", "eval_episodes": 20},
           "training": {"steps": 12, "batch_size": 4, "lr": 3e-3, "lr_scaling": "none", "eval_every": 0, "seed": 1},
           "grpo": {"group_size": 8, "num_iterations": 4, "advantage": "reward_to_go"}}
    tr = GRPOTrainer(config=cfg, progress=False)
    tr.train()
    first, last = tr.history[0]["reward_mean"], tr.history[-1]["reward_mean"]
    after = tr.evaluate()["return"]
    assert last > 3 * first and after >= 300, (first, last, after)


def test_digits_and_ppo_mode_step():
    tr = GRPOTrainer(config={"task": {"name": "digits"}, "training": {"steps": 2, "batch_size": 8},
                             "grpo": {"group_size": 4}}, progress=False)
    m = tr.train_step()
    assert 0.0 <= m["reward_mean"] <= 1.0
    ppo = GRPOTrainer(config={**CARTPOLE, "grpo": {"algo": "ppo", "group_size": 4}}, progress=False)
    m = ppo.train_step()
    assert "value_loss" in m and m["value_loss"] > 0


def test_grad_penalty_in_trainer_changes_update():
    def one_step(lam):
        tr = GRPOTrainer(config={**CARTPOLE, "grpo": {"group_size": 4, "grad_penalty_lambda": lam}}, progress=False)
        tr.train_step()
        return _params(tr.policy)
    assert not torch.allclose(one_step(0.0), one_step(0.5))


def test_bad_checkpoints(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="not a readable grpo-edge checkpoint"):
        load_checkpoint(bad)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(CheckpointError, match="not a grpo-edge checkpoint"):
        load_checkpoint(other)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    # issue 31: torch's advice to load with weights_only=False is never passed on
    torch.save(torch.nn.Linear(2, 2), tmp_path / "model.pt")
    (tmp_path / "config.yaml").write_text("training: {steps: 2}\n")
    (tmp_path / "empty.pt").write_bytes(b"")
    for name, why in (("model.pt", "it holds pickled Python objects, such as a whole model saved with torch.save"),
                      ("config.yaml", "not a torch checkpoint file: it is not a zip archive"),
                      ("empty.pt", "not a torch checkpoint file: it is empty")):
        with pytest.raises(CheckpointError) as e:
            load_checkpoint(tmp_path / name)
        assert why in str(e.value) and "weights_only" not in str(e.value)


def test_checkpoint_write_is_atomic(tmp_path):
    """A failing write leaves the previous checkpoint intact and no temp files behind."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"arch": "mlp", "model_config": {}, "model": {}, "step": 1})

    class Boom:
        def __reduce__(self):
            raise RuntimeError("disk full")
    with pytest.raises(Exception):
        save_checkpoint(path, {"arch": "mlp", "model_config": {}, "model": {}, "step": 2, "x": Boom()})
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main", *args], capture_output=True, text=True,
                          timeout=kw.get("timeout", 300), cwd=kw.get("cwd"))


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_lines_in_logs_and_quiet(tmp_path, quiet):
    """stderr not a terminal: whole plain step lines; --quiet: none (the result line still prints)."""
    args = ["train", "--config", "configs/cartpole.yaml", "--save-dir", str(tmp_path / "run"), "--set",
            "training.steps=2", "--set", "training.eval_n=3", "--set", "training.eval_every=1"]
    r = _cli(*(args + (["--quiet"] if quiet else [])))
    assert r.returncode == 0, r.stderr
    steps = [ln for ln in r.stderr.splitlines() if ln.startswith("step ")]
    assert "done: cartpole return" in r.stdout
    assert (tmp_path / "run" / "curves.svg").read_text().startswith("<svg ")      # the CLI writes the curves
    if quiet:
        assert steps == [], r.stderr
    else:
        assert [ln.split()[1] for ln in steps] == ["1/2", "2/2"] and all("reward" in ln for ln in steps), r.stderr


@pytest.mark.slow
def test_cli_end_to_end(tmp_path):
    run = tmp_path / "run"
    r = _cli("train", "--config", "configs/cartpole.yaml", "--save-dir", str(run), "--quiet", "--set", "training.steps=2",
             "--set", "training.eval_n=5", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert "done: cartpole return" in r.stdout
    r = _cli("eval", str(run / "last.pt"), "--n", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n"] == 3
    r = _cli("tasks")
    assert r.returncode == 0 and "cartpole" in r.stdout and "digits" in r.stdout
    r = _cli("targets", "--json")
    assert r.returncode == 0, r.stderr
    profiles = json.loads(r.stdout)
    assert {"esp32", "esp32s3", "esp32c3", "rpi4", "rpi5", "jetson-nano", "jetson-orin-nano"} <= set(profiles)
    assert all(f.get("source") for p in profiles.values() for f in p["figures"].values())


@pytest.mark.parametrize("args,needle", [
    (["train", "--set", "training.batch_szie=3"], "error: unknown key training.batch_szie (did you mean 'batch_size'?)"),
    (["train", "--config", "nope.yaml"], "error: config file not found: nope.yaml (built-in recipes:"),
    (["eval", "missing.pt"], "error: checkpoint not found: missing.pt"),
    (["train", "--data-path", "/no/such/path"], "error: --data-path /no/such/path does not exist"),
])
def test_cli_bad_input_is_one_line(args, needle):
    r = _cli(*args)
    assert r.returncode == 2
    assert r.stderr.strip().startswith(needle) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_kill_during_training_leaves_a_valid_checkpoint(tmp_path):
    """SIGKILL at a random moment: last.pt stays loadable and --resume continues."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "grpo_edge.cli.main", "train", "--save-dir", str(run), "--quiet",
           "--set", "training.steps=500", "--set", "training.save_every=1", "--set", "training.eval_every=0",
           "--set", "training.target_metric=null"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "last.pt").exists():
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(signal.SIGKILL)
    p.wait()
    state = load_checkpoint(run / "last.pt")
    assert state["step"] >= 1
    r = _cli("train", "--save-dir", str(run), "--quiet", "--resume", "--set", "training.steps=%d" % (state["step"] + 1),
             "--set", "training.eval_n=3")
    assert r.returncode == 0, r.stderr
    assert load_checkpoint(run / "last.pt")["step"] == state["step"] + 1


def test_ctrl_c_saves_and_exits_cleanly(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "grpo_edge.cli.main", "train", "--save-dir", str(run), "--quiet",
           "--set", "training.steps=500", "--set", "training.save_every=1000", "--set", "training.eval_every=0",
           "--set", "training.target_metric=null"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "metrics.jsonl").exists():   # at least one step done
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert "interrupted: saved" in err and "Traceback" not in err
    assert load_checkpoint(run / "last.pt")["step"] >= 1


def test_core_is_python36_compatible(root):
    """What runs on a Jetson Nano (JetPack 4.6: Python 3.6): the core, the online trainer, the runtime."""
    vermin = need_tool("vermin", "pip install vermin")
    r = subprocess.run([vermin, "-t=3.6-", "--no-tips", "--violations", "--eval-annotations"]
                       + [os.path.join(root, "grpo_edge", d) for d in ("core", "online", "runtime")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_run_folder_is_never_mixed(tmp_path):
    """A new run into a folder holding another one: refused in one line, nothing written; --force deletes only
    that run's files; --resume continues it."""
    run = tmp_path / "run"
    base = ["train", "--save-dir", str(run), "--quiet", "--set", "training.steps=1", "--set", "training.eval_n=2"]
    assert _cli(*base).returncode == 0
    (run / "notes.txt").write_text("mine")
    before = dict((p.name, p.stat().st_mtime_ns) for p in run.iterdir())
    r = _cli(*base)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: %s holds another run (config.yaml, metrics.jsonl, last.pt, best.pt, summary.json, curves.svg): "
        "continue it with --resume, start over with --force (deletes only that run's files), or choose another "
        "--save-dir" % run]
    assert dict((p.name, p.stat().st_mtime_ns) for p in run.iterdir()) == before
    assert _cli(*(base + ["--force"])).returncode == 0
    assert (run / "notes.txt").read_text() == "mine"
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    r = _cli(*(base[:-4] + ["--resume", "--set", "training.steps=2", "--set", "training.eval_n=2"]))
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_model_passed_in_must_fit_its_task_and_is_recorded(tmp_path):
    """issue 31: GRPOTrainer(micro_gpt) paired it with CartPole and failed in torch; GRPOTrainer(model,
    task='arithmetic') trained but config.yaml said arch mlp, task cartpole. Now: one line, and the run folder
    records the model and the task that ran."""
    import yaml
    from grpo_edge.core.models import build_model
    from grpo_edge.errors import ConfigError
    from grpo_edge.tasks import get_task
    vocab = get_task("arithmetic", {}).model_kwargs()
    gpt = build_model("micro-gpt", d_model=32, n_layer=1, n_head=2, max_len=16, **vocab)
    with pytest.raises(ConfigError) as e:
        GRPOTrainer(gpt, progress=False)
    assert str(e.value) == ("the micro-gpt model does not fit task cartpole, which takes mlp; pass "
                            "task='arithmetic' (or another task for a micro-gpt)")
    with pytest.raises(ConfigError, match="the mlp policy has obs_dim=8, task cartpole needs 4"):
        GRPOTrainer(build_model("mlp", obs_dim=8, n_actions=2), progress=False)
    tr = GRPOTrainer(gpt, task="arithmetic", save_dir=tmp_path, progress=False,
                     config={"training": {"steps": 1, "batch_size": 2, "eval_every": 0, "warm_start_epochs": 0},
                             "grpo": {"group_size": 2}})
    tr.train()
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert cfg["model"]["arch"] == "micro-gpt" and cfg["model"]["d_model"] == 32 and cfg["task"]["name"] == "arithmetic"
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["arch"] == "micro-gpt" and state["task"] == "arithmetic"
    # `train --resume --save-dir D` without --config continues D's run as config.yaml records it
    from conftest import cli_in
    r = cli_in(tmp_path, "train", "--resume", "--save-dir", tmp_path, "--set", "training.steps=2", "-q")
    assert r.returncode == 0 and "resuming from step 1 of 2" in r.stderr, r.stderr
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 2


@pytest.mark.parametrize("recipe, setting, message", [
    ("arithmetic", "model.max_len=4", "error: model.max_len=4 is shorter than task arithmetic's longest sequence "
                                      "(input 6 + completion 4 - 1 = 9 tokens); set model.max_len >= 9"),
    ("zh_en_numbers", "model.max_len=8", "error: model.max_len=8 is shorter than task zh-en-numbers's longest"),
    ("arithmetic", "model.max_len=1000000", "error: model: the micro-gpt (128.8M parameters, max_len 1000000"),
    ("arithmetic", "training.batch_size=100000000", "error: training.batch_size=100000000 x grpo.group_size=8 = "
                                                    "800.0M samples: the rollout alone needs at least"),
    ("cartpole", "training.batch_size=100000000", "(15.6 KB each: up to 500 steps x (4 observation + 4) float32)"),
])
def test_sizes_are_checked_before_anything_is_allocated(tmp_path, recipe, setting, message):
    """issue 31: these ran into out-of-memory tracebacks (one after two minutes and 38 GB) or a 59-line
    ValueError; now one line with the estimate, before the model is built, and nothing written."""
    from conftest import ROOT, cli_in, one_error_line
    r = cli_in(tmp_path, "train", "-c", os.path.join(ROOT, "configs", recipe + ".yaml"), "--set", setting,
               "--save-dir", tmp_path / "run", "-q")
    assert message in one_error_line(r)
    assert not (tmp_path / "run").exists()


def test_settings_that_cannot_apply_are_notes_and_the_article_names_work(tmp_path):
    """issue 31: grad_accum_steps without minibatch_size, gradient_checkpointing on an MLP and warm_start_epochs on
    CartPole did nothing without a word; plot_grad_flow(model.named_parameters()) after train() found no
    gradients; the article's import paths (grpo.datasets, grpo.utils) did not exist."""
    from grpo.datasets import BilingualPairLoader
    from grpo.utils import plot_grad_flow
    from grpo_edge.errors import ConfigError
    cfg = {**CARTPOLE, "training": {**CARTPOLE["training"], "steps": 1, "gradient_checkpointing": 2,
                                    "warm_start_epochs": 3, "grad_accum_steps": 8}}
    tr = GRPOTrainer(config=cfg, save_dir=tmp_path / "run", progress=False)
    notes = " | ".join(tr.notes)
    assert "training.gradient_checkpointing=2 does not apply to the mlp model" in notes
    assert "training.warm_start_epochs=3 does not apply: task cartpole has no reference answers" in notes
    assert "training.grad_accum_steps=8, but an update makes 2 minibatch passes" in notes     # num_iterations 2
    with pytest.raises(ValueError, match="an mlp has none to recompute"):
        tr.policy.set_gradient_checkpointing(interval=2)
    tr.train()
    norms = plot_grad_flow(tr.policy.named_parameters(), str(tmp_path / "flow.png"))
    assert norms and all(v > 0 for v in norms.values()) and (tmp_path / "flow.png").stat().st_size > 0
    assert "warm_start" not in json.loads((tmp_path / "run" / "summary.json").read_text())
    with pytest.raises(ConfigError, match="augment=True \\(back-translation\\) needs mono_path: a UTF-8 file of en"):
        BilingualPairLoader(src_lang="zh", tgt_lang="en", max_length=64, augment=True)


def test_a_resumed_run_summarises_the_whole_run(tmp_path, capfd):
    """issue 31: after --resume, summary.json lost its warm-start block and counted only the resumed part's
    wall time, and nothing said where it resumed."""
    cfg = {"model": {"arch": "tiny-transformer", "d_model": 16, "num_layers": 1, "nhead": 2},
           "task": {"name": "zh-en-numbers", "max_number": 99, "eval_size": 8},
           "training": {"steps": 2, "batch_size": 4, "warm_start_epochs": 1, "eval_every": 1, "threads": 1},
           "grpo": {"group_size": 2}}
    first = GRPOTrainer(config=cfg, save_dir=tmp_path, progress=False).train()
    cfg["training"]["steps"] = 4
    tr = GRPOTrainer(config=cfg, save_dir=tmp_path, resume=True, progress=False)
    s = tr.train()
    assert s["warm_start"] == first["warm_start"] and s["steps"] == 4
    assert s["wall_seconds"] > first["wall_seconds"]
    walls = [json.loads(x)["wall_time"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert walls == sorted(walls) and len(walls) == 4 and walls[2] > first["wall_seconds"] - 1e-6
    assert "resuming from step 2 of 4" in capfd.readouterr().err


def test_counting_a_model_on_the_meta_device_counts_it_exactly_and_imports_no_compiler():
    """sizes.model_bytes builds each built-in model on the meta device. Random init there ran Python reference
    kernels whose first call imported torch._dynamo: 0.9 s and 77 MB at every text-model start, and under
    torchrun a process group kept alive past destroy_process_group (the process aborted at exit)."""
    import subprocess
    import sys
    code = ("import sys\nfrom grpo_edge import sizes\nfrom grpo_edge.core.models import build_model\n"
            "cases = {'mlp': dict(obs_dim=4, n_actions=2), 'micro-gpt': dict(vocab_size=20, max_len=16),\n"
            "         'tiny-transformer': dict(vocab_size=20, max_len=16),\n"
            "         'lite-resnet': dict(in_channels=1, n_classes=10, image_size=8)}\n"
            "counted = {a: sizes.model_bytes(a, kw) for a, kw in cases.items()}\n"
            "print('torch._dynamo' in sys.modules)\n"
            "for a, kw in cases.items():\n"
            "    m = build_model(a, **kw)\n"
            "    real = (sum(p.numel() for p in m.parameters()), sum(b.numel() * b.element_size() for b in m.buffers()))\n"
            "    print(a, counted[a] == real, counted[a])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == "False", r.stdout + r.stderr
    assert len(lines) == 5 and all(" True " in ln for ln in lines[1:]), r.stdout
    assert all(int(ln.split("(")[1].split(",")[0]) > 0 for ln in lines[1:])


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_warm_start_schedule_decays_the_lr_over_its_epochs(schedule):
    """training.warm_start_schedule: the warm start's second (last) epoch moves the weights less than the
    first when the lr decays to 0, and about as much under 'constant'."""
    def moves(name):
        cfg = {"task": {"name": "arithmetic", "max_operand": 9},
               "model": {"arch": "micro-gpt", "d_model": 32, "n_layer": 1, "n_head": 2},
               "training": {"steps": 1, "batch_size": 64, "warm_start_epochs": 2, "warm_start_lr": 1e-3,
                            "warm_start_schedule": name, "eval_every": 0, "seed": 0}}
        tr = GRPOTrainer(config=cfg, progress=False)
        snaps = [_params(tr.policy)]
        tr.warm_start(on_epoch=lambda e, loss: snaps.append(_params(tr.policy)))
        return [float((b - a).norm()) for a, b in zip(snaps, snaps[1:])]
    const, decayed = moves("constant"), moves(schedule)
    assert const[1] > 0.6 * const[0], const
    assert decayed[1] < 0.6 * decayed[0] and decayed[1] < 0.6 * const[1], (decayed, const)
