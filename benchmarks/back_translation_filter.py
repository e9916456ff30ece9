"""Back-translation's default on a small parallel set: its time, and how many synthetic pairs are right (issue 31).

    .venv/bin/python benchmarks/back_translation_filter.py                  # ~1-2 min on 2 shared cores
    .venv/bin/python benchmarks/back_translation_filter.py --steps 400 --out /tmp/bt.json

300 real zh -> en numeral pairs drawn from 0..9999 (seed 0), 700 English lines of other numbers plus two
lines no model here can translate ("hello world", "good morning"), the defaults of
BilingualPairLoader(augment=True) (reverse and forward tiny-transformers, d_model 64, --steps optimizer
steps each, 1 thread). Every kept pair is checked against the numeral generator (grpo_edge/data/zh_numbers.py):
a kept pair is wrong when its generated Chinese is not the number its English line names. Writes
benchmarks/results/back_translation_filter.json (or --out).
"""
import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=800, help="optimizer steps of each model (BilingualPairLoader bt_steps)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "back_translation_filter.json"))
    a = ap.parse_args()
    import torch
    from grpo_edge.data.bilingual import BilingualPairLoader
    from grpo_edge.data.zh_numbers import int_to_en, int_to_zh
    torch.set_num_threads(1)
    nums = random.Random(0).sample(range(10000), 1000)
    junk = ["hello world", "good morning"]
    with tempfile.TemporaryDirectory() as d:
        pairs, mono = Path(d) / "pairs.tsv", Path(d) / "mono.txt"
        pairs.write_text("".join("%s\t%s\n" % (int_to_zh(i), int_to_en(i)) for i in nums[:300]), encoding="utf-8")
        mono.write_text("\n".join([int_to_en(i) for i in nums[300:]] + junk) + "\n", encoding="utf-8")
        t0 = time.time()
        loader = BilingualPairLoader(data_path=str(pairs), augment=True, mono_path=str(mono), bt_steps=a.steps)
        wall = time.time() - t0
    en2zh = dict((int_to_en(i), int_to_zh(i)) for i in range(10000))
    wrong = [(s, t) for s, t in loader.synthetic_pairs if en2zh.get(t) != s]
    res = {"steps": a.steps, "wall_s": round(wall, 1), "stats": loader.augment_stats, "kept": len(loader.synthetic_pairs),
           "kept_wrong": len(wrong), "wrong_examples": wrong[:10],
           "junk_kept": [t for _, t in loader.synthetic_pairs if t in junk],
           "machine": "2 shared CPU cores, torch %s, 1 thread" % torch.__version__}
    print(json.dumps(res, indent=1, ensure_ascii=False))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
