"""Issue 38: hundreds of models written many ways (grpo_edge/targets/esp32/modelgen.py) through the ESP32
deploy the user's way (fp32 ONNX + calibration), each held to the contract: deployed bit-exact (host and
rv32, every op within 1 LSB of onnxruntime, decisions at the gate), or refused in one line.

    .venv/bin/python benchmarks/esp32_modelgen.py --seeds 0:300 [--target esp32c3] \
        [--json benchmarks/results/esp32_modelgen.json] [--work /tmp/modelgen]

Each finished model is written to the JSON at once (atomically), and a second run skips the seeds it holds,
so the benchmark can be stopped and resumed. At the end it prints the tally: deployed, refused (by reason),
below_gate (deployed with exit 0 under the gate), wrong (deployed, not bit-exact or off onnxruntime) and
traceback; the goal is 0 of the last three. About 2 s a model on this machine (rv32 included, no callgrind).
"""
import argparse
import collections
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def reason_key(result) -> str:
    """A refusal's reason with its node names and numbers taken out, so that alike refusals count together."""
    text = result.get("reason", "").splitlines()
    head = text[0] if text else ""
    if len(text) > 1:                        # several ops: the op lines say what
        head = "; ".join(sorted({re.sub(r" node '[^']*'", "", ln.strip()) for ln in text[1:]}))
    head = re.sub(r"'[^']*'", "'...'", head)
    return re.sub(r"\d+(\.\d+)?", "N", head)[:200]


def tally(runs) -> dict:
    outcomes = collections.Counter(r["outcome"] for r in runs)
    refused = collections.Counter(reason_key(r) for r in runs if r["outcome"] == "refused")
    by_family = collections.defaultdict(collections.Counter)
    for r in runs:
        by_family[r["spec"]["family"]][r["outcome"]] += 1
    return {"models": len(runs), "outcomes": dict(outcomes), "refused_by_reason": dict(refused.most_common()),
            "by_family": {k: dict(v) for k, v in sorted(by_family.items())},
            "deployed_but_wrong": outcomes.get("wrong", 0) + outcomes.get("below_gate", 0),
            "tracebacks": outcomes.get("traceback", 0)}


def write(path, runs):
    from grpo_edge.report import atomic_write_bytes
    doc = {"benchmark": "esp32_modelgen", "tally": tally(runs), "runs": runs}
    atomic_write_bytes(path, json.dumps(doc, indent=1).encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0:300", help="a:b, the seeds a .. b-1")
    ap.add_argument("--target", default="esp32c3")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "esp32_modelgen.json"))
    ap.add_argument("--work", default="/tmp/modelgen")
    args = ap.parse_args()
    from grpo_edge.targets.esp32 import modelgen
    a, b = (int(v) for v in args.seeds.split(":"))
    path = Path(args.json)
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    done = {r["seed"] for r in runs if r.get("target") == args.target}
    for seed in range(a, b):
        if seed in done:
            continue
        spec, work = modelgen.make_spec(seed), Path(args.work) / str(seed)
        t0 = time.time()
        result = modelgen.check(spec, work, target=args.target)
        result.update(seed=seed, target=args.target, spec=spec, seconds=round(time.time() - t0, 2))
        runs.append(result)
        write(path, runs)
        print("%4d %-9s %-11s opset %d %-7s %-8s %-10s %5.1fs %s" % (
            seed, spec["family"], spec["exporter"], spec["opset"], spec["batch"], spec["naming"], result["outcome"],
            result["seconds"], result.get("reason", "").splitlines()[0][:100] if result.get("reason") else ""),
            flush=True)
        if result["outcome"] != "traceback":
            shutil.rmtree(str(work), ignore_errors=True)
    print(json.dumps(tally([r for r in runs if r.get("target") == args.target]), indent=1))
    os._exit(0)                              # skip torch's slow interpreter teardown


if __name__ == "__main__":
    main()
