"""The first thing to run: teach a tiny GPT to add, with a supervised warm start and then GRPO.

    .venv/bin/python examples/simple_text_generation.py            # a few minutes on 2 CPU cores
    .venv/bin/python examples/simple_text_generation.py --quick    # a smoke test (seconds)

It prints held-out exact match before training, after the warm start and after GRPO, and a few samples.
"""
import argparse

import torch

from grpo_edge import GRPOTrainer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny budget, to check the set-up")
    ap.add_argument("--save-dir", default="runs/simple_text_generation")
    args = ap.parse_args()
    overrides = ["task.max_operand=99"]
    if args.quick:
        overrides += ["training.steps=3", "training.warm_start_epochs=1", "model.d_model=32", "model.n_layer=1",
                      "task.eval_size=50", "task.max_operand=9"]
    trainer = GRPOTrainer(config="configs/arithmetic.yaml", save_dir=args.save_dir, overrides=overrides)
    summary = trainer.train()
    ws = summary.get("warm_start", {})
    print("held-out exact match: untrained %.3f -> warm start %.3f -> GRPO %.3f" % (
        ws.get("before", {}).get("exact_match", float("nan")), ws.get("after", {}).get("exact_match", float("nan")),
        summary["final_exact_match"]))
    task = trainer.task
    samples = task.problems("test")[:5]
    completions = task.greedy_completions(trainer.policy, [p[0] for p in samples])
    for (prompt, answer), got in zip(samples, completions):
        print("%s%-5s (reference %s)" % (prompt, got, answer))

if __name__ == "__main__":
    main()
