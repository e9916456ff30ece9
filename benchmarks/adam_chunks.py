"""Peak memory of one Adam step with and without chunked updates (grpo_edge/core/adam.py CHUNK_NUMEL).

    .venv/bin/python benchmarks/adam_chunks.py            # ~15 s: the 85M micro-gpt's parameter shapes, CPU

Each variant runs in its own interpreter (ru_maxrss is a per-process high-water mark): the moments are
created by a first step, then one more step is measured. Prints peak RSS, step time and a checksum of the
weights (the chunked update is the same arithmetic, so the checksums match).
"""
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(chunk):
    import torch
    sys.path.insert(0, str(ROOT))
    from grpo_edge.core import adam
    adam.CHUNK_NUMEL = chunk
    torch.manual_seed(0)
    shapes = [(64, 768), (128, 768)]               # micro-gpt d768, 12 layers: embeddings, then each block
    for _ in range(12):
        shapes += [(768,), (768,), (2304, 768), (2304,), (768, 768), (768,), (768,), (768,), (3072, 768), (3072,),
                   (768, 3072), (768,)]
    ps = [torch.randn(*s) for s in shapes]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = adam.Adam(ps, lr=1e-3)
    opt.step()
    t0 = time.perf_counter()
    opt.step()
    dt = time.perf_counter() - t0
    n = sum(p.numel() for p in ps)
    print(json.dumps({"chunk_numel": chunk, "parameters": n, "weights_mb": n * 4 / 2 ** 20,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "step_s": dt,
                      "checksum": float(sum(p.double().sum() for p in ps))}))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        return worker(int(sys.argv[2]))
    rows = []
    for chunk in (1 << 40, 1 << 22):
        out = subprocess.run([sys.executable, __file__, "--worker", str(chunk)], stdout=subprocess.PIPE, check=True)
        rows.append(json.loads(out.stdout.decode().strip().splitlines()[-1]))
    print("| update | peak RSS MB | step s | weights checksum |")
    print("|---|---|---|---|")
    for r, name in zip(rows, ("all tensors at once", "chunks of 4M elements")):
        print("| %s | %.0f | %.3f | %.6f |" % (name, r["peak_rss_mb"], r["step_s"], r["checksum"]))
    print("peak saved: %.0f MB (weights: %.0f MB)" % (rows[0]["peak_rss_mb"] - rows[1]["peak_rss_mb"], rows[0]["weights_mb"]))


if __name__ == "__main__":
    main()
