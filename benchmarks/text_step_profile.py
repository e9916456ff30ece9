"""Where the text GRPO step of benchmarks/vs_trl.py spends its time, and what shared-prompt teacher forcing
saves (issue 14, row 3).

    .venv/bin/python benchmarks/text_step_profile.py            # ~30 s, 1 thread

1. Phases of our step at the vs_trl shape (micro-gpt width 64 x 2 layers, 8 prompts x G 4, arithmetic
   after one warm-start epoch): wall ms per step of the rollout (generation inside it), the teacher-forced
   forward, backward and the optimizer step, 40 steps after 3 warm-up steps.
2. Shared-prompt teacher forcing (MicroGPT._forward_shared_prompt, each distinct prompt once) against the
   plain forward on the concatenated sequences, forward + backward, best of 3 x 100 calls, for prompt /
   completion lengths (7, 4) (the bench), (7, 8) and (20, 8).
"""
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPE = dict(d_model=64, n_layer=2, n_head=4, max_len=32, length=8, steps=40, prompts=8, lr=1e-3, seed=0, group=4)


def phases(n_steps=40):
    import torch
    import vs_trl
    from grpo_edge.core import finite
    from grpo_edge.training_run import GRPOTrainer
    tr = GRPOTrainer(config=vs_trl.our_config(SHAPE), progress=False)
    tr.warm_start()
    acc = collections.defaultdict(float)

    def wrap(obj, name, label):
        fn = getattr(obj, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[label] += time.perf_counter() - t0
        setattr(obj, name, timed)

    wrap(tr.task, "rollout", "rollout (all)")
    wrap(tr.policy, "generate", "  of which generate")
    wrap(tr.task, "logprobs", "teacher-forced forward")
    wrap(torch.Tensor, "backward", "backward")
    wrap(tr, "_optimizer_step", "optimizer step (clip, Adam, weight check)")
    wrap(finite, "check_parameters", "  of which weight check")
    for _ in range(3):
        tr.train_step()
    acc.clear()
    t0 = time.perf_counter()
    lens = [tr.train_step()["completion_len"] for _ in range(n_steps)]
    total = (time.perf_counter() - t0) / n_steps * 1000
    print("our step: %.2f ms (mean completion %.2f tokens)" % (total, sum(lens) / len(lens)))
    order = ["rollout (all)", "  of which generate", "teacher-forced forward", "backward",
             "optimizer step (clip, Adam, weight check)", "  of which weight check"]
    for k in order:
        v = acc[k]
        print("  %-45s %6.2f ms" % (k, v / n_steps * 1000))


def shared_vs_plain():
    import torch
    from grpo_edge.core.models._layers import logprobs_and_entropy
    from grpo_edge.core.models.micro_gpt import MicroGPT
    torch.manual_seed(0)
    m = MicroGPT(20, d_model=64, n_layer=2, n_head=4, max_len=32)
    print("teacher forcing, forward + backward, 8 prompts x G 4 (ms per call):")
    for tp, tn in [(7, 4), (7, 8), (20, 8)]:
        prompts = torch.randint(3, 20, (8, tp)).repeat_interleave(4, 0)
        toks = torch.randint(3, 20, (32, tn))

        def shared():
            m.sequence_logprobs(prompts, toks)[0].sum().backward()

        def plain():
            logits = m(torch.cat([prompts, toks[:, :-1]], 1))[:, tp - 1:]
            logprobs_and_entropy(logits, toks)[0].sum().backward()
        best = {}
        for fn in (shared, plain) * 4:
            t0 = time.perf_counter()
            for _ in range(100):
                fn()
            best[fn.__name__] = min(best.get(fn.__name__, 1e9), (time.perf_counter() - t0) * 10)
        print("  prompt %2d, completion %d: shared %.2f, plain %.2f (%.2fx)"
              % (tp, tn, best["shared"], best["plain"], best["plain"] / best["shared"]))


def main():
    import torch
    torch.set_num_threads(1)
    phases()
    shared_vs_plain()


if __name__ == "__main__":
    main()
