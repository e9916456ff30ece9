#!/usr/bin/env python3
"""Load a TensorRT engine, check it against the checkpoint's outputs, time it, sample power.

    python3 run_engine.py                         # every graph of deploy.json at its precision
    python3 run_engine.py --iters 1000 --no-tegrastats
    python3 run_engine.py --text "12+7="          # a text model: greedy completion through the engines
    python3 run_engine.py --prompts prompts.txt --check   # vs expected_completions.json (the checkpoint's)

Buffers and the CUDA stream come from torch (installed anyway for training on the device: JetPack 4.6's
NVIDIA wheel is torch 1.10; JetPack 6 ships torch 2.x); no pycuda / cuda-python needed.
TensorRT APIs: 8.x uses bindings (get_binding_*, set_binding_shape, execute_async_v2); 10.x uses named
I/O tensors (get_tensor_*, set_input_shape, set_tensor_address, execute_async_v3). Python 3.6+.
Writes results.<graph>.<precision>.json next to deploy.json.
grpo_edge/runtime/run_engine.py, copied unchanged by `grpo-edge deploy`, next to tegrastats.py (power
sampling); no grpo_edge import.
THIS FILE IS NOT TESTED AGAINST TENSORRT where it was written (TensorRT cannot be installed there).
"""
import argparse
import json
import os
import sys
import time

try:
    from .tegrastats import TegrastatsSampler, available as tegrastats_available
except ImportError:                # a loose file in a deploy folder, next to tegrastats.py
    from tegrastats import TegrastatsSampler, available as tegrastats_available


def _torch_dtype(torch, trt, dt):
    table = {trt.float32: torch.float32, trt.float16: torch.float16, trt.int32: torch.int32, trt.int8: torch.int8,
             trt.bool: torch.bool}
    if hasattr(trt, "int64"):
        table[trt.int64] = torch.int64
    return table[dt]


class Engine(object):
    """One engine + execution context; __call__(dict of numpy arrays) -> dict of numpy arrays."""

    def __init__(self, path):
        import tensorrt as trt
        import torch
        self.trt, self.torch = trt, torch
        logger = trt.Logger(trt.Logger.WARNING)
        with open(path, "rb") as f:
            self.engine = trt.Runtime(logger).deserialize_cuda_engine(f.read())
        if self.engine is None:
            raise SystemExit("cannot load %s (built by another TensorRT version or device?)" % path)
        self.context = self.engine.create_execution_context()
        self.v10 = hasattr(self.engine, "num_io_tensors")
        if self.v10:
            names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
            self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
            self.outputs = [n for n in names if n not in self.inputs]
        else:
            names = [self.engine.get_binding_name(i) for i in range(self.engine.num_bindings)]
            self.inputs = [n for i, n in enumerate(names) if self.engine.binding_is_input(i)]
            self.outputs = [n for n in names if n not in self.inputs]
        self.names = names
        self.stream = torch.cuda.Stream()
        self.buffers = {}

    def _dtype(self, name):
        e = self.engine
        dt = e.get_tensor_dtype(name) if self.v10 else e.get_binding_dtype(e.get_binding_index(name))
        return _torch_dtype(self.torch, self.trt, dt)

    def prepare(self, feed):
        """Copy inputs to the GPU, set shapes, allocate outputs; later calls to run() reuse the buffers."""
        torch = self.torch
        for name in self.inputs:
            self.buffers[name] = torch.as_tensor(feed[name]).to(device="cuda", dtype=self._dtype(name)).contiguous()
            shape = tuple(self.buffers[name].shape)
            if self.v10:
                self.context.set_input_shape(name, shape)
            else:
                self.context.set_binding_shape(self.engine.get_binding_index(name), shape)
        for name in self.outputs:
            shape = (self.context.get_tensor_shape(name) if self.v10
                     else self.context.get_binding_shape(self.engine.get_binding_index(name)))
            self.buffers[name] = torch.empty(tuple(shape), dtype=self._dtype(name), device="cuda")
        if self.v10:
            for name in self.names:
                self.context.set_tensor_address(name, self.buffers[name].data_ptr())
        self.bindings = [self.buffers[n].data_ptr() for n in self.names]

    def run(self):
        if self.v10:
            ok = self.context.execute_async_v3(self.stream.cuda_stream)
        else:
            ok = self.context.execute_async_v2(self.bindings, self.stream.cuda_stream)
        if not ok:
            raise SystemExit("TensorRT execution failed")

    def __call__(self, feed):
        self.prepare(feed)
        self.run()
        self.stream.synchronize()
        return {n: self.buffers[n].float().cpu().numpy() for n in self.outputs}


def benchmark(engine, feed, iters=500, warmup=50, tegrastats=True):
    """Latency of one engine run (enqueue + sync, inputs already on the GPU): median / p90 / mean seconds."""
    engine.prepare(feed)
    for _ in range(warmup):
        engine.run()
    engine.stream.synchronize()
    times = []
    sampler = TegrastatsSampler(100).start() if (tegrastats and tegrastats_available()) else None
    try:
        t_start = time.perf_counter()
        while len(times) < iters or (sampler and time.perf_counter() - t_start < 1.0):
            t0 = time.perf_counter()
            engine.run()
            engine.stream.synchronize()
            times.append(time.perf_counter() - t0)
    finally:
        if sampler:
            sampler.stop()
    times.sort()
    out = {"iters": len(times), "median_s": times[len(times) // 2], "p90_s": times[int(len(times) * 0.9)],
           "mean_s": sum(times) / len(times)}
    if sampler:
        power = sampler.summary()
        out.update(power_samples=power["samples"], power_rail=power["input_rail"])
        if power.get("input_mw_mean") is not None:
            out.update(power_mw_mean=power["input_mw_mean"], energy_j=power["input_mw_mean"] / 1000.0 * out["median_s"])
    return out


def check(engine, sample):
    """Run the engine on the saved check batch; (max |engine - reference| per output, the outputs)."""
    import numpy as np
    got = engine({k[3:]: sample[k] for k in sample.files if k.startswith("in:")})
    return {n: float(np.max(np.abs(got[n].astype(np.float64) - sample["ref:" + n].astype(np.float64))))
            for n in engine.outputs if ("ref:" + n) in sample.files}, got


def actions(outputs, n=8):
    """The policy's actions on the first n check inputs: a continuous policy's output `action` as it is,
    the argmax of a discrete policy's `logits`; None for other models."""
    if "action" in outputs:
        return outputs["action"][:n].tolist()
    if "logits" in outputs and outputs["logits"].ndim == 2:
        return outputs["logits"][:n].argmax(-1).tolist()
    return None


def text_functions(cfg, folder, precision, engine_cls=None):
    """{part: fn(feed) -> [outputs in the ONNX model's order]} over the kit's engines: the functions the
    decode loop (textgen.TextGenerator, shipped next to this file) calls at each step."""
    engine_cls = engine_cls or Engine
    fns = {}
    for g in cfg["graphs"]:
        eng = engine_cls(os.path.join(folder, g["engine"].replace("{precision}", precision)))

        def run(feed, eng=eng, order=g["outputs"]):
            got = eng(dict((k, v) for k, v in feed.items() if k in eng.inputs))
            return [got[n] for n in order]
        fns[g["name"]] = run
    return fns


def run_text(a, cfg, folder, precision, engine_cls=None):
    """--text / --prompts: greedy completions through the engines; --check: the share equal to
    expected_completions.json (the checkpoint's own). Prints JSON; exit 1 if --check finds fewer than
    --min-agreement."""
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import textgen
    gen = textgen.TextGenerator(textgen.load_text_config(folder), text_functions(cfg, folder, precision, engine_cls))
    prompts = list(a.text or [])
    if a.prompts:
        with open(a.prompts, encoding="utf-8") as f:
            prompts += [line.rstrip("\r\n") for line in f if line.strip()]
    res = {"precision": precision, "prompts": prompts, "completions": gen.complete(prompts)}
    code = 0
    if a.check:
        with open(os.path.join(folder, "expected_completions.json"), encoding="utf-8") as f:
            golden = json.load(f)
        exp = dict(zip(golden["prompts"], golden["completions"]))
        same = [exp[p] == c for p, c in zip(prompts, res["completions"]) if p in exp]
        res["agreement_with_checkpoint"] = sum(same) / float(max(len(same), 1))
        code = 0 if same and res["agreement_with_checkpoint"] >= a.min_agreement else 1
    print(json.dumps(res, indent=2, ensure_ascii=False))
    return code


def main(argv=None, engine_cls=None):
    import numpy as np
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="deploy.json")
    ap.add_argument("--precision", choices=["fp32", "fp16", "int8"], default=None)
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--no-tegrastats", action="store_true")
    ap.add_argument("--text", action="append", help="a text model: a prompt to complete (repeatable)")
    ap.add_argument("--prompts", default=None, help="a text model: a file with one prompt per line")
    ap.add_argument("--check", action="store_true", help="a text model: compare with expected_completions.json")
    ap.add_argument("--min-agreement", type=float, default=0.9, help="--check: the share that must match")
    a = ap.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(a.config))
    with open(a.config) as f:
        cfg = json.load(f)
    precision = a.precision or cfg["precision"]
    if a.text or a.prompts:
        if not cfg.get("text"):
            raise SystemExit("run_engine: --text / --prompts need a text model's kit (this one has no tokenizer.json)")
        return run_text(a, cfg, folder, precision, engine_cls)
    for g in cfg["graphs"]:
        path = os.path.join(folder, g["engine"].replace("{precision}", precision))
        engine = Engine(path)
        sample = np.load(os.path.join(folder, g["sample"]))
        errors, got = check(engine, sample)
        feed = {k[6:]: sample[k] for k in sample.files if k.startswith("bench:")}
        bench = benchmark(engine, feed, a.iters, tegrastats=not a.no_tegrastats)
        res = {"graph": g["name"], "precision": precision, "engine": path, "max_abs_err": errors,
               "actions": actions(got), "latency": bench}
        out = os.path.join(folder, "results.%s.%s.json" % (g["name"], precision))
        with open(out, "w") as f:
            json.dump(res, f, indent=2)
        print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
