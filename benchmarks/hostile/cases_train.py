"""Hostile-input cases of the training side (issue 11): config values, YAML numbers, command-line paths,
architecture vs task, data, non-finite training, tampered checkpoints, interrupts and resumes, online
records and the online config. Each case is {"id", "cls", "fn": fn(ctx) -> (status, note), "fast"}.
benchmarks/hostile/run.py runs them; tests/test_hostile_train.py runs a sample of them under pytest.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from harness import classify_error, classify_ok, finite_checkpoint, load_weights, nonfinite_files, same_weights

CARTPOLE = ["--set", "training.steps=2", "--set", "training.batch_size=4", "--set", "grpo.group_size=4",
            "--set", "training.eval_every=0", "--set", "task.eval_episodes=2", "--set", "training.save_every=1"]


def arith(ctx):
    return ["-c", os.path.join(ctx.code, "configs", "arithmetic.yaml"), "--set", "training.steps=1",
            "--set", "training.batch_size=2", "--set", "grpo.group_size=2", "--set", "training.warm_start_epochs=0",
            "--set", "task.eval_size=4", "--set", "training.eval_every=0", "--set", "training.save_every=1"]


def zh_en(ctx):
    return ["-c", os.path.join(ctx.code, "configs", "zh_en_numbers.yaml"), "--set", "training.steps=1",
            "--set", "training.batch_size=2", "--set", "grpo.group_size=2", "--set", "training.warm_start_epochs=0",
            "--set", "task.eval_size=4", "--set", "training.eval_every=0", "--set", "training.save_every=1"]


def _base(ctx, base):
    return {"cartpole": CARTPOLE, "arith": arith(ctx) if base == "arith" else None,
            "zh_en": zh_en(ctx) if base == "zh_en" else None, None: []}[base]


def _data_lost(ctx, status, note, folder="run"):
    bad = nonfinite_files(ctx.work / folder) if (ctx.work / folder).exists() else []
    if bad:
        return "data lost", "NaN / inf weights written to %s (%s)" % (", ".join(bad), note)
    return status, note


def train_error(cid, cls, args, base="cartpole", setup=None, fast=True, timeout=None):
    """`grpo-edge train` on bad input: exit 2 with one error line, and no checkpoint with NaN weights."""
    def fn(ctx):
        if setup:
            setup(ctx)
        r = ctx.cli(["train", "-q"] + _base(ctx, base) + [a(ctx) if callable(a) else a for a in args]
                    + ["--save-dir", "run"])
        return _data_lost(ctx, *classify_error(r))
    return {"id": cid, "cls": cls, "fn": fn, "fast": fast, "timeout": timeout}


def train_ok(cid, cls, args, base="cartpole", setup=None, check=None, fast=True):
    """`grpo-edge train` on input that must work (a YAML number as people write it, a path with '#')."""
    def fn(ctx):
        if setup:
            setup(ctx)
        r = ctx.cli(["train", "-q"] + _base(ctx, base) + [a(ctx) if callable(a) else a for a in args]
                    + ["--save-dir", "run"])
        status, note = classify_ok(r)
        if status == "clean" and check:
            problem = check(ctx, r)
            if problem:
                status, note = "wrong", problem
        return _data_lost(ctx, status, note)
    return {"id": cid, "cls": cls, "fn": fn, "fast": fast}


def write(ctx, name, text):
    path = ctx.work / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------------- config values
CASES = []
FLOAT_KEYS = ["training.lr", "training.adam_beta1", "training.adam_beta2", "training.adam_eps", "training.weight_decay",
              "training.grad_norm_clip", "training.target_metric", "training.warm_start_lr", "grpo.clip_eps",
              "grpo.clip_eps_high", "grpo.gamma", "grpo.beta", "grpo.entropy_coef", "grpo.temperature",
              "grpo.grad_penalty_lambda", "grpo.target_grad_norm", "grpo.gae_lambda", "grpo.vf_coef",
              "augment.latent_noise"]
for i, key in enumerate(FLOAT_KEYS):          # one of .nan / .inf per key, alternating
    bad = (".nan", ".inf")[i % 2]
    CASES.append(train_error("set %s=%s" % (key, bad), "config nan/inf", ["--set", "%s=%s" % (key, bad)],
                             fast=(i % 3 == 0)))
for key, bad in (("training.lr", ".inf"), ("grpo.clip_eps", ".nan"), ("model.hidden", ".nan"),
                 ("training.steps", ".inf"), ("task.max_steps", ".nan"), ("model.hidden_dropout", ".nan")):
    CASES.append(train_error("set %s=%s" % (key, bad), "config nan/inf", ["--set", "%s=%s" % (key, bad)]))
for key, bad, base in (("curriculum.threshold", ".nan", "arith"), ("curriculum.new_fraction", ".inf", "arith"),
                       ("task.temperature", ".nan", "arith"), ("task.test_fraction", ".nan", "arith")):
    CASES.append(train_error("set %s=%s (arith)" % (key, bad), "config nan/inf", ["--set", "%s=%s" % (key, bad)],
                             base=base, fast=False))
CASES.append(train_error("yaml file lr: .nan", "config nan/inf",
                         ["-c", lambda ctx: write(ctx, "nan.yaml", "training: {lr: .nan}\ntask: {name: cartpole}\n")],
                         base=None))

RANGE = [("training.adam_beta2", "1"), ("training.adam_beta1", "1"), ("training.eval_n", "-5"),
         ("training.seed", "99999999999"), ("training.seed", "-1"), ("task.max_steps", "0"), ("task.eval_episodes", "0"),
         ("training.steps", "0"), ("model.hidden", "0"), ("model.num_layers", "0"), ("model.hidden_dropout", "1.5"),
         ("training.adam_eps", "0"), ("training.weight_decay", "-0.1"), ("grpo.entropy_coef", "-1"),
         ("grpo.critic_hidden", "0"), ("training.lr", "1e30")]
for key, bad in RANGE:
    CASES.append(train_error("set %s=%s" % (key, bad), "config range", ["--set", "%s=%s" % (key, bad)]))
CASES.append(train_error("--seed 99999999999", "config range", ["--seed", "99999999999"]))
CASES.append(train_error("set model.d_model=30 (n_head 4)", "config range", ["--set", "model.d_model=30"],
                         base="arith", fast=False))

TYPES = [("model.arch", "[mlp]"), ("task.env_kwargs", "[1,2]"), ("task.env_kwargs", "3"), ("model.activation", "relu6"),
         ("model.hidden", "[64]"), ("training.lr", "[0.1]"), ("task.name", "[cartpole]"), ("model.activation", "3"),
         ("task.max_steps", "[5]"), ("grpo.algo", "[ppo]"), ("task.env_id", "[1]"), ("model.hidden", "true")]
for key, bad in TYPES:
    CASES.append(train_error("set %s=%s" % (key, bad), "config type", ["--set", "%s=%s" % (key, bad)]))
CASES.append(train_error("yaml model: [mlp]", "config type",
                         ["-c", lambda ctx: write(ctx, "t.yaml", "model: [mlp]\ntask: {name: cartpole}\n")], base=None))
CASES.append(train_error("yaml task.rewards: 3 (arith)", "config type", ["--set", "task.rewards=3"], base="arith",
                         fast=False))
CASES.append(train_error("train --device cuda without a GPU", "config value", ["--device", "cuda"]))
CASES.append(train_error("train --latent-noise inf", "config nan/inf", ["--latent-noise", "inf"]))
CASES.append(train_error("train --latent-noise nan", "config nan/inf", ["--latent-noise", "nan"]))
# issue 31: sizes checked before anything is allocated; the gradient penalty and PPO on the text models
CASES.append(train_error("set model.max_len=1000000 (arith)", "sizes", ["--set", "model.max_len=1000000"], base="arith"))
CASES.append(train_error("set model.max_len=4 (arith)", "sizes", ["--set", "model.max_len=4"], base="arith"))
CASES.append(train_error("set model.max_len=8 (zh-en)", "sizes", ["--set", "model.max_len=8"], base="zh_en"))
CASES.append(train_error("set training.batch_size=100000000", "sizes", ["--set", "training.batch_size=100000000"]))
CASES.append(train_error("set training.batch_size=100000000 (arith)", "sizes",
                         ["--set", "training.batch_size=100000000"], base="arith"))
CASES.append(train_ok("grad_penalty_lambda=0.3 (arith)", "text settings", ["--set", "grpo.grad_penalty_lambda=0.3"],
                      base="arith", fast=False))
CASES.append(train_ok("grad_penalty_lambda=0.3 (zh-en)", "text settings", ["--set", "grpo.grad_penalty_lambda=0.3"],
                      base="zh_en", fast=False))
CASES.append(train_ok("grpo.algo=ppo (zh-en)", "text settings", ["--set", "grpo.algo=ppo"], base="zh_en", fast=False))
# issue 31: YAML as people write it wrong, and options that do not fit the task
CASES.append(train_error("yaml training.lr given twice", "config yaml", ["-c", lambda ctx: write(
    ctx, "dup.yaml", "training:\n  lr: 0.1\n  steps: 2\n  lr: 0.2\ntask: {name: cartpole}\n")], base=None))
CASES.append(train_error("yaml file empty", "config yaml", ["-c", lambda ctx: write(ctx, "empty.yaml", "")], base=None))
CASES.append(train_error("yaml file only comments", "config yaml", ["-c", lambda ctx: write(ctx, "c.yaml", "# x\n")],
                         base=None))
CASES.append(train_error("--config is a folder", "config yaml",
                         ["-c", lambda ctx: (ctx.work / "cfgdir").mkdir(exist_ok=True) or str(ctx.work / "cfgdir")],
                         base=None))
CASES.append(train_error('yaml amp: "yes" (quoted)', "config yaml", ["-c", lambda ctx: write(
    ctx, "amp.yaml", 'training: {amp: "yes"}\ntask: {name: cartpole}\n')], base=None))
CASES.append(train_error('yaml steps: "2" (quoted)', "config yaml", ["-c", lambda ctx: write(
    ctx, "st.yaml", 'training: {steps: "2"}\ntask: {name: cartpole}\n')], base=None))
CASES.append(train_error("--data-path with arithmetic", "config value",
                         ["--data-path", lambda ctx: write(ctx, "d.jsonl", '{"prompt": "1+1=", "answer": "2"}\n')],
                         base="arith"))


# ---------------------------------------------------------------------------------------------- YAML numbers
def _lr_is(value):
    def check(ctx, r):
        cfg = (ctx.work / "run" / "config.yaml").read_text()
        return None if ("lr: %s" % value) in cfg else "config.yaml does not hold lr %s" % value
    return check


CASES.append(train_ok("yaml lr: 3e-4 (README snippet)", "yaml numbers",
                      ["-c", lambda ctx: write(ctx, "lr.yaml", "training:\n  lr: 3e-4\n  steps: 2\n  batch_size: 4\n"
                                                               "  eval_every: 0\ngrpo: {group_size: 4}\n"
                                                               "task: {name: cartpole, eval_episodes: 2}\n")],
                      base=None, check=_lr_is("0.0003")))
CASES.append(train_ok("--set training.lr=3e-4", "yaml numbers", ["--set", "training.lr=3e-4"], check=_lr_is("0.0003")))
CASES.append(train_ok("--set training.warm_start_lr=1e-3", "yaml numbers", ["--set", "training.warm_start_lr=1e-3"]))
CASES.append(train_ok("--set training.adam_eps=1E-6", "yaml numbers", ["--set", "training.adam_eps=1E-6"]))
CASES.append(train_ok("yaml grpo.beta: 4e-2", "yaml numbers",
                      ["-c", lambda ctx: write(ctx, "b.yaml", "grpo: {beta: 4e-2, group_size: 4}\ntraining: {steps: 2, "
                                                              "batch_size: 4, eval_every: 0}\ntask: {name: cartpole, "
                                                              "eval_episodes: 2}\n")], base=None))


# ---------------------------------------------------------------------------------------------- command-line paths
PAIRS = "".join("%s\t%s\n" % (zh, en) for zh, en in (
    ("一", "one"), ("二", "two"), ("三", "three"), ("四", "four"), ("五", "five"), ("六", "six"), ("七", "seven"),
    ("八", "eight"), ("九", "nine"), ("十", "ten"), ("十一", "eleven"), ("十二", "twelve"), ("十三", "thirteen"),
    ("十四", "fourteen"), ("十五", "fifteen"), ("二十", "twenty"), ("三十", "thirty"), ("四十", "forty")))


def _pairs_file(name):
    def setup(ctx):
        write(ctx, name, PAIRS)
    return setup


for name in ("pairs #2.tsv", "a: b.tsv", "{y} [1].tsv"):
    CASES.append(train_ok("--data-path %r" % name, "cli paths", ["--data-path", name], base="zh_en",
                          setup=_pairs_file(name), fast=False))
CASES.append(train_error("--data-path missing.tsv", "cli paths", ["--data-path", "missing #1.tsv"], base="zh_en"))
CASES.append(train_error("--mono-path 'mono #1.txt' missing", "cli paths", ["--mono-path", "mono #1.txt"], base="zh_en"))
CASES.append(train_error("--teacher 'a: b.pt' (a text file)", "cli paths", ["--teacher", "a: b.pt"], base="zh_en",
                         setup=lambda ctx: write(ctx, "a: b.pt", "not a checkpoint"), fast=False))
CASES.append(train_error("--teacher 't #1.pt' missing", "cli paths", ["--teacher", "t #1.pt"], base="zh_en",
                         fast=False))


def _same_split(ctx):
    write(ctx, "data/train.tsv", PAIRS)
    write(ctx, "data/test.tsv", PAIRS)


CASES.append(train_error("data folder: every train pair also in test", "data", ["--data-path", "data"], base="zh_en",
                         setup=_same_split, fast=False))
CASES.append(train_error("data file with one pair", "data", ["--data-path", "one.tsv"], base="zh_en",
                         setup=lambda ctx: write(ctx, "one.tsv", "一\tone\n"), fast=False))
CASES.append(train_error("empty data file", "data", ["--data-path", "e.tsv"], base="zh_en",
                         setup=lambda ctx: write(ctx, "e.tsv", ""), fast=False))


# ---------------------------------------------------------------------------------------------- architecture vs task
def _arch_yaml(arch, task):
    def make(ctx):
        return write(ctx, "arch.yaml", "model: {arch: %s}\ntask: {name: %s}\ntraining: {steps: 1, batch_size: 2, "
                                       "eval_every: 0, warm_start_epochs: 0}\ngrpo: {group_size: 2}\n" % (arch, task))
    return make


for arch, task in (("micro-gpt", "cartpole"), ("tiny-transformer", "cartpole"), ("lite-resnet", "arithmetic"),
                   ("mlp", "arithmetic"), ("mlp", "digits"), ("micro-gpt", "digits"), ("mlp", "zh-en-numbers")):
    CASES.append(train_error("model.arch %s on %s" % (arch, task), "arch vs task", ["-c", _arch_yaml(arch, task)],
                             base=None))


# ---------------------------------------------------------------------------------------------- non-finite training
def _reward_module(value):
    def setup(ctx):
        write(ctx, "hostile_reward.py", "def fn(completion, reference, prompt):\n    return %s\n" % value)
    return setup


CASES.append(train_error("user reward 1e300 (inf in float32)", "nonfinite train",
                         ["--set", "task.reward=hostile_reward:fn"], base="arith", setup=_reward_module("1e300"),
                         fast=False))
CASES.append(train_error("user reward nan", "nonfinite train", ["--set", "task.reward=hostile_reward:fn"], base="arith",
                         setup=_reward_module("float('nan')"), fast=False))
CASES.append(train_ok("user reward nan, reward_errors=skip", "nonfinite train",
                      ["--set", "task.reward=hostile_reward:fn", "--set", "task.reward_errors=skip"], base="arith",
                      setup=_reward_module("float('nan')"), fast=False))
CASES.append(train_error("user reward -1e39", "nonfinite train", ["--set", "task.reward=hostile_reward:fn"],
                         base="arith", setup=_reward_module("-1e39"), fast=False))
CASES.append(train_error("lr=1e30 diverges (cartpole)", "nonfinite train",
                         ["--set", "training.lr=1e30", "--set", "training.steps=4"]))
CASES.append(train_error("lr=1e6, lr_scaling none, steps 4", "nonfinite train",
                         ["--set", "training.lr=1e6", "--set", "training.lr_scaling=none", "--set", "training.steps=4"]))


# ---------------------------------------------------------------------------------------------- tampered checkpoints
def tamper(kind, src, dst):
    import torch
    if kind == "truncated":
        data = open(src, "rb").read()
        open(dst, "wb").write(data[:len(data) // 2])
        return
    if kind == "garbage":
        open(dst, "wb").write(os.urandom(4096))
        return
    if kind == "empty":
        open(dst, "wb").close()
        return
    s = torch.load(src, map_location="cpu", weights_only=True)
    k = sorted(s["model"])[0]
    if kind == "flip":                       # one exponent bit of one weight; the file's checksum entry kept
        w = s["model"][k].view(-1)
        b = w[:1].clone().view(torch.int32)
        b ^= (1 << 30)
        w[0] = b.view(torch.float32)[0]
    elif kind == "flip-nosum":
        w = s["model"][k].view(-1)
        b = w[:1].clone().view(torch.int32)
        b ^= (1 << 30)
        w[0] = b.view(torch.float32)[0]
        s.pop("model_sha256", None)
    elif kind in ("nan", "inf"):
        s["model"][k].view(-1)[0] = float(kind)
        s.pop("model_sha256", None)
    elif kind == "no-task":
        s.pop("task")
        s["config"] = {}
    elif kind == "config-list":
        s["config"] = [1, 2]
    elif kind == "config-task-list":
        s["config"]["task"] = [1]
    elif kind == "arch-micro-gpt":
        s["arch"] = "micro-gpt"
    elif kind == "arch-int":
        s["arch"] = 5
    elif kind == "arch-unknown":
        s["arch"] = "resnet50"
    elif kind == "obs-dim-6":
        s["model_config"]["obs_dim"] = 6
    elif kind == "model-list":
        s["model"] = [1, 2]
    elif kind == "model-config-list":
        s["model_config"] = [4, 2]
    elif kind == "no-model":
        s.pop("model")
    elif kind == "format":
        s["format"] = "other/9"
    elif kind == "task-int":
        s["task"] = 3
    elif kind == "hidden-str":
        s["model_config"]["hidden"] = "wide"
    torch.save(s, dst)


# Tampering that leaves what a command needs intact: a clean run is as right as a one-line refusal.
HARMLESS = {("no-task", "export")}


def ckpt_case(kind, cmd, fast=True):
    def fn(ctx):
        dst = ctx.work / "c.pt"
        tamper(kind, ctx.fixtures["ckpt"], str(dst))
        if cmd == "eval":
            r = ctx.cli(["eval", dst, "--n", "2"])
        elif cmd == "export":
            r = ctx.cli(["export", dst, "--out", ctx.work / "m.onnx"])
        elif cmd == "calibrate":
            r = ctx.cli(["calibrate", dst, "--out", ctx.work / "c.npz", "--n", "8"])
        elif cmd == "deploy-rpi4":
            r = ctx.cli(["deploy", "--target", "rpi4", "--checkpoint", dst, "--out", ctx.work / "dep"])
        else:                                 # resume from it
            (ctx.work / "run").mkdir()
            shutil.copy(str(dst), str(ctx.work / "run" / "last.pt"))
            r = ctx.cli(["train", "-q"] + CARTPOLE + ["--set", "training.steps=3", "--save-dir", "run", "--resume"])
        if (kind, cmd) in HARMLESS and r.rc == 0 and not r.traceback:
            return "clean", "runs (the command does not need what was removed)"
        return classify_error(r)
    return {"id": "checkpoint %s -> %s" % (kind, cmd), "cls": "checkpoint", "fn": fn, "fast": fast}


for kind in ("flip", "flip-nosum", "nan", "inf", "config-list", "config-task-list", "arch-micro-gpt", "obs-dim-6",
             "truncated", "model-list", "model-config-list", "hidden-str"):
    CASES.append(ckpt_case(kind, "eval"))
for kind in ("flip", "nan", "no-task", "config-list", "arch-micro-gpt", "arch-unknown"):
    CASES.append(ckpt_case(kind, "export"))
for kind in ("flip", "nan", "config-list", "obs-dim-6", "no-model"):
    CASES.append(ckpt_case(kind, "calibrate", fast=False))
for kind in ("flip", "nan", "arch-micro-gpt"):
    CASES.append(ckpt_case(kind, "deploy-rpi4", fast=False))
for kind in ("flip", "nan", "config-list", "arch-micro-gpt", "truncated", "format"):
    CASES.append(ckpt_case(kind, "resume"))


# ---------------------------------------------------------------------------------------------- eval / misc CLI values
for args, cid in ((["--n", "-1"], "eval --n -1"), (["--split", "valid"], "eval --split valid")):
    def _eval(ctx, args=args):
        return classify_error(ctx.cli(["eval", ctx.fixtures["ckpt"]] + args))
    CASES.append({"id": cid, "cls": "cli values", "fn": _eval, "fast": True})


# ---------------------------------------------------------------------------------------------- interrupts and resume
def _train(ctx, folder, steps, extra=()):
    return ["train", "-q", "--set", "training.steps=%d" % steps, "--set", "training.batch_size=8", "--set",
            "training.eval_every=0", "--set", "task.eval_episodes=2", "--set", "training.save_every=100"] + list(extra) \
        + ["--save-dir", folder]


def _interrupt(ctx, folder, steps, at_lines, signals):
    """Start a run, wait until metrics.jsonl has `at_lines` lines, send the signals; (returncode, stderr)."""
    argv = [sys.executable, "-m", "grpo_edge.cli.main"] + _train(ctx, folder, steps)
    p = subprocess.Popen(argv, cwd=str(ctx.work), env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    metrics = ctx.work / folder / "metrics.jsonl"
    t0 = time.time()
    while time.time() - t0 < 120 and p.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= at_lines:
            break
        time.sleep(0.01)
    for sig, delay in signals:
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(sig)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return p.returncode, err.decode("utf-8", "replace")


def trial_ctrl_c_exact(ctx):
    """Ctrl-C mid-run, then --resume: the end state must equal an uninterrupted run's, bit for bit."""
    ref = ctx.cli(_train(ctx, "ref", 6))
    if ref.rc != 0:
        return classify_ok(ref)
    rc, err = _interrupt(ctx, "cut", 6, 2, [(signal.SIGINT, 0.0)])
    if "Traceback" in err:
        return "traceback", err.strip().splitlines()[-1]
    if rc != 130:
        return "wrong", "exit %s after Ctrl-C" % rc
    if not (ctx.work / "cut" / "last.pt").exists():
        return "wrong", "Ctrl-C saved nothing"
    r = ctx.cli(_train(ctx, "cut", 6) + ["--resume"])
    if r.rc != 0:
        return classify_ok(r)
    if not same_weights(ctx.work / "ref" / "last.pt", ctx.work / "cut" / "last.pt"):
        return "data lost", "Ctrl-C save + --resume ends with weights that differ from the uninterrupted run"
    return "clean", "resumed run bit-identical to the uninterrupted one"


def trial_double_ctrl_c(ctx):
    rc, err = _interrupt(ctx, "cut", 6, 1, [(signal.SIGINT, 0.0), (signal.SIGINT, 0.02), (signal.SIGINT, 0.02)])
    if "Traceback" in err:
        return "traceback", err.strip().splitlines()[-1]
    last = ctx.work / "cut" / "last.pt"
    if last.exists() and load_weights(last) is None:
        return "data lost", "last.pt unreadable after a double Ctrl-C"
    return ("clean", "exit 130, no traceback") if rc == 130 else ("wrong", "exit %s" % rc)


def trial_sigterm(ctx):
    rc, err = _interrupt(ctx, "cut", 6, 2, [(signal.SIGTERM, 0.0)])
    if "Traceback" in err:
        return "traceback", err.strip().splitlines()[-1]
    ok = (ctx.work / "cut" / "last.pt").exists() and finite_checkpoint(ctx.work / "cut" / "last.pt")
    return ("clean", "exit 130, last.pt saved") if rc == 130 and ok else ("wrong", "exit %s, last.pt ok=%s" % (rc, ok))


def trial_resume_lr(ctx):
    """--resume --set training.lr=0.5: the optimizer must use 0.5 afterwards (and say so)."""
    r = ctx.cli(_train(ctx, "run", 2))
    if r.rc != 0:
        return classify_ok(r)
    r = ctx.cli(_train(ctx, "run", 3, ["--set", "training.lr=0.5", "--set", "training.lr_scaling=none"]) + ["--resume"])
    if r.rc != 0:
        return classify_ok(r)
    st = load_weights(ctx.work / "run" / "last.pt")
    lr = st["optimizer"]["param_groups"][0]["lr"]
    if abs(lr - 0.5) > 1e-12:
        return "wrong", "optimizer lr %g after --resume --set training.lr=0.5" % lr
    return "clean", "lr 0.5 applied"


def trial_resume_changed(key_value):
    def fn(ctx):
        r = ctx.cli(_train(ctx, "run", 2))
        if r.rc != 0:
            return classify_ok(r)
        r = ctx.cli(_train(ctx, "run", 3, ["--set", key_value]) + ["--resume"])
        status, note = classify_error(r)
        if status == "clean" and key_value.split("=")[0] not in note:
            return "wrong", "the error does not name %s: %s" % (key_value.split("=")[0], note)
        return status, note
    return fn


def trial_torn_metrics(ctx):
    r = ctx.cli(_train(ctx, "run", 2))
    if r.rc != 0:
        return classify_ok(r)
    with open(str(ctx.work / "run" / "metrics.jsonl"), "a") as f:
        f.write('{"step": 3, "loss": 0.')
    return classify_ok(ctx.cli(_train(ctx, "run", 3) + ["--resume"]))


CASES += [
    {"id": "Ctrl-C then --resume is bit-identical", "cls": "interrupt", "fn": trial_ctrl_c_exact, "fast": False},
    {"id": "double Ctrl-C", "cls": "interrupt", "fn": trial_double_ctrl_c, "fast": False},
    {"id": "SIGTERM saves", "cls": "interrupt", "fn": trial_sigterm, "fast": False},
    {"id": "--resume --set training.lr=0.5 applied", "cls": "resume", "fn": trial_resume_lr, "fast": False},
    {"id": "--resume with a torn metrics.jsonl line", "cls": "resume", "fn": trial_torn_metrics, "fast": False},
]
for kv in ("model.hidden=32", "grpo.algo=ppo", "model.activation=relu", "grpo.group_size=4", "grpo.beta=0.1"):
    CASES.append({"id": "--resume --set %s refused" % kv, "cls": "resume", "fn": trial_resume_changed(kv),
                  "fast": False})


# ---------------------------------------------------------------------------------------------- online
ONLINE_ENV = "grpo_edge.online.envs:CartPole"


def _policy(ctx):
    """A served policy for the stream cases: an mlp checkpoint built by the code under test."""
    write(ctx, "mkpol.py", "from grpo_edge.core.models import build_model\n"
                           "from grpo_edge.core.checkpoint import save_checkpoint\n"
                           "m = build_model('mlp', obs_dim=4, n_actions=2, num_layers=1)\n"
                           "save_checkpoint('pol.pt', {'arch': 'mlp', 'model_config': m.config(), 'task': 'online',\n"
                           "                 'task_meta': {}, 'config': {}, 'model': m.state_dict()})\n")
    r = ctx.run([sys.executable, str(ctx.work / "mkpol.py")])
    assert r.rc == 0, r.err[-500:]


def _stream(ctx, bad):
    import random
    rng = random.Random(0)
    lines = []
    for ep in range(48):
        for t in range(5):
            rec = {"obs": [rng.uniform(-1, 1) for _ in range(4)], "action": rng.randint(0, 1), "reward": 1.0}
            if ep % 3 == 1 and t == 2:
                key, value = bad
                if key == "obs":
                    rec["obs"][0] = value
                else:
                    rec[key] = value
            if t == 4:
                rec["done"] = True
            lines.append(json.dumps(rec))
    return write(ctx, "stream.jsonl", "\n".join(lines) + "\n")


def online_records(cid, bad):
    def fn(ctx):
        _policy(ctx)
        path = _stream(ctx, bad)
        r = ctx.online(["--stream", "stdin", "--policy", "pol.pt", "--save-dir", "on", "--set", "grpo.group_size=2",
                        "--set", "training.batch_size=1", "-q"], stdin=path)
        status, note = classify_ok(r)
        bad_files = nonfinite_files(ctx.work / "on")
        if bad_files:
            return "data lost", "NaN / inf weights in %s" % ", ".join(bad_files)
        if status != "clean":
            return status, note
        dec = (ctx.work / "on" / "decisions.jsonl").read_text()
        if '"drop"' not in dec:
            return "wrong", "bad records accepted without a logged reason"
        return "clean", "episodes dropped with a logged reason; state finite"
    return {"id": cid, "cls": "online records", "fn": fn, "fast": False}


for cid, bad in (("online obs NaN", ("obs", float("nan"))), ("online obs 1e39", ("obs", 1e39)),
                 ("online reward 1e300", ("reward", 1e300)), ("online logp -Infinity", ("logp", float("-inf"))),
                 ("online logp -1e30", ("logp", -1e30)), ("online reward \"1.0\" (a string)", ("reward", "1.0")),
                 ("online action 7 of 2", ("action", 7))):
    CASES.append(online_records(cid, bad))


# issue 30: the stream as a service: every bad record one policy, endless episodes and lone groups flagged
def _rec_line(done=False, **kw):
    rec = {"obs": [0.1, -0.2, 0.03, 0.1], "action": 1, "reward": 1.0}
    rec.update(kw)
    if done:
        rec["done"] = True
    return json.dumps(rec).encode() + b"\n"


def _episodes(n, steps=5, **kw):
    return b"".join(b"".join(_rec_line(done=t == steps - 1, **kw) for t in range(steps)) for _ in range(n))


def online_stream(cid, payload, expect_events, expect_updates):
    """A stdin stream (bytes): exit 0, the expected events in decisions.jsonl, and training where it should."""
    def fn(ctx):
        _policy(ctx)
        path = ctx.work / "stream.bin"
        path.write_bytes(payload())
        r = ctx.online(["--stream", "stdin", "--policy", "pol.pt", "--save-dir", "on", "--set", "grpo.group_size=2",
                        "--set", "training.batch_size=1", "--set", "online.export_onnx=false", "-q"], stdin=path)
        status, note = classify_ok(r)
        if status != "clean":
            return status, note
        dec = [json.loads(line) for line in (ctx.work / "on" / "decisions.jsonl").read_text().splitlines()]
        events = set(d["event"] for d in dec)
        missing = [e for e in expect_events if e not in events]
        if missing:
            return "wrong", "no %s event (events: %s)" % (", ".join(missing), ", ".join(sorted(events)))
        stop = dec[-1]
        if (stop.get("update", 0) > 0) != expect_updates:
            return "wrong", "%d updates where %s expected" % (stop.get("update", 0), "some" if expect_updates else "none")
        return "clean", "%s logged; %d updates; %s" % (", ".join(expect_events) or "nothing dropped", stop["update"],
                                                      r.last_line()[:80])
    return {"id": cid, "cls": "online stream", "fn": fn, "fast": False}


CASES += [
    online_stream("online stream starts with a BOM", lambda: b"\xef\xbb\xbf" + _episodes(24), [], True),
    online_stream("online bytes that are not UTF-8", lambda: _episodes(8) + b"\xff\xfe\x00junk\n" + _episodes(16),
                  ["drop"], True),
    online_stream("online a line of 2 MB", lambda: _episodes(8) + b"1" * (2 << 20) + b"\n" + _episodes(16),
                  ["drop"], True),
    online_stream("online an episode that never ends", lambda: _episodes(1, steps=6000), ["cut", "stalled"], False),
    online_stream("online 5000 lone group keys", lambda: b"".join(_rec_line(done=True, group="k%d" % i)
                                                                   for i in range(5000)), ["unmatched"], False),
]


def online_tcp_clients(ctx):
    """A TCP stream: clients that reset mid-record, close mid-record, send bytes that are not UTF-8 or an
    over-long line; then a client with good episodes. The server must keep listening and train on those."""
    import socket
    import struct
    _policy(ctx)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([sys.executable, "-m", "grpo_edge.online", "--stream", "tcp:%d" % port, "--policy", "pol.pt",
                          "--save-dir", "on", "--set", "grpo.group_size=2", "--set", "training.batch_size=1",
                          "--set", "online.export_onnx=false", "--max-updates", "3", "-q"], cwd=str(ctx.work),
                         env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(payload, reset=False):
        for _ in range(100):
            try:
                c = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.2)
        else:
            return
        try:
            c.sendall(payload)
            if reset:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        c.close()
    try:
        send(_episodes(2) + b'{"obs": [0.1, ', reset=True)
        send(_episodes(2) + b'{"obs": [0.1, ')
        send(b"\xff\xfe\n" + _episodes(2))
        send(b"7" * (2 << 20) + b"\n")
        send(_episodes(40))
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        return "wrong", "the server stopped serving (timed out waiting for 3 updates)"
    if "Traceback" in err.decode("utf-8", "replace"):
        return "traceback", err.decode("utf-8", "replace").strip().splitlines()[-1]
    if p.returncode != 0:
        return "wrong", "exit %s: %s" % (p.returncode, err.decode("utf-8", "replace").strip()[-200:])
    drops = (ctx.work / "on" / "decisions.jsonl").read_text().count('"drop"')
    return "clean", "3 updates after %d drop events; the server kept listening" % drops


CASES.append({"id": "online TCP clients that reset, cut off, send junk", "cls": "online stream",
              "fn": online_tcp_clients, "fast": False})


def online_env_nan(ctx):
    """An env whose reward turns NaN now and then: no NaN may reach state.pt or served.pt."""
    write(ctx, "nanenv.py", "import math\nfrom grpo_edge.online.envs import CartPole\n"
                            "class NanPole(CartPole):\n"
                            "    n = 0\n"
                            "    def step(self, a):\n"
                            "        o, r, d, t, i = CartPole.step(self, a)\n"
                            "        NanPole.n += 1\n"
                            "        return o, (float('nan') if NanPole.n % 97 == 0 else r), d, t, i\n")
    r = ctx.online(["--env", "nanenv:NanPole", "--save-dir", "on", "--max-updates", "6", "--set", "grpo.group_size=2",
                    "--set", "training.batch_size=1", "--set", "online.max_steps=60", "--set", "online.eval_episodes=2",
                    "--set", "online.gate_every=2", "--set", "online.export_onnx=false", "-q"])
    bad_files = nonfinite_files(ctx.work / "on")
    if bad_files:
        return "data lost", "NaN / inf weights in %s" % ", ".join(bad_files)
    if r.traceback:
        return "traceback", r.last_line()
    if r.rc in (0, 2):
        return "clean", "state finite (exit %d)" % r.rc
    return "wrong", "exit %s: %s" % (r.rc, r.last_line())


CASES.append({"id": "online env with NaN rewards", "cls": "online records", "fn": online_env_nan, "fast": False})


def online_config(cid, sets):
    def fn(ctx):
        args = ["--env", ONLINE_ENV, "--save-dir", "on", "--max-updates", "1"]
        for s in sets:
            args += ["--set", s]
        r = ctx.online(args)
        return _data_lost(ctx, *classify_error(r), folder="on")
    return {"id": cid, "cls": "online config", "fn": fn, "fast": True}


for cid, sets in (("online training.lr=NaN", ["training.lr=NaN"]), ("online grpo.gamma=Infinity", ["grpo.gamma=Infinity"]),
                  ("online training.lrr=1 (unknown)", ["training.lrr=1"]),
                  ("online model.activation=relu6", ['model.activation="relu6"']),
                  ("online margin NaN", ["online.margin=NaN"]), ("online env_kwargs list", ["online.env_kwargs=[1]"]),
                  ("online env_schedule misspelt", ['online.env_schedule=[[10, {"lenght": 0.1}]]']),
                  ("online env_schedule length -1", ['online.env_schedule=[[10, {"length": -1}]]']),
                  ("online bad_records=skip", ['online.bad_records="skip"']),
                  ("online training.lr=3e-4 ok?", None)):
    if sets is None:
        def _ok(ctx):
            r = ctx.online(["--env", ONLINE_ENV, "--save-dir", "on", "--max-updates", "1", "--set", "training.lr=3e-4",
                            "--set", "online.max_steps=50", "--set", "online.eval_episodes=2", "-q"])
            return classify_ok(r)
        CASES.append({"id": "online --set training.lr=3e-4 works", "cls": "yaml numbers", "fn": _ok, "fast": True})
    else:
        CASES.append(online_config(cid, sets))
