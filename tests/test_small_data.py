"""Small-data and small-memory features (issue 6): curriculum, latent noise, distillation,
back-translation from the CLI, gradient checkpointing, plot_grad_flow; and their one-line errors."""
import json
import os
import subprocess
import sys

import pytest
import torch

from grpo_edge.config import load_config
from grpo_edge.core.checkpoint import load_policy, save_checkpoint
from grpo_edge.core.models import build_model
from grpo_edge.core.models.latent import add_latent_noise, latent_layer_names
from grpo_edge.data.curriculum import Curriculum
from grpo_edge.data.distill import distill, filter_candidates
from grpo_edge.errors import CheckpointError, ConfigError, GrpoEdgeError
from grpo_edge.tasks import get_task
from grpo_edge.training_run import GRPOTrainer

TINY_GPT = {"arch": "micro-gpt", "d_model": 16, "n_layer": 2, "n_head": 2, "max_len": 16}
ARITH = {"task": {"name": "arithmetic", "max_operand": 9, "eval_size": 20}, "model": TINY_GPT,
         "training": {"steps": 3, "batch_size": 4, "eval_every": 0, "save_every": 1}, "grpo": {"group_size": 4}}


def _cfg(**sections):
    out = json.loads(json.dumps(ARITH))
    for k, v in sections.items():
        out[k] = dict(out.get(k, {}), **v)
    return out


# --- curriculum -----------------------------------------------------------------------------------
def test_curriculum_sampling_and_stage_advancement():
    c = Curriculum("length", stages=3, threshold=0.5, window=2, new_fraction=0.5)
    c.set_order(list(range(30)))                                   # bins 0-9, 10-19, 20-29
    g = torch.Generator().manual_seed(0)
    assert all(i < 10 for i in c.sample(16, g))                    # stage 1: only the easiest bin
    c.observe(list(range(16)), torch.ones(16 * 2), group_size=2)   # one good step: window not full
    assert c.stage == 0
    idx = c.sample(16, g)
    c.observe(idx, torch.ones(32), 2)
    assert c.stage == 1 and c.advanced_at == [2]
    idx = c.sample(16, g)                                          # stage 2: half new (10-19), half easier
    assert sum(10 <= i < 20 for i in idx) == 8 and sum(i < 10 for i in idx) == 8
    for _ in range(5):                                             # new items failing: stays at stage 2
        c.observe(idx, torch.tensor([0.0 if 10 <= i < 20 else 1.0 for i in idx]).repeat_interleave(2), 2)
    assert c.stage == 1 and c.metrics() == {"curriculum_stage": 2.0, "curriculum_done": 0.0, "curriculum_pass": 0.0}
    state = c.state_dict()
    d = Curriculum("length", stages=3, threshold=0.5, window=2, max_stage_steps=1)
    d.load_state_dict(state)
    assert d.stage == 1 and torch.equal(d.order, c.order)
    d.sample(4, g)
    d.observe([15] * 4, torch.zeros(8), 2)                         # max_stage_steps=1 forces the advance
    d.sample(4, g)
    d.observe([25] * 4, torch.zeros(8), 2)
    assert d.stage == 3 and d.metrics()["curriculum_done"] == 1.0
    assert max(d.sample(200, g)) >= 20 and min(d.sample(200, g)) < 10      # done: uniform over all


def test_curriculum_difficulty_metrics_rank_items():
    task = get_task("arithmetic", {"max_operand": 19})
    c = Curriculum("length", stages=4)
    c.fit(task, None, torch.Generator().manual_seed(0))
    lengths = [len(p) + len(r) for p, r in (task.train_problems[i] for i in c.order.tolist())]
    assert lengths == sorted(lengths) and len(c.bin(0)) + len(c.bin(3)) == len(lengths) // 2
    model = build_model("micro-gpt", vocab_size=task.tokenizer.vocab_size, d_model=16, n_layer=1, n_head=2, max_len=16)
    for metric in ("perplexity", "pass_rate"):
        c = Curriculum(metric, stages=2, samples=2)
        c.fit(task, model, torch.Generator().manual_seed(0))
        assert sorted(c.order.tolist()) == list(range(len(task.train_problems)))


def test_curriculum_in_trainer_logs_stage_and_resumes(tmp_path):
    cfg = _cfg(curriculum={"metric": "perplexity", "stages": 2, "threshold": 0.0, "window": 1})
    tr = GRPOTrainer(config=cfg, save_dir=tmp_path, progress=False)
    tr.train()
    stages = [m["curriculum_stage"] for m in tr.history]
    assert stages[0] == 1.0 and stages[-1] == 2.0                  # threshold 0: each step masters a stage
    resumed = GRPOTrainer(config=dict(cfg, training=dict(cfg["training"], steps=4)), save_dir=tmp_path,
                          resume=True, progress=False)
    assert resumed.curriculum.stage == tr.curriculum.stage and torch.equal(resumed.curriculum.order, tr.curriculum.order)
    api = GRPOTrainer(config=ARITH, progress=False)
    api.enable_curriculum(difficulty_metric="length", stages=5)
    assert api.train_step()["curriculum_stage"] == 1.0 and api.cfg["curriculum"]["metric"] == "length"


def test_curriculum_bad_input():
    with pytest.raises(ConfigError, match=r"^curriculum.metric must be one of perplexity, length, pass_rate, got 'loss'$"):
        load_config(data=_cfg(curriculum={"metric": "loss"}))
    with pytest.raises(ConfigError, match=r"^unknown curriculum difficulty metric 'ppl'; valid: perplexity, length, pass_rate$"):
        GRPOTrainer(config=ARITH, progress=False).enable_curriculum(difficulty_metric="ppl")
    with pytest.raises(ConfigError, match="curriculum needs a text task"):
        GRPOTrainer(config={"task": {"name": "cartpole"}}, progress=False).enable_curriculum("length")


# --- latent noise -----------------------------------------------------------------------------------
MODELS = [("micro-gpt", dict(vocab_size=12, d_model=16, n_layer=2, n_head=2, max_len=16), lambda: (torch.randint(3, 12, (3, 7)),)),
          ("tiny-transformer", dict(vocab_size=12, d_model=16, nhead=2, num_layers=2, dim_feedforward=32, max_len=16),
           lambda: (torch.randint(3, 12, (3, 5)), torch.randint(3, 12, (3, 4)))),
          ("lite-resnet", dict(channels=(4, 8), blocks=(1, 1)), lambda: (torch.rand(3, 1, 8, 8),)),
          ("mlp", dict(obs_dim=4, n_actions=2), lambda: (torch.randn(3, 4),))]


@pytest.mark.parametrize("arch,kw,inputs", MODELS, ids=[m[0] for m in MODELS])
def test_latent_noise_only_in_training_mode(arch, kw, inputs):
    torch.manual_seed(0)
    model = build_model(arch, **kw)
    x = inputs()
    model.train()
    plain_train = model(*x)
    model.eval()

    def exported(specs, inputs=None):                               # what torch2onnx traces, run in torch
        specs = specs if isinstance(specs, dict) else {"m": specs}
        inputs = inputs or {k: s.example_inputs for k, s in specs.items()}
        outs = {}
        for k, s in specs.items():
            s.module.eval()
            o = s.module(*inputs[k])
            outs[k] = o if isinstance(o, tuple) else (o,)
        return outs, inputs
    with torch.no_grad():
        plain = model(*x)
        plain_export, example = exported(model.export_spec(batch_size=3))
    handle = add_latent_noise(model, std=0.5, layers="all")
    assert len(handle.layers) == len(latent_layer_names(model)) > 0
    with torch.no_grad():
        assert torch.equal(model(*x), plain)                       # eval: bit-identical
        noisy_export, _ = exported(model.export_spec(batch_size=3), example)
        for k in plain_export:
            assert all(torch.equal(u, v) for u, v in zip(plain_export[k], noisy_export[k]))
    model.train()
    assert not torch.allclose(model(*x), plain_train)              # training: noisy
    handle.remove()
    assert torch.allclose(model(*x), plain_train, atol=1e-6)


def test_latent_noise_trainer_eval_and_checkpoint_are_clean(tmp_path):
    cfg = {"task": {"name": "digits"}, "model": {"arch": "lite-resnet", "channels": [4, 8], "blocks": [1, 1]},
           "training": {"steps": 2, "batch_size": 8, "eval_every": 0}, "grpo": {"group_size": 2},
           "augment": {"latent_noise": 0.3, "latent_layers": ["layers.1", 0]}}
    tr = GRPOTrainer(config=cfg, save_dir=tmp_path, progress=False)
    tr.train()
    assert tr.latent_noise.layers == ["layers.1", "stem"]
    noisy_eval = tr.evaluate()
    x = torch.as_tensor(tr.task.x_test[:16])
    tr.policy.eval()
    with torch.no_grad():
        with_hooks = tr.policy(x)
    tr.latent_noise.remove()
    assert tr.evaluate() == noisy_eval
    with torch.no_grad():
        assert torch.equal(tr.policy(x), with_hooks)
    model, _ = load_policy(tmp_path / "last.pt")                    # a checkpoint carries no hooks
    assert not model._forward_hooks and all(not m._forward_hooks for m in model.modules())
    with pytest.raises(ConfigError, match=r"unknown latent layer 'blocks.9' for lite-resnet; valid: all, or any of stem, layers.0"):
        GRPOTrainer(config=dict(cfg, augment={"latent_noise": 0.1, "latent_layers": ["blocks.9"]}), progress=False)


# --- gradient checkpointing, plot_grad_flow -------------------------------------------------------
def _grads(interval, dropout):
    torch.manual_seed(0)
    m = build_model("micro-gpt", vocab_size=12, d_model=32, n_layer=4, n_head=2, max_len=16, hidden_dropout=dropout)
    add_latent_noise(m, 0.2)
    m.set_gradient_checkpointing(interval)
    m.train()
    x = torch.randint(3, 12, (4, 12))
    torch.manual_seed(1)
    m(x).logsumexp(-1).mean().backward()
    return [p.grad.clone() for p in m.parameters()]


def _saved_bytes(interval):
    m = build_model("micro-gpt", vocab_size=12, d_model=32, n_layer=4, n_head=2, max_len=32)
    m.set_gradient_checkpointing(interval)
    m.train()
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), t.dtype)] = t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(torch.randint(3, 12, (8, 32))).sum().backward()
    return sum(seen.values())


PEAK = """
import json, sys, torch
sys.path.insert(0, %r)
from grpo_edge.core.models import build_model
torch.set_num_threads(1)
def rss(key):
    return [int(l.split()[1]) / 1024.0 for l in open("/proc/self/status") if l.startswith(key)][0]
m = build_model("micro-gpt", vocab_size=12, d_model=64, n_layer=6, n_head=4, max_len=64)
m.train()
x = torch.randint(3, 12, (32, 64))
out = {}
for interval in (0, 1, 0, 1):                       # the first round warms up (lazy imports, first-call caches)
    m.set_gradient_checkpointing(interval)
    m.zero_grad(set_to_none=True)
    open("/proc/self/clear_refs", "w").write("5")   # reset the peak-RSS mark (VmHWM)
    base = rss("VmRSS")
    m(x).logsumexp(-1).mean().backward()
    out[interval] = rss("VmHWM") - base
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS via /proc/self/clear_refs is Linux-only")
def test_gradient_checkpointing_same_grads_less_memory(root):
    for dropout in (0.0, 0.1):                                      # dropout and latent noise replay their RNG
        for a, b in zip(_grads(0, dropout), _grads(2, dropout)):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert _saved_bytes(1) < _saved_bytes(2) < 0.8 * _saved_bytes(0)
    # Peak RSS in a fresh process; large allocations go to mmap so freed memory leaves RSS at once.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    r = subprocess.run([sys.executable, "-c", PEAK % root], capture_output=True, text=True, env=env, check=True)
    peak = json.loads(r.stdout)                                     # MB above the start of the pass
    assert peak["1"] < 0.6 * peak["0"], peak


def test_plot_grad_flow_writes_png(tmp_path):
    from grpo_edge.utils import plot_grad_flow
    m = build_model("micro-gpt", vocab_size=12, d_model=16, n_layer=2, n_head=2, max_len=16)
    with pytest.raises(ValueError, match="no parameter has a gradient"):
        plot_grad_flow(m.named_parameters(), tmp_path / "none.png")
    m(torch.randint(3, 12, (2, 5))).sum().backward()
    norms = plot_grad_flow(m.named_parameters(), tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "blocks.0.attn.q.weight" in norms
    tr = GRPOTrainer(config=_cfg(training={"plot_grad_flow_every": 2, "amp": True}), save_dir=tmp_path / "run",
                     progress=False)
    tr.train()                                                      # bf16 autocast on CPU
    assert (tmp_path / "run" / "grad_flow_2.png").exists()


# --- distillation ------------------------------------------------------------------------------------
def test_teacher_filter():
    task = get_task("arithmetic", {"max_operand": 9})
    prompts = ["1+2=", "3+4=", "5+4=", "2+2="]
    refs = ["3", None, None, "4"]
    answers = [["3", "4", "3", "2"], ["7", "7", "7", "1"], ["1", "2", "3", "9"], ["4", "4", "4", "4"]]
    kept, stats = filter_candidates(task, prompts, refs, answers, min_reward=1.0, min_agreement=0.5,
                                    known=[("2+2=", "4")])
    assert kept == [("1+2=", "3"), ("3+4=", "7")]                  # labeled: reward vs reference; unlabeled: majority
    assert stats["low_agreement"] == 1 and stats["duplicate"] == 1 and stats["below_reward"] == 3


def test_distill_mixes_filtered_pairs_at_ratio():
    task = get_task("arithmetic", {"max_operand": 9})
    task.train_problems = task.train_problems[:10]
    unlabeled = ["%d+%d=" % (a, b) for a in range(10) for b in range(10)]
    test_prompts = set(p for p, _ in task.test_problems)

    def teacher(prompts, k):                                        # right on even a, wrong and split on odd a
        return [[str(eval(p[:-1]))] * k if int(p[0]) % 2 == 0 else [str(i) for i in range(k)] for p in prompts]
    pairs, stats = distill(task, teacher, prompts=unlabeled, ratio=2.0, candidates=4)
    assert len(pairs) == stats["mixed"] == 20 and stats["held_out"] == len(test_prompts & set(unlabeled))
    assert all(str(eval(p[:-1])) == a and p not in test_prompts for p, a in pairs)
    assert not set(pairs) & set(task.train_problems)


def test_distill_teacher_checkpoint_and_errors(tmp_path):
    big = _cfg(model={"d_model": 32})
    teacher = GRPOTrainer(config=big, progress=False)
    save_checkpoint(tmp_path / "teacher.pt", teacher.state_dict())
    (tmp_path / "prompts.txt").write_text("1+1=\n2+3=\n\n", encoding="utf-8")
    tr = GRPOTrainer(config=_cfg(distill={"teacher": str(tmp_path / "teacher.pt"),
                                          "prompts_path": str(tmp_path / "prompts.txt"), "ratio": 0.5}), progress=False)
    st = tr.distill_stats                                           # an untrained teacher: nothing passes
    assert st["prompts"] == 90 + 2 - st["held_out"] - 2 * (st["held_out"] == 0) or st["prompts"] >= 90
    assert len(tr.task.train_problems) == 90 + st["mixed"]
    with pytest.raises(CheckpointError, match=r"^teacher checkpoint /no/t.pt does not exist \(distill.teacher is a local"):
        GRPOTrainer(config=_cfg(distill={"teacher": "/no/t.pt"}), progress=False)
    zh = {"task": {"name": "zh-en-numbers", "max_number": 20}, "model": {"arch": "tiny-transformer", "d_model": 16,
          "nhead": 2, "num_layers": 1, "dim_feedforward": 32, "max_len": 64}, "training": {"batch_size": 4}}
    save_checkpoint(tmp_path / "zh20.pt", GRPOTrainer(config=zh, progress=False).state_dict())
    zh["task"]["max_number"] = 300
    with pytest.raises(CheckpointError, match=r"teacher .*zh20.pt has another vocabulary"):
        GRPOTrainer(config=dict(zh, distill={"teacher": str(tmp_path / "zh20.pt")}), progress=False)
    with pytest.raises(CheckpointError, match="was trained on task 'zh-en-numbers', not 'arithmetic'"):
        GRPOTrainer(config=_cfg(distill={"teacher": str(tmp_path / "zh20.pt")}), progress=False)
    (tmp_path / "bad.txt").write_text("1+x=\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.txt:1: prompt '1\+x=' has characters outside the task's vocabulary"):
        GRPOTrainer(config=_cfg(distill={"teacher": str(tmp_path / "teacher.pt"),
                                         "prompts_path": str(tmp_path / "bad.txt")}), progress=False)


# --- CLI -----------------------------------------------------------------------------------------------
def _cli(capsys, monkeypatch, *args):
    """`grpo-edge ARGS` in this process (the same main() as the console script); (exit code, stderr)."""
    from grpo_edge.cli.main import main
    monkeypatch.setattr(sys, "argv", ["grpo-edge"] + list(args))
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [
    (["train", "--curriculum", "loss"], "error: curriculum.metric must be one of perplexity, length, pass_rate"),
    (["train", "-c", "arithmetic.yaml", "--set", "task.max_operand=9", "--teacher", "/no/t.pt"], "error: teacher checkpoint /no/t.pt does not exist"),
    (["train", "--latent-noise", "-1"], "error: augment.latent_noise must be >= 0, got -1.0"),
    (["train", "--mono-path", "/no/mono.txt"], "error: --mono-path /no/mono.txt does not exist"),
])
def test_cli_bad_input_is_one_line(args, needle, capsys, monkeypatch):
    code, err = _cli(capsys, monkeypatch, *args)
    assert code == 2 and err.strip().startswith(needle), err
    assert len(err.strip().splitlines()) == 1


def test_cli_back_translation_en_to_zh(tmp_path, capsys, monkeypatch):
    """--mono-path turns target-language (here Chinese) lines into synthetic (English, Chinese) pairs, with
    progress lines; pairs whose source does not translate back are dropped (issue 31)."""
    from grpo_edge.data.bilingual import BilingualPairLoader, has_cjk
    from grpo_edge.data.zh_numbers import int_to_en, int_to_zh
    (tmp_path / "pairs.tsv").write_text("".join("%s\t%s\n" % (int_to_en(i), int_to_zh(i)) for i in range(100)
                                                if i % 4 != 1), encoding="utf-8")
    mono = [int_to_zh(i) for i in range(100) if i % 4 == 1]
    (tmp_path / "mono.txt").write_text("\n".join(mono) + "\n", encoding="utf-8")
    code, err = _cli(capsys, monkeypatch, "train", "-c", "tiny_transformer.yaml", "--mono-path", str(tmp_path / "mono.txt"),
                     "--data-path", str(tmp_path / "pairs.tsv"), "--save-dir", str(tmp_path / "run"), "-q",
                     "--set", "task.src_lang=en", "--set", "task.tgt_lang=zh", "--set", "training.warm_start_epochs=0",
                     "--set", "model.d_model=16", "--set", "model.nhead=2", "--set", "model.num_layers=1",
                     "--set", "training.steps=1", "--set", "training.batch_size=2", "--set", "grpo.group_size=2")
    assert code == 0, err
    assert "back-translation: reverse model (target -> source) step 800/800" in err
    kept = int(err.split(" synthetic pairs kept of %d lines" % len(mono))[0].rsplit(" ", 1)[-1])
    assert kept > 5, err
    # eval rebuilds the task from the checkpoint without back-translating again: no mono file needed, no models
    (tmp_path / "mono.txt").rename(tmp_path / "gone.txt")
    code, err = _cli(capsys, monkeypatch, "eval", str(tmp_path / "run" / "best.pt"), "--n", "8")
    assert code == 0 and "back-translation" not in err, err
    (tmp_path / "gone.txt").rename(tmp_path / "mono.txt")
    loader = BilingualPairLoader(src_lang="en", tgt_lang="zh", data_path=str(tmp_path / "pairs.tsv"), augment=True,
                                 mono_path=str(tmp_path / "mono.txt"), progress=None)
    synthetic = loader.synthetic_pairs
    assert len(synthetic) == kept and all(not has_cjk(s) and has_cjk(t) for s, t in synthetic)
    zh2en = dict((int_to_zh(i), int_to_en(i)) for i in range(100))
    assert sum(zh2en[t] == s for s, t in synthetic) >= 0.8 * kept, synthetic
    with pytest.raises(GrpoEdgeError, match=r"mono.txt:1: monolingual text 'one' has no Chinese characters"):
        (tmp_path / "mono.txt").write_text("one\n", encoding="utf-8")
        BilingualPairLoader(src_lang="en", tgt_lang="zh", data_path=str(tmp_path / "pairs.tsv"), augment=True,
                            mono_path=str(tmp_path / "mono.txt"))
