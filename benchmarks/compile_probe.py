"""What torch.compile would buy the text GRPO step of benchmarks/vs_trl.py (issue 14, row 3, the compiled path).

    .venv/bin/python benchmarks/compile_probe.py                 # ~2-4 min on 2 cores (mostly compiling)
    .venv/bin/python benchmarks/compile_probe.py --out /tmp/probe.json

Same model, task and batch as benchmarks/vs_trl.py (micro-gpt width 64 x 2 layers, 8 prompts x G 4,
arithmetic after one warm-start epoch, 1 thread). On a real rollout batch it times, eager vs
torch.compile (inductor, default mode), the two parts a compiled path would compile:
  * the KV-cache decode step (MicroGPT._decode_one), per call, with the cold compile and the
    recompile a new cache position costs (one per generated token position unless shapes are dynamic;
    dynamic=True is timed too);
  * the update's loss (teacher-forced log-probs + the GRPO loss) with its backward, per call, with
    the cold compile and the recompile for another completion length.
It then prints the eager step time, the step time the compiled parts would give, and after how many
steps the compile time is paid back. Compiles start from an empty inductor cache (a fresh temp folder). Writes benchmarks/results/compile_probe.json (or --out).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine, markdown_table, write_json  # noqa: E402

SHAPE = dict(d_model=64, n_layer=2, n_head=4, max_len=32, length=8, steps=40, prompts=8, lr=1e-3, seed=0, group=4)


def per_call_ms(fn, n=200, rounds=5):
    """Best-of-rounds mean milliseconds per call (after 5 warm-up calls)."""
    for _ in range(5):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1000)
    return best


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def trainer_and_batch():
    import vs_trl
    from grpo_edge.training_run import GRPOTrainer
    tr = GRPOTrainer(config=vs_trl.our_config(SHAPE), progress=False)
    tr.warm_start()
    steps = [tr.train_step() for _ in range(12)]
    eager_step_ms = statistics.median(m["step_time"] for m in steps[2:]) * 1000
    ro = tr.task.rollout(tr.policy, SHAPE["prompts"], SHAPE["group"], tr.generator)
    tr.compute_advantages(ro)
    return tr, ro, eager_step_ms, statistics.mean(m["completion_len"] for m in steps[2:])


def probe_decode(model, batch, compiled_kwargs):
    """(eager ms, compiled ms, cold compile s, recompile s for the next position) of one decode step."""
    import torch
    p = model.n_layer, batch, model.n_head, model.max_len, model.d_model // model.n_head
    keys, values = torch.zeros(p), torch.zeros(p)
    idx = torch.randint(3, model.vocab_size, (batch, 1))
    w = model._decode_weights()
    with torch.no_grad():
        eager = per_call_ms(lambda: model._decode_one(idx, keys, values, 8, w))
        fn = torch.compile(model._decode_one, **compiled_kwargs)
        cold = timed(lambda: fn(idx, keys, values, 8, w))
        again = timed(lambda: fn(idx, keys, values, 9, w))
        compiled = per_call_ms(lambda: fn(idx, keys, values, 8, w))
    return eager, compiled, cold, again


def probe_update(tr, ro):
    """(eager ms, compiled ms, cold compile s, recompile s for another length) of loss + backward."""
    import torch
    from grpo_edge.core import losses
    model, x = tr.policy, ro.inputs[tr.task.input_key]

    def loss_fn(prompt, actions, old_logp, adv, mask):
        logp, ent = model.sequence_logprobs(prompt, actions)
        return losses.policy_loss(logp, old_logp, adv, mask, loss_type="grpo", clip_eps=0.2)[0]

    def step(fn, t):
        model.zero_grad()
        fn(x, ro.actions[:, :t], ro.old_logp[:, :t], ro.advantages, ro.mask[:, :t]).backward()   # (N,) advantages

    t = ro.actions.shape[1]
    eager = per_call_ms(lambda: step(loss_fn, t), n=50)
    comp = torch.compile(loss_fn)
    cold = timed(lambda: step(comp, t))
    again = timed(lambda: step(comp, max(1, t - 1)))
    compiled = per_call_ms(lambda: step(comp, t), n=50)
    return eager, compiled, cold, again


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(RESULTS / "compile_probe.json"))
    a = ap.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="probe_inductor_")   # cold: no cached kernels
    import torch
    torch.set_num_threads(1)
    tr, ro, eager_step_ms, comp_len = trainer_and_batch()
    batch = len(ro)
    d_static = probe_decode(tr.policy, batch, {"dynamic": False})
    d_dynamic = probe_decode(tr.policy, batch, {"dynamic": True})
    upd = probe_update(tr, ro)
    decode_calls = max(comp_len - 1.0, 0.0)        # tokens fed back per step (the first comes from the prefill)
    saved_ms = decode_calls * (d_static[0] - min(d_static[1], d_dynamic[1])) + (upd[0] - upd[1])
    compile_s = min(d_static[2] + 7 * d_static[3], d_dynamic[2]) + upd[2] + 7 * upd[3]
    rows = [["decode step, static shapes", d_static[0], d_static[1], d_static[2], d_static[3]],
            ["decode step, dynamic=True", d_dynamic[0], d_dynamic[1], d_dynamic[2], d_dynamic[3]],
            ["loss + backward", upd[0], upd[1], upd[2], upd[3]]]
    table = markdown_table(["part", "eager ms", "compiled ms", "cold compile s", "recompile s (new shape)"], rows)
    step_after = eager_step_ms - saved_ms
    summary = {"eager_step_ms": eager_step_ms, "completion_len": comp_len, "saved_ms_per_step": saved_ms,
               "compiled_step_ms_estimate": step_after, "speedup": eager_step_ms / step_after if step_after > 0 else None,
               "compile_s_for_8_lengths": compile_s,
               "payback_steps": compile_s * 1000 / saved_ms if saved_ms > 0 else None}
    print(table)
    print("\neager step %.2f ms (completion %.2f tokens); compiled parts would save %.2f ms -> %.2f ms (%.2fx); "
          "compile time for 8 completion lengths ~%.0f s, paid back after ~%.0f steps"
          % (eager_step_ms, comp_len, saved_ms, step_after, summary["speedup"] or 0, compile_s,
             summary["payback_steps"] or float("inf")))
    write_json(a.out, {"machine": machine(), "shape": SHAPE, "table": table, "summary": summary, "rows": rows})


if __name__ == "__main__":
    main()
