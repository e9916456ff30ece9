"""Calibration sets for text models, recorded from greedy decoding: the inputs the runtime really feeds.

    info = checkpoint2decode_calibration("runs/arith/best.pt", "calib.npz", n=512)
    # micro-gpt: calib.npz; tiny-transformer: calib.encoder.npz + calib.decoder_step.npz

A text model's runtime function is a decode step whose inputs change shape from step to step (the KV
cache grows: past_keys (L, 1, H, T_past, hd); the decoder prefix grows: tgt_prefix (1, T)). We decode
task prompts greedily one prompt at a time (batch 1) and record every step's feed. Such a "feed set"
is stored in one .npz with one array per input name, zero-padded to the largest shape and stacked on a
new leading sample axis, plus `__shape__<name>` (n, ndim) int64 with each sample's true shape and
`__meta__` (JSON: how it was made). `load_feeds` gives back the exact per-step feeds; onnx2int8 reads
these files and hands the feeds to onnxruntime's calibrator one shape group at a time.
"""
import io
import json
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError
from grpo_edge.report import atomic_write_bytes

SHAPE_PREFIX = "__shape__"


def text_config(state: dict) -> dict:
    """Runner settings of a text checkpoint (tokenizer.json in a deploy folder): arch, chars, lengths, cache."""
    meta, mc, arch = state.get("task_meta") or {}, state["model_config"], state["arch"]
    tok = meta.get("tokenizer") or {}
    if arch not in ("micro-gpt", "tiny-transformer") or tok.get("type") != "char":
        raise ExportError("checkpoint (%s) is not a text model with a char tokenizer in task_meta" % arch)
    cfg = {"arch": arch, "type": "char", "chars": tok["chars"], "pad_id": 0, "bos_id": 1, "eos_id": 2,
           "input_len": int(meta["input_shape"][0]), "padding": meta.get("padding", "left"),
           "max_new_tokens": int(meta["max_new_tokens"]), "max_len": int(mc["max_len"]),
           "task": state.get("task")}
    if isinstance(meta.get("prompt_end"), str):     # what ends a program the runner reads (task pyfix)
        cfg["prompt_end"] = meta["prompt_end"]
        cfg["output"] = meta.get("output", "program")   # "edit": the model writes the one line it changes
    if arch == "micro-gpt":
        cfg["cache"] = [int(mc["n_layer"]), int(mc["n_head"]), int(mc["d_model"]) // int(mc["n_head"])]
    return cfg


def torch_functions(model) -> dict:
    """{part: fn(numpy feed) -> [numpy outputs]} over the model's export_spec modules (what ONNX runs)."""
    import torch
    specs = model.export_spec(batch_size=1)
    specs = specs if isinstance(specs, dict) else {"model": specs}
    fns = {}
    for part, spec in specs.items():
        def run(feed, spec=spec):
            with torch.no_grad():
                out = spec.module(*[torch.as_tensor(feed[n]) for n in spec.input_names])
            out = out if isinstance(out, (tuple, list)) else (out,)
            return [o.numpy() for o in out]
        fns[part] = run
    return fns


def record_decoding(cfg: dict, functions: dict, prompts, n: int) -> dict:
    """Greedy-decode prompts at batch 1 until every part has >= n step feeds: {part: [feed, ...]} (n each).

    The encoder of a seq2seq model runs once per prompt, so it gets its own n prompts (no decoding needed).
    """
    from grpo_edge.runtime.textgen import TextGenerator
    feeds = {}

    def record(part, feed):
        feeds.setdefault(part, []).append(dict((k, np.array(v, copy=True)) for k, v in feed.items()))
    gen = TextGenerator(cfg, functions, record=record)
    main = "model" if cfg["arch"] == "micro-gpt" else "decoder_step"
    i = 0
    while len(feeds.get(main, ())) < n and i < max(len(prompts), 1) * 4:
        gen.generate(gen.encode([prompts[i % len(prompts)]]))
        i += 1
    if cfg["arch"] == "tiny-transformer":
        ids = gen.encode([prompts[j % len(prompts)] for j in range(n)])
        feeds["encoder"] = [{"src": ids[j:j + 1]} for j in range(n)]
    return dict((k, v[:n]) for k, v in feeds.items())


def save_feeds(feeds, out_path, meta: dict) -> Path:
    """Write a list of feed dicts (same input names, shapes may vary) as one padded .npz (see module doc)."""
    out_path = Path(out_path)
    if out_path.suffix != ".npz":
        raise ExportError("calibration sets are .npz files, got %s" % out_path)
    if not feeds:
        raise ExportError("%s: no feeds recorded" % out_path)
    arrays = {}
    for name in feeds[0]:
        shapes = np.array([f[name].shape for f in feeds], dtype=np.int64)          # (n, ndim)
        padded = np.zeros((len(feeds),) + tuple(shapes.max(0)), dtype=feeds[0][name].dtype)
        for i, f in enumerate(feeds):
            padded[(i,) + tuple(slice(0, d) for d in f[name].shape)] = f[name]
        arrays[name], arrays[SHAPE_PREFIX + name] = padded, shapes
    buf = io.BytesIO()
    np.savez_compressed(buf, __meta__=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    atomic_write_bytes(out_path, buf.getvalue())
    return out_path


def is_feeds(loaded) -> bool:
    """True for an opened .npz that save_feeds wrote."""
    return not isinstance(loaded, np.ndarray) and any(k.startswith(SHAPE_PREFIX) for k in loaded.files)


def load_feeds(loaded, path="") -> list:
    """The exact per-step feeds of an opened feeds .npz: [{input name: array}, ...]."""
    names = [k for k in loaded.files if not k.startswith("__")]
    missing = [k for k in names if SHAPE_PREFIX + k not in loaded.files]
    if missing:
        raise ExportError("%s: feed set lacks %s arrays for %s" % (path, SHAPE_PREFIX + "<name>", missing))
    data = dict((k, loaded[k]) for k in names)
    shapes = dict((k, loaded[SHAPE_PREFIX + k]) for k in names)
    n = len(next(iter(data.values())))
    return [dict((k, data[k][(i,) + tuple(slice(0, int(d)) for d in shapes[k][i])]) for k in names)
            for i in range(n)]


def group_feeds(feeds, batch_axes: dict, max_batch: int = 64) -> list:
    """Concatenate feeds of identical shapes along each input's batch axis (fewer, larger runs)."""
    groups = {}
    for f in feeds:
        groups.setdefault(tuple((k, f[k].shape) for k in sorted(f)), []).append(f)
    out = []
    for members in groups.values():
        for i in range(0, len(members), max_batch):
            chunk = members[i:i + max_batch]
            if len(chunk) == 1 or any(batch_axes.get(k) is None for k in chunk[0]):
                out += chunk
            else:
                out.append(dict((k, np.concatenate([m[k] for m in chunk], axis=batch_axes[k])) for k in chunk[0]))
    return out


def part_path(out_path, part: str) -> Path:
    """calib.npz -> calib.npz (single function) or calib.<part>.npz (encoder / decoder_step)."""
    out_path = Path(out_path)
    if part == "model":
        return out_path
    stem = out_path.name[:-4] if out_path.name.endswith(".npz") else out_path.name
    return out_path.with_name("%s.%s.npz" % (stem, part))


def decode_calibration(cfg: dict, functions: dict, task, out_path, n: int, source: str, seed: int = 0) -> dict:
    """Record n step feeds per runtime function from decoding the task's train prompts; save one .npz each."""
    prompts = [p for p, _ in task.train_problems]
    order = np.random.default_rng(seed).permutation(len(prompts))
    feeds = record_decoding(cfg, functions, [prompts[i] for i in order], n)
    files = {}
    for part, fs in feeds.items():
        meta = {"task": task.name, "n": len(fs), "seed": int(seed), "arch": cfg["arch"], "part": part,
                "policy": source, "method": "greedy decoding of shuffled train prompts at batch 1, every step's "
                                             "inputs recorded (grpo_edge.export.decode_calibration)"}
        p = save_feeds(fs, part_path(out_path, part), meta)
        files[part] = {"path": str(p), "n": len(fs), "shapes": sorted(set(str(tuple(v.shape)) for f in fs
                                                                         for v in f.values()))[:4]}
    return {"files": files, "task": task.name, "n": int(n), "policy": source}


def checkpoint2decode_calibration(checkpoint, out_path, n: int = 512, seed: int = 0) -> dict:
    """Feed sets for a text checkpoint, decoded with the torch export functions (no ONNX file needed)."""
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.tasks import task_from_state
    model, state = load_policy(checkpoint)
    model.eval()
    task = task_from_state(state, seed=seed)
    return decode_calibration(text_config(state), torch_functions(model), task, out_path, n,
                              "checkpoint policy (greedy, torch export functions)", seed)
