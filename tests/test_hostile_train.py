"""Hostile input on the training side (issue 11): every bad value is refused in one line, nothing
non-finite is trained on or saved, checkpoints are checked before use, interrupts and resumes are exact.

In-process tests first (config, checkpoints, trainer, online records); then a sample of the cases of
benchmarks/hostile/cases_train.py run as real CLI subprocesses, each asserting exit code 2, one line
`error: ...`, no traceback, and no checkpoint with NaN weights left behind. The whole sweep (150 cases and
the kill -9 trials) is `python benchmarks/hostile/run.py --kills 5` (docs/results.md, "Reliability (training)").
"""
import json
import math
import os
import signal
import sys
from dataclasses import fields

import pytest
import torch

from grpo_edge.config import GRPOConfig, TrainingConfig, load_config
from grpo_edge.core import validate
from grpo_edge.core.checkpoint import load_checkpoint, load_policy, save_checkpoint, weights_sha256
from grpo_edge.errors import CheckpointError, ConfigError, NonFiniteError
from grpo_edge.training_run import GRPOTrainer

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks", "hostile"))

CARTPOLE = {"task": {"name": "cartpole", "eval_episodes": 2},
            "training": {"steps": 4, "batch_size": 2, "lr": 3e-3, "lr_scaling": "none", "eval_every": 0,
                         "save_every": 1},
            "grpo": {"group_size": 4}}


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _one_line(e):
    assert "\n" not in str(e.value)
    return str(e.value)


# ---------------------------------------------------------------------------------------------- config
def test_validate_tables_match_the_dataclasses():
    assert set(validate.TRAINING_KEYS) == {f.name for f in fields(TrainingConfig)}
    assert set(validate.GRPO_KEYS) == {f.name for f in fields(GRPOConfig)}


@pytest.mark.parametrize("section,kinds", [("training", validate.TRAINING_KEYS), ("grpo", validate.GRPO_KEYS)])
def test_every_number_key_refuses_nan_and_inf(section, kinds):
    for key, kind in kinds.items():
        if kind.rstrip("?") not in ("int", "float"):
            continue
        for bad in (".nan", ".inf", "-.inf"):
            with pytest.raises(ConfigError) as e:
                load_config(data={"task": {"name": "cartpole"}}, overrides=["%s.%s=%s" % (section, key, bad)])
            assert ("%s.%s" % (section, key)) in _one_line(e)


def test_yaml_numbers_as_people_write_them(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("training:\n  lr: 3e-4\n  warm_start_lr: 1e-3\n  adam_eps: 1E-6\ngrpo: {beta: 4e-2}\n")
    cfg = load_config(p)
    assert (cfg.training.lr, cfg.training.warm_start_lr, cfg.training.adam_eps, cfg.grpo.beta) == (3e-4, 1e-3, 1e-6, 0.04)
    assert load_config(overrides=["training.lr=3e-4"]).training.lr == 3e-4
    assert load_config(overrides=["task.name=cartpole", "task.env_id=1e5x"]).task["env_id"] == "1e5x"   # a string


@pytest.mark.parametrize("override,needle", [
    ("training.adam_beta2=1", "training.adam_beta2 must be in [0, 1), got 1"),
    ("training.eval_n=-5", "training.eval_n must be >= 0"),
    ("training.seed=99999999999", "training.seed must be in [0, 4294967295]"),
    ("task.max_steps=0", "task.max_steps must be >= 1"),
    ("model.activation=relu6", "model.activation must be one of tanh, relu"),
    ("model.arch=[mlp]", "model.arch must be one of"),
    ("task.env_kwargs=[1,2]", "task.env_kwargs must be a mapping"),
    ("model.hidden=.nan", "model.hidden must be a finite number"),
    ("model.arch=micro-gpt", "model.arch micro-gpt does not fit task cartpole; it takes mlp"),
])
def test_out_of_range_values_are_refused_in_one_line(override, needle):
    data = {"task": {"name": "cartpole"}}
    with pytest.raises(ConfigError) as e:
        load_config(data=data, overrides=[override])
    assert needle in _one_line(e)


def test_arch_vs_task_lists_the_allowed_archs():
    for arch, task, allowed in (("mlp", "digits", "lite-resnet"), ("lite-resnet", "arithmetic", "micro-gpt, tiny-transformer"),
                                ("tiny-transformer", "cartpole", "mlp")):
        with pytest.raises(ConfigError) as e:
            load_config(data={"model": {"arch": arch}, "task": {"name": task}})
        assert _one_line(e).endswith("it takes %s" % allowed)


def test_command_line_paths_are_literal(tmp_path):
    path = str(tmp_path / "pairs #2: x.tsv")
    cfg = load_config(data={"task": {"name": "zh-en-numbers"}}, literals={"task.data_path": path, "training.seed": 3})
    assert cfg.task["data_path"] == path and cfg.training.seed == 3


def test_no_training_pairs_is_one_line(tmp_path):
    from grpo_edge.tasks import get_task
    pairs = "".join("%s\t%s\n" % p for p in (("一", "one"), ("二", "two"), ("三", "three"), ("四", "four")))
    (tmp_path / "train.tsv").write_text(pairs, encoding="utf-8")
    (tmp_path / "test.tsv").write_text(pairs, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        get_task("zh-en-numbers", {"data_path": str(tmp_path)})
    assert _one_line(e).startswith("no training pairs")


# ---------------------------------------------------------------------------------------------- non-finite training
def test_diverging_run_stops_before_saving_non_finite_weights(tmp_path):
    cfg = {**CARTPOLE, "training": {**CARTPOLE["training"], "lr": 1e30}}
    t = GRPOTrainer(config=cfg, save_dir=tmp_path / "run", progress=False)
    with pytest.raises(NonFiniteError) as e:
        t.train()
    assert "step 1" in _one_line(e)
    assert not (tmp_path / "run" / "last.pt").exists()          # nothing saved from the bad step


def test_a_reward_of_1e300_is_refused_in_float32():
    from grpo_edge.errors import GrpoEdgeError
    from grpo_edge.tasks.rewards import safe_reward
    with pytest.raises(GrpoEdgeError, match="returned 1e"):
        safe_reward(lambda c, r, p: 1e300, "big", "c", "r", "p")
    assert safe_reward(lambda c, r, p: 1e300, "big", "c", "r", "p", skip_errors=True) == 0.0


def test_nan_gradient_never_reaches_the_weights(tmp_path):
    t = GRPOTrainer(config=CARTPOLE, save_dir=None, progress=False)
    before = _params(t.policy).clone()
    for p in t.policy.parameters():
        p.grad = torch.full_like(p, float("nan"))
    with pytest.raises(NonFiniteError, match="gradient norm is nan"):
        t._optimizer_step()
    assert torch.equal(before, _params(t.policy))


# ---------------------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("ck")
    cfg = {**CARTPOLE, "training": {**CARTPOLE["training"], "steps": 1}}
    GRPOTrainer(config=cfg, save_dir=d, progress=False).train()
    return d / "last.pt"


def _tampered(src, dst, fn):
    s = torch.load(str(src), map_location="cpu", weights_only=True)
    fn(s)
    torch.save(s, str(dst))
    return dst


def test_checkpoint_checksum_and_weights(ckpt, tmp_path):
    st = load_checkpoint(ckpt)
    assert st["model_sha256"] == weights_sha256(st["model"])
    k = sorted(st["model"])[0]

    def flip(s):
        w = s["model"][k].view(-1)
        b = w[:1].clone().view(torch.int32)
        b ^= (1 << 30)
        w[0] = b.view(torch.float32)[0]
    with pytest.raises(CheckpointError, match="do not match their checksum"):
        load_checkpoint(_tampered(ckpt, tmp_path / "a.pt", flip))

    def flip_nosum(s):
        flip(s)
        s.pop("model_sha256")
    with pytest.raises(CheckpointError, match="beyond 1e"):
        load_checkpoint(_tampered(ckpt, tmp_path / "b.pt", flip_nosum))

    def nan(s):
        s["model"][k].view(-1)[0] = float("nan")
        s.pop("model_sha256")
    with pytest.raises(CheckpointError, match="NaN / inf"):
        load_policy(_tampered(ckpt, tmp_path / "c.pt", nan))


@pytest.mark.parametrize("change,needle", [
    (lambda s: s.update(config=[1, 2]), "entry 'config' must be a mapping"),
    (lambda s: s["config"].update(task=[1]), "config section 'task' must be a mapping"),
    (lambda s: s.update(arch="micro-gpt"), "cannot rebuild architecture 'micro-gpt'"),
    (lambda s: s.update(model=[1]), "entry 'model' must be a mapping"),
    (lambda s: s.update(model_config=[4, 2]), "entry 'model_config' must be a mapping"),
    (lambda s: s.update(task=3), "entry 'task' must be a task name"),
])
def test_tampered_entries_are_refused_before_a_model_is_built(ckpt, tmp_path, change, needle):
    with pytest.raises(CheckpointError) as e:
        load_policy(_tampered(ckpt, tmp_path / "t.pt", change))
    assert needle in _one_line(e)


def test_architecture_checked_against_the_task():
    from grpo_edge.tasks import task_from_state
    with pytest.raises(CheckpointError, match="architecture micro-gpt does not fit task cartpole"):
        task_from_state({"arch": "micro-gpt", "task": "cartpole", "config": {}})


def test_policy_sizes_checked_against_the_task(ckpt):
    from grpo_edge.core.checkpoint import check_fits_task
    from grpo_edge.core.models import build_model
    from grpo_edge.tasks import get_task
    with pytest.raises(CheckpointError, match="obs_dim=6, task cartpole needs 4"):
        check_fits_task(build_model("mlp", obs_dim=6, n_actions=2), get_task("cartpole", {}), "x.pt")


# ---------------------------------------------------------------------------------------------- interrupts, resume
class _StopAfter(GRPOTrainer):
    """Ctrl-C arrives during step `at` (the handler runs as it would for a real SIGINT)."""
    at = 2

    def train_step(self):
        m = super().train_step()
        if self.step == self.at - 1:
            self._in_steps = True
            self._on_stop_signal(signal.SIGINT, None)
        return m


def test_ctrl_c_saves_the_last_completed_step_and_resume_is_exact(tmp_path):
    full = GRPOTrainer(config=CARTPOLE, save_dir=tmp_path / "full", progress=False)
    full.train()
    cut = _StopAfter(config=CARTPOLE, save_dir=tmp_path / "cut", progress=False)
    with pytest.raises(KeyboardInterrupt):
        cut.train()
    assert cut.interrupted_at == 1 and load_checkpoint(tmp_path / "cut" / "last.pt")["step"] == 1
    resumed = GRPOTrainer(config=CARTPOLE, save_dir=tmp_path / "cut", resume=True, progress=False)
    resumed.train()
    assert torch.equal(_params(full.policy), _params(resumed.policy))
    # a second Ctrl-C while stopping raises at once
    with pytest.raises(KeyboardInterrupt):
        cut._on_stop_signal(signal.SIGINT, None)


def test_resume_applies_lr_and_refuses_sizes(tmp_path):
    GRPOTrainer(config={**CARTPOLE, "training": {**CARTPOLE["training"], "steps": 2}}, save_dir=tmp_path,
                progress=False).train()
    with open(str(tmp_path / "metrics.jsonl"), "a") as f:
        f.write('{"step": 3, "lo')                                      # a line cut by a power failure
    cfg = {**CARTPOLE, "training": {**CARTPOLE["training"], "lr": 0.5}}
    t = GRPOTrainer(config=cfg, save_dir=tmp_path, resume=True, progress=False)
    assert ("training.lr", 3e-3, 0.5) in t.resume_changes
    assert t.optimizer.param_groups[0]["lr"] == 0.5 and t.scheduler.get_last_lr()[0] == 0.5
    assert [m["step"] for m in t.history] == [1, 2]
    for section, key, value in (("model", "hidden", 32), ("grpo", "algo", "ppo"), ("grpo", "group_size", 2),
                                ("model", "activation", "relu")):
        data = json.loads(json.dumps(CARTPOLE))
        data.setdefault(section, {})[key] = value
        if section == "model":
            data["model"]["arch"] = "mlp"
        with pytest.raises(ConfigError) as e:
            GRPOTrainer(config=data, save_dir=tmp_path, resume=True, progress=False)
        assert ("%s.%s" % (section, key)) in _one_line(e)


# ---------------------------------------------------------------------------------------------- online records
def test_online_records_with_unusable_numbers_drop_their_episode():
    from grpo_edge.online.sources import StreamTask
    lines = []
    for ep, bad in enumerate([None, ("obs", float("nan")), ("obs", 1e39), ("reward", 1e300), ("logp", float("-inf")),
                              None]):
        for t in range(3):
            rec = {"obs": [0.1, 0.2, 0.3, 0.4], "action": 1, "reward": 1.0, "logp": -0.5, "done": t == 2}
            if bad and t == 1:
                if bad[0] == "obs":
                    rec["obs"][0] = bad[1]
                else:
                    rec[bad[0]] = bad[1]
            lines.append(("line %d" % (len(lines) + 1), json.dumps(rec)))
    dropped = []
    task = StreamTask(iter(lines), "test", 4, 2, 2, 10, 2, 0, 4)
    task.on_event = lambda event, where, why: dropped.append((where, why))
    ro = task.rollout(None, 1, 2)
    assert task.dropped_episodes == 4 and len(dropped) == 4
    assert [w for w, _ in dropped] == ["line 5", "line 8", "line 11", "line 14"]
    assert "obs holds NaN" in dropped[0][1] and "reward 1e+300" in dropped[2][1] and "logp -inf" in dropped[3][1]
    assert bool(torch.isfinite(ro.inputs["obs"]).all()) and bool(torch.isfinite(ro.step_rewards).all())


def test_online_config_rejects_unknown_keys_and_non_finite_values():
    from grpo_edge.online.config import load_online_config
    env = 'online.env="grpo_edge.online.envs:CartPole"'
    assert load_online_config(None, [env, "training.lr=3e-4"])["training"]["lr"] == 3e-4
    for sets, needle in ((["training.lrr=1"], "unknown training key 'lrr'"), (["grpo.gamma=NaN"], "grpo.gamma"),
                         (["model.hiden=3"], "unknown model key"), (["online.margin=Infinity"], "online.margin"),
                         (['model.activation="relu6"'], "model.activation")):
        with pytest.raises(ConfigError) as e:
            load_online_config(None, [env] + sets)
        assert needle in _one_line(e)


# ---------------------------------------------------------------------------------------------- the CLI, for real
SAMPLE = ["set training.lr=.nan", "set training.seed=99999999999", "set model.arch=[mlp]",
          "model.arch micro-gpt on cartpole", "checkpoint flip -> eval", "checkpoint config-list -> export",
          "eval --n -1", "online training.lr=NaN"]
SLOW_SAMPLE = ["user reward 1e300 (inf in float32)", "double Ctrl-C", "online obs NaN", "online env with NaN rewards",
               "--data-path 'pairs #2.tsv'"]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    import run
    root = tmp_path_factory.mktemp("hostile")
    fixtures = run.build_fixtures(ROOT, root, 300)
    return run, root, fixtures


def _case(cid):
    import cases_train
    found = [c for c in cases_train.CASES if c["id"] == cid]
    assert found, cid
    return found[0]


@pytest.mark.parametrize("cid", SAMPLE)
def test_cli_hostile_case_is_clean(hostile, cid):
    run, root, fixtures = hostile
    res = run.run_case(_case(cid), ROOT, root, fixtures, 300)
    assert res["status"] == "clean", res


@pytest.mark.slow
@pytest.mark.parametrize("cid", SLOW_SAMPLE)
def test_cli_hostile_case_is_clean_slow(hostile, cid):
    run, root, fixtures = hostile
    res = run.run_case(_case(cid), ROOT, root, fixtures, 300)
    assert res["status"] == "clean", res
