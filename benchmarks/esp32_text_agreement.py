"""Agreement of the ESP32 text path's integer arithmetic with the fp32 checkpoint, for several checkpoints.

For each checkpoint: the integer model deploy builds (same calibration), greedy completions of the task's
held-out prompts by the NumPy integer reference (bit-exact with the generated C, see the deploy reports)
and by the torch checkpoint: share identical, and the exact match of each.

    PYTHONPATH=$PWD python benchmarks/esp32_text_agreement.py runs/arith_s0/best.pt runs/arith_s1/best.pt ...
"""
import argparse
import json
import sys


def agreement(path, n_eval=1000, n_calib=512):
    import numpy as np
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.tasks import task_from_state
    from grpo_edge.targets.esp32.text_model import run_prompts, textir2int
    from grpo_edge.targets.esp32.textir import checkpoint2textir
    model, state = load_policy(path)
    task = task_from_state(state)
    ir = checkpoint2textir((model, state))
    q = textir2int(ir, [p for p, _ in task.train_problems[:n_calib]])
    problems = task.test_problems[:n_eval]
    prompts, refs = [p for p, _ in problems], [r for _, r in problems]
    fp = task.greedy_completions(model, prompts)
    it = [r["answer"] for r in run_prompts(q, prompts)]
    return {"checkpoint": str(path), "task": state.get("task"), "arch": ir.arch, "n": len(prompts),
            "identical": float(np.mean([a == b for a, b in zip(fp, it)])),
            "exact_match_fp32": float(np.mean([a == b for a, b in zip(fp, refs)])),
            "exact_match_int": float(np.mean([a == b for a, b in zip(it, refs)]))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    for p in a.checkpoints:
        r = agreement(p)
        rows.append(r)
        print("%(checkpoint)s %(task)s n=%(n)d identical %(identical).4f exact match fp32 %(exact_match_fp32).4f "
              "int %(exact_match_int).4f" % r, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
