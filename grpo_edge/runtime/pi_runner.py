#!/usr/bin/env python3
"""Standalone runner for a grpo-edge ONNX model: needs only onnxruntime and numpy (no torch, no grpo-edge).

grpo_edge/runtime/pi_runner.py, copied unchanged into a deploy folder as runner.py (next to ort_session.py). Usage on the device (or on the host, as the simulation):

    python3 runner.py --input sample_inputs.npy               # prints outputs and argmax actions
    echo "0.01 0.02 -0.03 0.04" | python3 runner.py --input - # one sample per line, from stdin
    python3 runner.py --bench --runs 2000                     # median latency (+ power on a Pi 5)
    python3 runner.py --model model.int8.onnx --reference ... # ORT graph optimizations off

Text models (a tokenizer.json in this folder; the decoding loop is in textgen.py):

    python3 runner.py --text "12+7="                          # prints the greedy completion: 19
    python3 runner.py --prompts prompts.txt --json            # one prompt per line (- for stdin)
    python3 runner.py --bench --runs 200                      # per-token and per-completion median latency

The default model is the one deploy.json marks as chosen (fp32 or int8, picked by measurement).
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    from .ort_session import ort_session
except ImportError:                # a loose file in a deploy folder
    from ort_session import ort_session


class Runner(object):
    """One onnxruntime session; run(x) takes a numpy batch (or {name: array}) and returns the outputs."""

    def __init__(self, model_path, reference=False, threads=1):
        self.path = model_path
        self.session = ort_session(model_path, reference=reference, threads=threads)
        self.inputs = self.session.get_inputs()
        self.output_names = [o.name for o in self.session.get_outputs()]

    def feed(self, x):
        if isinstance(x, dict):
            return x
        return {self.inputs[0].name: x}

    def run(self, x):
        return self.session.run(None, self.feed(x))

    def example(self):
        """A zero batch of one sample, for benchmarking."""
        feed = {}
        for i in self.inputs:
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
            dtype = np.int64 if "int64" in i.type else np.float32
            feed[i.name] = np.zeros(shape, dtype=dtype)
        return feed


def read_inputs(src, runner):
    """A batch from a .npy / .npz file, or from stdin: one sample per line, numbers separated by spaces,
    commas or as a JSON list."""
    if src == "-":
        rows = []
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            vals = json.loads(line) if line.startswith("[") else [float(v) for v in line.replace(",", " ").split()]
            rows.append(np.asarray(vals, dtype=np.float32).ravel())
        shape = [d if isinstance(d, int) and d > 0 else -1 for d in runner.inputs[0].shape[1:]]
        return np.stack(rows).reshape([len(rows)] + shape)
    data = np.load(src, allow_pickle=False)
    if isinstance(data, np.ndarray):
        return data
    keys = [k for k in data.files if not k.startswith("__")]
    names = [i.name for i in runner.inputs]
    if all(n in keys for n in names):
        return {n: data[n] for n in names}
    return data[keys[0]]


def pmic_power_w():
    """Raspberry Pi 5 board power from `vcgencmd pmic_read_adc` (sum of rail volts x amps), else None."""
    exe = shutil.which("vcgencmd")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "pmic_read_adc"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True, timeout=2).stdout
    except Exception:
        return None
    amps, volts = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 2 or "=" not in parts[1]:
            continue
        name, value = parts[0], parts[1].split("=")[1].rstrip("AV")
        try:
            value = float(value)
        except ValueError:
            continue
        if name.endswith("_A"):
            amps[name[:-2]] = value
        elif name.endswith("_V"):
            volts[name[:-2]] = value
    rails = [r for r in amps if r in volts]
    return sum(amps[r] * volts[r] for r in rails) if rails else None


def device_name():
    try:
        with open("/proc/device-tree/model") as f:
            return f.read().strip("\x00\n ")
    except OSError:
        return ""


def bench(runner, runs=1000, warmup=100, power=True):
    """Median / p90 latency of single-sample calls; on a Pi 5 also mean board power idle and busy."""
    feed = runner.example()
    out = timed(lambda: runner.session.run(None, feed), runs, warmup, power)
    out["model"] = os.path.basename(runner.path)
    return out


def text_bench(gen, model_path, prompt, runs=100, warmup=10, power=True):
    """Batch-1 greedy completions of `prompt`: median seconds per completion and per token (model call)."""
    ids = gen.encode([prompt])
    gen.step_times, gen.timing = [], True
    try:
        out = timed(lambda: gen.generate(ids), runs, warmup, power)
    finally:
        gen.timing = False
    steps = np.asarray(gen.step_times[len(gen.step_times) * warmup // (runs + warmup):])   # timed runs only
    row = gen.generate(ids)[0]
    out.update(model=os.path.basename(model_path), prompt=prompt, completion=gen.tokenizer.decode(row),
               per_completion_median_s=out["latency_median_s"], per_token_median_s=float(np.median(steps)),
               model_calls_per_completion=int(len(steps) // runs),
               new_tokens=int(np.sum(np.cumsum(row == 2) - (row == 2) == 0)))   # up to and with EOS
    return out


def timed(call, runs, warmup, power=True):
    """Warm-up, then `runs` timed calls: median / p90 / min seconds (+ Pi 5 board power while busy)."""
    for _ in range(warmup):
        call()
    samples, stop = [], threading.Event()
    sampler = None
    idle_w = pmic_power_w() if power else None
    if idle_w is not None:
        def sample():
            while not stop.is_set():
                w = pmic_power_w()
                if w is not None:
                    samples.append(w)
                stop.wait(0.2)
        sampler = threading.Thread(target=sample)
        sampler.start()
    times = np.empty(runs)
    try:
        for i in range(runs):
            t0 = time.perf_counter()
            call()
            times[i] = time.perf_counter() - t0
    finally:
        stop.set()
        if sampler is not None:
            sampler.join()
    model = device_name()
    on_pi = "Raspberry Pi" in model
    out = {"runs": runs, "warmup": warmup,
           "latency_median_s": float(np.median(times)), "latency_p90_s": float(np.percentile(times, 90)),
           "latency_min_s": float(times.min()), "how": "measured-device" if on_pi else "measured-host",
           "machine": model or "%s %s" % (platform.system(), platform.machine()),
           "onnxruntime": __import__("onnxruntime").__version__}
    if idle_w is not None and samples:
        busy = float(np.mean(samples))
        out["power"] = {"idle_w": idle_w, "busy_w": busy, "samples": len(samples),
                        "energy_per_inference_j": busy * out["latency_median_s"],
                        "method": "vcgencmd pmic_read_adc: sum of rail V x A; energy = busy power x median latency"}
    return out


def choose(runs, warmup, threads):
    """Re-pick fp32 vs int8 by measuring both HERE; int8 only if the host check allowed it (metric kept)."""
    cfg_path = os.path.join(HERE, "deploy.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    lat, text = {}, text_config()
    for name in ("model.onnx", "model.int8.onnx"):
        path = os.path.join(HERE, name)
        if text is None:
            lat[name] = bench(Runner(path, threads=threads), runs, warmup, power=False)
        else:
            lat[name] = text_bench(text_generator(path, text, threads=threads), path, text["example_prompt"],
                                   runs, warmup, power=False)
    fast8 = lat["model.int8.onnx"]["latency_median_s"] < lat["model.onnx"]["latency_median_s"]
    cfg["chosen"] = "model.int8.onnx" if (cfg.get("int8_allowed") and fast8) else "model.onnx"
    cfg["why"] = "runner.py --choose on %s: int8 %.3g s vs fp32 %.3g s median; int8 allowed: %s" % (
        lat["model.onnx"]["machine"], lat["model.int8.onnx"]["latency_median_s"],
        lat["model.onnx"]["latency_median_s"], bool(cfg.get("int8_allowed")))
    cfg["device_bench"] = lat
    tmp = cfg_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2)
    os.replace(tmp, cfg_path)
    return {"chosen": cfg["chosen"], "why": cfg["why"]}


def text_config():
    """tokenizer.json's settings when this folder holds a text model (decoded by textgen.py), else None."""
    if not os.path.exists(os.path.join(HERE, "tokenizer.json")):
        return None
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import textgen
    return textgen.load_text_config(HERE)


def text_generator(path, cfg, reference=False, threads=1):
    import textgen
    missing = [f for f in textgen.model_files(path, cfg["arch"]).values() if not os.path.exists(f)]
    if missing:
        sys.exit("runner: model file(s) not found: %s" % ", ".join(missing))
    return textgen.TextGenerator(cfg, textgen.ort_functions(path, cfg, reference=reference, threads=threads))


def run_text(args, path, cfg):
    """--text / --prompts / --bench for a text model; returns the result dict."""
    gen = text_generator(path, cfg, reference=args.reference, threads=args.threads)
    prompts = list(args.text or [])
    if args.prompts:
        f = sys.stdin if args.prompts == "-" else open(args.prompts, encoding="utf-8")
        with f:
            prompts += [line.rstrip("\r\n") for line in f if line.strip()]
    result = {}
    if prompts:
        try:
            result["completions"] = gen.complete(prompts, batch_size=args.batch_size)
        except ValueError as e:
            sys.exit("runner: %s" % e)
        result["prompts"] = prompts
    if args.bench:
        result["bench"] = text_bench(gen, path, prompts[0] if prompts else cfg["example_prompt"], args.runs,
                                     args.warmup)
    return result


def chosen_model():
    cfg = os.path.join(HERE, "deploy.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            return os.path.join(HERE, json.load(f).get("chosen", "model.onnx"))
    return os.path.join(HERE, "model.onnx")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run a grpo-edge ONNX model with onnxruntime.")
    ap.add_argument("--model", default=None, help="ONNX file (default: the one deploy.json chose)")
    ap.add_argument("--input", default=None, help=".npy/.npz batch, or - for stdin (one sample per line)")
    ap.add_argument("--out", default=None, help="save the first output to this .npy file")
    ap.add_argument("--bench", action="store_true", help="measure latency (warm-up, many runs, median)")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--reference", action="store_true", help="ORT graph optimizations off")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--choose", action="store_true",
                    help="on the device: bench fp32 and int8, keep the faster one if deploy.json allows int8")
    ap.add_argument("--text", action="append", help="text models: a prompt to complete (repeatable)")
    ap.add_argument("--prompts", default=None, help="text models: file with one prompt per line, - for stdin")
    ap.add_argument("--batch-size", type=int, default=64, help="text models: prompts decoded together")
    args = ap.parse_args(argv)
    if args.choose:
        result = choose(args.runs, args.warmup, args.threads)
        print(json.dumps(result) if args.json else "chosen: %s (%s)" % (result["chosen"], result["why"]))
        return 0
    path = args.model or chosen_model()
    if not os.path.isabs(path) and not os.path.exists(os.path.join(os.getcwd(), path)):
        path = os.path.join(HERE, path)
    text = text_config()
    if text is not None:
        result = run_text(args, path, text)
        if args.json:
            print(json.dumps(result))
        else:
            for c in result.get("completions", []):
                print(c)
            if "bench" in result:
                print("bench: %s" % json.dumps(result["bench"]))
        return 0
    if not os.path.exists(path):
        sys.exit("runner: model not found: %s" % path)
    runner = Runner(path, reference=args.reference, threads=args.threads)
    result = {}
    if args.input:
        outs = runner.run(read_inputs(args.input, runner))
        first = outs[0]
        if args.out:
            np.save(args.out, first)
        result["outputs"] = first.tolist() if first.size <= 4096 else "saved to %s" % args.out
        if runner.output_names[:1] == ["action"]:          # a continuous policy: the bounded actions
            result["actions"] = first.tolist() if first.size <= 4096 else "saved to %s" % args.out
        elif first.ndim >= 2 and first.shape[-1] > 1:
            result["actions"] = first.argmax(-1).tolist()
    if args.bench:
        result["bench"] = bench(runner, args.runs, args.warmup)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print("%s: %s" % (k, json.dumps(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
