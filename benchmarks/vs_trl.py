"""grpo-edge vs TRL's GRPOTrainer on the same work, offline, on the CPU or a GPU (issues 7, 23).

    .venv/bin/python benchmarks/vs_trl.py                                   # ~3 min on 2 shared cores
    python3 benchmarks/vs_trl.py --device cuda --out vs_trl_cuda.json       # both on the same GPU
    .venv/bin/python benchmarks/vs_trl.py --rounds 3 --steps 40 --d-model 128 --n-layer 4 --out /tmp/trl.json

Same model: our micro-gpt and a randomly initialised transformers GPT-2 of the same width, depth, heads,
vocabulary and context (exact GELU, no dropout, tied embeddings). Both start from the SAME weights: the
micro-gpt after one supervised warm-start epoch on the arithmetic task, copied into the GPT-2 layout
(q/k/v -> c_attn, Linear -> Conv1D); the script checks the two give the same logits.
--init random skips the warm start (full-length completions: generation-bound work).
Same data: arithmetic prompts ("12+7=", left-padded to a fixed width; TRL gets the pad as an ordinary
character of a locally built character tokenizer, so both models see the same ids and positions), same
reward functions (exact match + format, scored by our task on the decoded ids), same group size,
completion length, batch (prompts x G completions per step), learning rate, Adam betas, grad clip,
loss aggregation ('grpo'), clip range, temperature 1, no KL (beta 0), one optimisation pass per batch.
Measured per framework in its own process (1 thread each): samples/s (median step after one warm-up
step), peak RSS and the peak above the RSS after set-up, and the mean training reward of the last 3 steps.
Writes benchmarks/results/vs_trl.json (or --out).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (RESULTS, current_rss_mb, interleave, machine, markdown_table, med, peak_rss_mb,  # noqa: E402
                     ratio, worker_main, write_json)


def our_config(s):
    return {"model": {"arch": "micro-gpt", "d_model": s["d_model"], "n_layer": s["n_layer"], "n_head": s["n_head"],
                      "max_len": s["max_len"]},
            "task": {"name": "arithmetic", "max_operand": 99, "max_new_tokens": s["length"]},
            "training": {"steps": s["steps"], "batch_size": s["prompts"], "lr": s["lr"], "lr_scaling": "none",
                         "adam_beta2": 0.99, "grad_norm_clip": 1.0, "seed": s["seed"], "threads": 1,
                         "device": s.get("device", "cpu"),
                         "warm_start_epochs": 1, "eval_every": 0},
            "grpo": {"group_size": s["group"], "num_iterations": 1, "loss_type": "grpo", "clip_eps": 0.2,
                     "beta": 0.0, "scale_rewards": "group", "temperature": 1.0}}


def make_init(s, path):
    """The shared initial weights: random, or after our supervised warm start (1 epoch)."""
    import torch
    from grpo_edge.training_run import GRPOTrainer
    tr = GRPOTrainer(config=our_config(s), progress=False)
    if s["init_kind"] == "warm":
        tr.warm_start()
    torch.save(dict((k, v.cpu()) for k, v in tr.policy.state_dict().items()), path)


def ours_worker(s):
    import torch
    from grpo_edge.training_run import GRPOTrainer
    tr = GRPOTrainer(config=our_config(s), progress=False)
    tr.policy.load_state_dict(torch.load(s["init"]))
    tr.warm_started = True
    setup = current_rss_mb()
    times, rewards, cpu = [], [], []
    for i in range(s["steps"]):
        c0 = time.process_time()
        m = tr.train_step()
        cpu.append(time.process_time() - c0)
        times.append(m["step_time"])
        rewards.append(m["reward_mean"])
    n = s["prompts"] * s["group"]
    return {"samples_per_s": n / statistics.median(times[1:]), "samples_per_cpu_s": n / statistics.median(cpu[1:]),
            "peak_rss_mb": peak_rss_mb(), "peak_above_setup_mb": peak_rss_mb() - setup,
            "reward_after": statistics.mean(rewards[-3:]),
            "reward_first": rewards[0], "completion_len": m["completion_len"], "peak_cuda_mb": peak_cuda_mb()}


def peak_cuda_mb():
    """The CUDA allocator's peak in this process (None on the CPU)."""
    import torch
    return torch.cuda.max_memory_allocated() / 2 ** 20 if torch.cuda.is_available() and torch.cuda.is_initialized() \
        else None


def gpt2_from_microgpt(state, s, vocab):
    """A transformers GPT-2 holding micro-gpt weights (Conv1D stores (in, out): transpose Linear weights)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=vocab, n_positions=s["max_len"], n_embd=s["d_model"], n_layer=s["n_layer"],
                     n_head=s["n_head"], activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=2, eos_token_id=2, pad_token_id=2,
                     tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg)
    new = {"transformer.wte.weight": state["tok_emb.weight"], "transformer.wpe.weight": state["pos_emb.weight"],
           "transformer.ln_f.weight": state["ln_f.weight"], "transformer.ln_f.bias": state["ln_f.bias"]}
    for i in range(s["n_layer"]):
        b, h = "blocks.%d." % i, "transformer.h.%d." % i
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            new[h + theirs + ".weight"], new[h + theirs + ".bias"] = state[b + ours + ".weight"], state[b + ours + ".bias"]
        new[h + "attn.c_attn.weight"] = torch.cat([state[b + "attn.%s.weight" % x] for x in "qkv"], 0).t()
        new[h + "attn.c_attn.bias"] = torch.cat([state[b + "attn.%s.bias" % x] for x in "qkv"], 0)
        for ours, theirs in (("attn.proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.out", "mlp.c_proj")):
            new[h + theirs + ".weight"] = state[b + ours + ".weight"].t()
            new[h + theirs + ".bias"] = state[b + ours + ".bias"]
    missing, unexpected = model.load_state_dict(new, strict=False)
    assert not unexpected and all("lm_head" in k or "attn.bias" in k or "masked_bias" in k for k in missing), missing
    model.tie_weights()
    return model.eval()


def char_tokenizer(task):
    """A transformers tokenizer over our CharTokenizer ids; id 0 (our PAD) is the ordinary character '_'."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"_": 0, "<bos>": 1, "<eos>": 2}
    vocab.update(dict((c, i) for c, i in task.tokenizer.stoi.items()))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<bos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>", unk_token="<bos>")


def trl_worker(s):
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from grpo_edge.tasks import get_task
    torch.set_num_threads(1)
    task = get_task("arithmetic", our_config(s)["task"], seed=s["seed"])
    tok = char_tokenizer(task)
    model = gpt2_from_microgpt(torch.load(s["init"]), s, task.tokenizer.vocab_size)
    from grpo_edge.core.models import build_model       # same logits as the micro-gpt it came from
    ref = build_model("micro-gpt", vocab_size=task.tokenizer.vocab_size, d_model=s["d_model"], n_layer=s["n_layer"],
                      n_head=s["n_head"], max_len=s["max_len"]).eval()
    ref.load_state_dict(torch.load(s["init"]))
    x = task.encode_inputs([p for p, _ in task.train_problems[:8]])
    with torch.no_grad():
        gap = float((model(x).logits - ref(x)).abs().max())
    assert gap < 1e-3, gap
    texts = ["_" * (task.prompt_len - len(p)) + p for p, _ in task.train_problems]
    assert tok(texts[0])["input_ids"] == task.encode_inputs([task.train_problems[0][0]])[0].tolist()
    data = Dataset.from_dict({"prompt": texts, "answer": [r for _, r in task.train_problems],
                              "raw": [p for p, _ in task.train_problems]})

    def reward(completions, completion_ids, answer, raw, **kw):
        decoded = [task.tokenizer.decode(ids) for ids in completion_ids]
        total, _ = task.rewards.score(decoded, list(answer), list(raw))
        return [float(v) for v in total]

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.cpu, self.rewards, self.t0, self.lengths = [], [], [], None, []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0[0])
            self.cpu.append(time.process_time() - self.t0[1])

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                self.rewards.append(logs["reward"])
                self.lengths.append(logs.get("completions/mean_length"))

    n = s["prompts"] * s["group"]
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=n, gradient_accumulation_steps=1,
                      num_generations=s["group"], max_completion_length=s["length"], temperature=1.0, top_k=0,
                      top_p=1.0, learning_rate=s["lr"], lr_scheduler_type="constant", adam_beta2=0.99,
                      adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0, beta=0.0, loss_type="grpo",
                      scale_rewards="group", epsilon=0.2, num_iterations=1, max_steps=s["steps"], logging_steps=1,
                      report_to="none", save_strategy="no", use_cpu=s.get("device", "cpu") == "cpu", bf16=False,
                      seed=s["seed"],
                      disable_dropout=True, log_completions=False, dataloader_num_workers=0)
    clock = Clock()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok,
                          callbacks=[clock])
    setup = current_rss_mb()
    trainer.train()
    return {"samples_per_s": n / statistics.median(clock.times[1:]),
            "samples_per_cpu_s": n / statistics.median(clock.cpu[1:]), "peak_rss_mb": peak_rss_mb(),
            "peak_above_setup_mb": peak_rss_mb() - setup, "reward_after": statistics.mean(clock.rewards[-3:]),
            "reward_first": clock.rewards[0], "completion_len": clock.lengths[-1], "logit_gap_at_init": gap,
            "peak_cuda_mb": peak_cuda_mb()}


def worker(spec):
    return ours_worker(spec) if spec["framework"] == "grpo-edge" else trl_worker(spec)


def main():
    worker_main(worker)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12, help="GRPO steps per run (the first one is not timed)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="completions per prompt (G)")
    ap.add_argument("--length", type=int, default=8, help="max completion tokens")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", choices=["warm", "random"], default="warm",
                    help="warm: completions end at EOS after ~3 tokens and rewards move; random: every "
                         "completion runs the full --length (generation-heavy), rewards stay ~0")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both frameworks train")
    ap.add_argument("--out", default=str(RESULTS / "vs_trl.json"))
    a = ap.parse_args()
    spec = {"steps": a.steps, "prompts": a.prompts, "group": a.group, "length": a.length, "d_model": a.d_model,
            "n_layer": a.n_layer, "n_head": a.n_head, "max_len": 32, "lr": a.lr, "seed": a.seed,
            "init_kind": a.init, "device": a.device}
    init = os.path.join(tempfile.mkdtemp(), "init.pt")
    make_init(spec, init)
    spec["init"] = init
    import trl
    import transformers
    specs = dict((f, dict(spec, framework=f)) for f in ("grpo-edge", "trl"))
    res = interleave(Path(__file__).resolve(), specs, a.rounds)
    ours, theirs = res["grpo-edge"], res["trl"]
    rows, summary = [], {}
    for name, r in (("grpo-edge", ours), ("TRL %s" % trl.__version__, theirs)):
        summary[name] = dict((k, med(r, k)) for k in ("samples_per_s", "samples_per_cpu_s", "peak_rss_mb",
                                                        "peak_above_setup_mb", "peak_cuda_mb",
                                                        "reward_first", "reward_after", "completion_len"))
        rows.append([name] + [summary[name][k] for k in ("samples_per_s", "samples_per_cpu_s", "peak_rss_mb",
                                                         "peak_above_setup_mb",
                                                         "reward_first", "reward_after")])
    s_ours, s_trl = summary["grpo-edge"], summary["TRL %s" % trl.__version__]
    ratios = {"samples_per_s": ratio(s_ours["samples_per_s"], s_trl["samples_per_s"]),
              "peak_rss": ratio(s_ours["peak_rss_mb"], s_trl["peak_rss_mb"]),
              "peak_above_setup": ratio(s_ours["peak_above_setup_mb"], s_trl["peak_above_setup_mb"]),
              "samples_per_cpu_s": ratio(s_ours["samples_per_cpu_s"], s_trl["samples_per_cpu_s"])}
    rows.append(["ratio grpo-edge / TRL (goal samples/s: >= 3.5 eager, issue 14)",
                 ratios["samples_per_s"], ratios["samples_per_cpu_s"],
                 ratios["peak_rss"],
                 ratios["peak_above_setup"], None, None])
    table = markdown_table(["framework", "samples/s", "samples per CPU s", "peak RSS MB", "peak above set-up MB",
                            "reward step 1", "reward last 3 steps"], rows)
    print("\n" + table)
    write_json(a.out, {"machine": machine(), "settings": spec, "versions": {"trl": trl.__version__,
                       "transformers": transformers.__version__}, "summary": summary, "ratios": ratios,
                       "table": table, "runs": res})


if __name__ == "__main__":
    main()
