#!/usr/bin/env python3
"""Standalone runner for a grpo-edge ONNX model: needs only onnxruntime and numpy (no torch, no grpo-edge).

grpo_edge/runtime/pi_runner.py, copied unchanged into a deploy folder as runner.py (next to ort_session.py). Usage on the device (or on the host, as the simulation):

    python3 runner.py --input sample_inputs.npy               # prints outputs and argmax actions
    echo "0.01 0.02 -0.03 0.04" | python3 runner.py --input - # one sample per line, from stdin
    python3 runner.py --bench --runs 2000                     # median latency (+ power on a Pi 5)
    python3 runner.py --model model.int8.onnx --reference ... # ORT graph optimizations off
    python3 runner.py --check                                 # this folder's models vs its golden vectors

Text models (a tokenizer.json in this folder; the decoding loop is in textgen.py):

    python3 runner.py --text "12+7="                          # prints the greedy completion: 19
    python3 runner.py --prompts prompts.txt --json            # one prompt per line (- for stdin)
    python3 runner.py --bench --runs 200                      # per-token and per-completion median latency
    python3 runner.py --program broken.py                     # a code-fixing model (pyfix): prints the fix

The default model is the one deploy.json marks as chosen (fp32 or int8, picked by measurement), or the one
`--choose` picked on this device (device_choice.json: deploy.json and MANIFEST.sha256 stay as shipped).

Inputs: .npy / .npz arrays, or .csv / .txt / stdin with one sample per line. float64 and integer arrays are
cast to float32 (integers up to 2^24, exactly); one sample without the batch axis, or samples flattened to
rows, are reshaped to the model's layout. A bad input or flag is one `error:` line and exit 2.
"""
import argparse
import json
import os
import platform
import re
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
        feed = self.feed(x)
        dims = self.inputs[0].shape
        fixed = dims[0] if dims and isinstance(dims[0], int) and dims[0] > 0 else 0
        n = len(next(iter(feed.values())))
        if not fixed or n == fixed:
            return self.session.run(None, feed)
        # a model exported with a fixed batch (torch.onnx.export's default is 1): whole batches of that size,
        # the last one padded with copies of its last sample, the outputs trimmed back to n
        outs = []
        for i in range(0, n, fixed):
            part = dict((k, v[i:i + fixed]) for k, v in feed.items())
            short = fixed - len(next(iter(part.values())))
            if short:
                part = dict((k, np.concatenate([v, np.repeat(v[-1:], short, axis=0)])) for k, v in part.items())
            outs.append(self.session.run(None, part))
        return [np.concatenate([o[j] for o in outs])[:n] for j in range(len(outs[0]))]

    def example(self):
        """A zero batch of one sample, for benchmarking."""
        feed = {}
        for i in self.inputs:
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
            dtype = np.int64 if "int64" in i.type else np.float32
            feed[i.name] = np.zeros(shape, dtype=dtype)
        return feed


class InputError(Exception):
    """A bad input or flag: main prints one `error:` line and exits 2."""


def read_inputs(src, runner):
    """A batch from a .npy / .npz file, a .csv / .txt file or stdin (one sample per line: numbers separated by
    spaces or commas, or a JSON list), fitted to the model's input (fit_input)."""
    if src == "-":
        x = parse_rows(sys.stdin, "stdin")
    elif not os.path.isfile(src):
        raise InputError("input file not found: %s" % src)
    elif src.lower().endswith((".csv", ".txt")):
        with open(src) as f:
            x = parse_rows(f, src)
    else:
        try:
            data = np.load(src, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - pickled, truncated or not an array file
            raise InputError("%s is not a .npy / .npz array (%s); give .npy, .npz, or .csv / .txt with one sample "
                             "per line" % (src, str(e).splitlines()[0] if str(e) else type(e).__name__))
        if not isinstance(data, np.ndarray):
            keys = [k for k in data.files if not k.startswith("__")]
            names = [i.name for i in runner.inputs]
            if len(names) > 1 and all(n in keys for n in names):
                return {n: data[n] for n in names}
            if not keys:
                raise InputError("%s holds no arrays" % src)
            data = data[names[0] if names[0] in keys else keys[0]]
        x = data
    return fit_input(x, runner.inputs[0], src)


def parse_rows(lines, where):
    """Text rows -> a float64 (N, width) array; a row that is not numbers, or of another width, is an error."""
    rows = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            vals = json.loads(line) if line.startswith("[") else [float(v) for v in line.replace(",", " ").split()]
            row = np.asarray(vals, dtype=np.float64).ravel()
        except (ValueError, TypeError):
            raise InputError("%s line %d: %r is not a list of numbers" % (where, n, line[:40]))
        if rows and row.size != rows[0].size:
            raise InputError("%s line %d has %d values, the first sample %d" % (where, n, row.size, rows[0].size))
        rows.append(row)
    if not rows:
        raise InputError("no input samples in %s" % where)
    return np.stack(rows)


def fit_input(x, spec, src):
    """x as the model's input `spec` takes it: numbers only; float64 / integers cast to float32 (integers up
    to 2^24) or, for token ids, whole numbers to int64; one sample without the batch axis or flattened rows
    reshaped; no NaN / inf; at least one sample."""
    x = np.asarray(x)
    if x.dtype.kind not in "fiub":
        raise InputError("%s holds %s values; the model takes numbers" % (src, x.dtype))
    if "int" in spec.type:                                   # token ids
        if x.dtype.kind == "f" and not (np.isfinite(x).all() and np.array_equal(x, np.round(x))):
            raise InputError("%s: the model takes whole numbers (token ids)" % src)
        x = x.astype(np.int64)
    else:
        if x.dtype.kind in "iu" and x.size and np.abs(x.astype(np.float64)).max() > 2 ** 24:
            raise InputError("%s: integers beyond 2^24 do not fit float32 exactly" % src)
        x = x.astype(np.float32)
    per = [d if isinstance(d, int) and d > 0 else None for d in spec.shape[1:]]
    if per and None not in per:
        size = int(np.prod(per))
        if tuple(x.shape[1:]) == tuple(per):
            pass
        elif x.ndim >= 2 and int(np.prod(x.shape[1:])) == size:
            x = x.reshape([-1] + per)             # samples flattened to rows, or without a unit axis: (N, 8, 8)
        elif x.size == size:
            x = x.reshape([1] + per)              # one sample without the batch axis
        else:
            raise InputError("%s has shape %s; the model takes (N, %s): %d values per sample"
                             % (src, list(x.shape), ", ".join(map(str, per)), size))
    if x.ndim == 0 or len(x) == 0:
        raise InputError("%s holds no samples" % src)
    bad = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(1)) if x.dtype.kind == "f" else []
    if len(bad):
        raise InputError("%s: sample %d has NaN or inf values (%d samples do)" % (src, bad[0], len(bad)))
    return x


def check_range(x, cfg, src):
    """Inputs far outside what the model was trained on (deploy.json's input range, e.g. digits' pixels / 16
    in [0, 1]) are an error that says how to prepare them."""
    rng = (cfg.get("input") or {}).get("range")
    if not rng or isinstance(x, dict):
        return
    lo, hi = float(rng[0]), float(rng[1])
    span = max(hi - lo, 1e-6)
    xmin, xmax = float(np.min(x)), float(np.max(x))
    if xmin < lo - span or xmax > hi + span:
        how = (cfg.get("input") or {}).get("preprocess")
        raise InputError("%s: values reach [%g, %g], but the model was trained on [%g, %g]%s; prepare them so, or "
                         "pass --no-range-check" % (src, xmin, xmax, lo, hi, " (%s)" % how if how else ""))


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


def load_config():
    """deploy.json as shipped ({} when absent)."""
    path = os.path.join(HERE, "deploy.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def choose(runs, warmup, threads):
    """Re-pick fp32 vs int8 by measuring both HERE; int8 only if the host check allowed it (metric kept).
    The pick goes to device_choice.json: deploy.json and MANIFEST.sha256 stay as shipped."""
    cfg, choice = load_config(), {}
    lat, text = {}, text_config()
    for name in ("model.onnx", "model.int8.onnx"):
        path = os.path.join(HERE, name)
        if text is None:
            lat[name] = bench(Runner(path, threads=threads), runs, warmup, power=False)
        else:
            lat[name] = text_bench(text_generator(path, text, threads=threads), path, text["example_prompt"],
                                   runs, warmup, power=False)
    fast8 = lat["model.int8.onnx"]["latency_median_s"] < lat["model.onnx"]["latency_median_s"]
    choice["chosen"] = "model.int8.onnx" if (cfg.get("int8_allowed") and fast8) else "model.onnx"
    choice["why"] = "runner.py --choose on %s: int8 %.3g s vs fp32 %.3g s median; int8 allowed: %s" % (
        lat["model.onnx"]["machine"], lat["model.int8.onnx"]["latency_median_s"],
        lat["model.onnx"]["latency_median_s"], bool(cfg.get("int8_allowed")))
    choice["device_bench"] = lat
    path = os.path.join(HERE, "device_choice.json")
    with open(path + ".tmp", "w") as f:
        json.dump(choice, f, indent=2)
    os.replace(path + ".tmp", path)
    return {"chosen": choice["chosen"], "why": choice["why"]}


INT8_SLACK = 0.05       # --check: int8 may decide a few samples otherwise than on the deploy host (another CPU's kernels)
ACTION_TOLERANCE = 0.01  # as grpo_edge.export.evaluate: a continuous action agrees within 1% of its range


def check_limits(cfg, text=False):
    """What --check expects of each model, read from deploy.json: {file: (form, figure, limit, why)}; the
    figure passes at or below the limit for max_abs_diff, at or above it for agreement. The folder's README
    states these (grpo_edge/targets/pi_folder.py)."""
    measured = cfg.get("int8_check_agreement")
    int8 = max(0.0, float(measured) - INT8_SLACK) if measured is not None else 0.0
    why8 = ("deploy.json int8_check_agreement %.4g, measured on the deploy host, less %g" % (measured, INT8_SLACK)
            if measured is not None else "deploy.json records no int8_check_agreement: no minimum")
    if text:
        first = ("agreement", float(cfg.get("min_agreement", 1.0)), "deploy.json min_agreement")
    else:
        first = ("max_abs_diff", float(cfg.get("tolerance_fp32", 1e-4)), "deploy.json tolerance_fp32")
    return {"model.onnx": ("fp32",) + first, "model.int8.onnx": ("int8", "agreement", int8, why8)}


def decision_rule(cfg, want):
    """How deploy measured int8_check_agreement (grpo_edge.export.evaluate.agreement), for these outputs:
    -> (action_range or None, words)."""
    if cfg.get("action_range") is not None:
        return cfg["action_range"], "every action within 1% of its range"
    if want.ndim < 2 or want.shape[-1] == 1:
        span = float(want.max() - want.min())
        return [span if span > 0 else 1.0], "within 1% of expected_outputs.npy's range"
    return None, "the same argmax"


def decision_agreement(got, want, action_range):
    """Share of samples decided as in expected_outputs.npy (grpo_edge.export.evaluate.agreement)."""
    got, want = got.reshape(len(want), -1), want.reshape(len(want), -1)
    if action_range is None:
        return float(np.mean(got.argmax(-1) == want.argmax(-1)))
    rng = np.asarray(action_range, dtype=np.float64).reshape(1, -1)
    return float(np.mean((np.abs(got - want) / rng).max(-1) <= ACTION_TOLERANCE))


def check_folder(threads=1):
    """sample_inputs.npy through model.onnx and model.int8.onnx vs expected_outputs.npy (the checkpoint's own
    outputs), against what deploy.json expects (check_limits): fp32 within tolerance_fp32, int8 deciding as
    deploy measured on its host less 0.05 (another CPU's int8 kernels may round a few decisions the other
    way). -> (ok, {file: result row}), a row's "line" the PASS / FAIL line."""
    cfg = load_config()
    if text_config() is not None:
        return check_text(cfg, threads)
    paths = [os.path.join(HERE, n) for n in ("sample_inputs.npy", "expected_outputs.npy")]
    missing = [os.path.basename(p) for p in paths if not os.path.exists(p)]
    if missing:
        raise InputError("--check needs %s in this folder" % " and ".join(missing))
    x, want = np.load(paths[0]), np.asarray(np.load(paths[1]), dtype=np.float64)
    action_range, rule = decision_rule(cfg, want)
    res = {}
    for name, (form, what, limit, why) in check_limits(cfg).items():
        path = os.path.join(HERE, name)
        if not os.path.exists(path):
            res[name] = _verdict(name, form, {"missing": True}, what, limit, why)
            continue
        r = Runner(path, threads=threads)
        got = np.asarray(r.run(fit_input(x, r.inputs[0], paths[0]))[0], dtype=np.float64).reshape(want.shape)
        row = {"max_abs_diff": float(np.max(np.abs(got - want))), "samples": int(len(x)),
               "agreement": decision_agreement(got, want, action_range), "decision": rule}
        res[name] = _verdict(name, form, row, what, limit, why, "%d samples" % len(x))
    return all(r["pass"] for r in res.values()), res


def _verdict(name, form, row, what, limit, why, n=""):
    """row + pass, limit and its PASS / FAIL line: the measured figure, the threshold, where it comes from."""
    row["form"] = form
    row["limit"] = "%s %s %.4g" % (what, "<=" if what == "max_abs_diff" else ">=", limit)
    if row.get("missing"):
        row["pass"] = False
        row["line"] = "FAIL %s (%s): %s is not in this folder" % (form, name, name)
        return row
    value = row[what]
    row["pass"] = bool(value <= limit if what == "max_abs_diff" else value >= limit)
    extra = [n] if n else []
    if what == "agreement" and row.get("decision"):
        extra.append("agreement: %s" % row["decision"])
    if what != "max_abs_diff" and "max_abs_diff" in row:
        extra.append("max_abs_diff %.3g" % row["max_abs_diff"])
    row["line"] = "%s %s (%s): %s %.4g, threshold %s %.4g (%s)%s" % (
        "PASS" if row["pass"] else "FAIL", form, name, what, value, "<=" if what == "max_abs_diff" else ">=",
        limit, why, "; " + ", ".join(extra) if extra else "")
    return row


def check_lines(ok, result):
    """--check's console output: one PASS / FAIL line per model, then the verdict."""
    failed = [k for k, v in result.items() if not v["pass"]]
    return [v["line"] for v in result.values()] + [
        "check: PASS (%d models as deploy.json expects)" % len(result) if ok else
        "check: FAIL (%s; exit 1)" % ", ".join(failed)]


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
        raise InputError("model file(s) not found: %s" % ", ".join(missing))
    return textgen.TextGenerator(cfg, textgen.ort_functions(path, cfg, reference=reference, threads=threads))


def run_text(args, path, cfg):
    """--text / --prompts / --bench for a text model; returns the result dict."""
    gen = text_generator(path, cfg, reference=args.reference, threads=args.threads)
    prompts = [("--text", p) for p in args.text or []] + read_prompts(args.prompts)
    result, good = {}, []
    for where, p in prompts:                 # a prompt the model cannot take is reported; the others run
        try:
            gen.encode([p])
            good.append(p)
        except ValueError as e:
            result.setdefault("errors", []).append("%s: %s" % (where, e))
    if good:
        result["completions"] = gen.complete(good, batch_size=args.batch_size)
        result["prompts"] = good
    if args.bench:
        result["bench"] = text_bench(gen, path, good[0] if good else cfg["example_prompt"], args.runs,
                                     args.warmup)
    return result


def read_prompts(src):
    """[(where, prompt)] from a file or stdin (-), one prompt per line, blank lines skipped; in a .jsonl file
    each line is one JSON string (a prompt that spans lines: a program)."""
    if not src:
        return []
    if src != "-" and not os.path.isfile(src):
        raise InputError("prompts file not found: %s" % src)
    try:
        f = sys.stdin if src == "-" else open(src, encoding="utf-8")
        with f:
            lines = [line.rstrip("\r\n") for line in f]
    except UnicodeDecodeError as e:
        raise InputError("%s is not UTF-8 text (%s)" % ("stdin" if src == "-" else src, e.reason))
    where = "stdin" if src == "-" else src
    out = [("%s line %d" % (where, n), p) for n, p in enumerate(lines, 1) if p.strip()]
    if src.endswith(".jsonl"):
        out = [(w, _json_string(p, w)) for w, p in out]
    return out


def _json_string(line, where):
    try:
        value = json.loads(line)
    except ValueError:
        value = None
    if not isinstance(value, str):
        raise InputError("%s is not a JSON string (a .jsonl prompts file holds one a line)" % where)
    return value


MAX_PROGRAM_BYTES = 1 << 20


def read_program(src, cfg):
    """The Python program to fix, from a file or stdin (-), as the model reads it: UTF-8 text, CRLF and tabs
    made LF and 4 spaces, outer blank lines dropped. Anything the model cannot take is one InputError."""
    where = "stdin" if src == "-" else src
    if src != "-" and not os.path.isfile(src):
        raise InputError("program file not found: %s" % src)
    if src != "-" and os.path.getsize(src) > MAX_PROGRAM_BYTES:
        raise InputError("%s is %d bytes: this model fixes small functions, at most %d characters"
                         % (where, os.path.getsize(src), _program_room(cfg)))
    f = sys.stdin.buffer if src == "-" else open(src, "rb")
    with f:
        data = f.read(MAX_PROGRAM_BYTES + 1)
    if b"\0" in data:
        raise InputError("%s is binary, not a Python program" % where)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("%s is not UTF-8 text, so not a Python program" % where)
    text = text.replace("\r\n", "\n").expandtabs(4).strip("\n").rstrip()
    if not text.strip():
        raise InputError("%s is empty: there is no program to fix" % where)
    if len(program_prompt(text, cfg)) > int(cfg["input_len"]):
        raise InputError("%s has %d characters: this model fixes programs of at most %d%s"
                         % (where, len(text), _program_room(cfg), " (with the line numbers it reads)"
                            if cfg.get("output") == "edit" else ""))
    unknown = sorted(set(c for c in text if c not in cfg["chars"]))
    if unknown:
        raise InputError("%s has characters this model does not know: %s" % (where, json.dumps("".join(unknown))))
    if not re.search(r"^\w+ +\w+ *\(", text, re.M):            # a def header, maybe misspelt: "dfe add(a, b)"
        raise InputError("%s does not look like a Python function (no def line): this model fixes small functions"
                         % where)
    return text


def _program_room(cfg):
    return int(cfg["input_len"]) - len(cfg.get("prompt_end", ""))


def program_prompt(program, cfg):
    """What the model reads for a program: its lines numbered '1|...' (tokenizer.json's output "edit": the
    model writes the one line it changes) or the program as it is, then prompt_end. (grpo_edge.tasks.pyfix.)"""
    if cfg.get("output") == "edit":
        program = "\n".join("%d|%s" % (i + 1, line) for i, line in enumerate(program.split("\n")))
    return program + cfg["prompt_end"]


def fixed_program(program, completion, cfg):
    """The fix a completion stands for: the program with the edit's line 'N|text' put in place (output "edit";
    the program unchanged for an edit naming no line of it), or the completion itself (a whole program)."""
    if cfg.get("output") != "edit":
        return completion
    number, bar, text = completion.partition("|")
    lines = program.split("\n")
    if not bar or not number.isdigit() or not 1 <= int(number) <= len(lines) or "\n" in text.rstrip("\n"):
        return program
    lines[int(number) - 1] = text.rstrip("\n")
    return "\n".join(lines)


def run_program(args, path, cfg):
    """--program: the suggested fix of one Python file (a code-fixing model, tokenizer.json has prompt_end)."""
    if "prompt_end" not in cfg:
        raise InputError("--program needs a code-fixing model (task pyfix); this one is %s: use --text"
                         % cfg.get("task", "a text model"))
    program = read_program(args.program, cfg)
    gen = text_generator(path, cfg, reference=args.reference, threads=args.threads)
    completion = gen.complete([program_prompt(program, cfg)])[0]
    fix = fixed_program(program, completion, cfg)
    return {"program": program, "fix": fix, "changed": fix != program, "completion": completion}


def check_text(cfg, threads=1):
    """prompts of expected_completions.json (the checkpoint's own greedy completions) through model.onnx and
    model.int8.onnx: the share completed the same, at least deploy.json's min_agreement for fp32 and int8's
    as deploy measured it less 0.05 (check_limits). -> (ok, {file: result row})."""
    path = os.path.join(HERE, "expected_completions.json")
    if not os.path.exists(path):
        raise InputError("--check needs expected_completions.json in this folder")
    with open(path, encoding="utf-8") as f:
        exp = json.load(f)
    res, text = {}, text_config()
    import textgen
    for name, (form, what, limit, why) in check_limits(cfg, text=True).items():
        if not all(os.path.exists(f) for f in textgen.model_files(os.path.join(HERE, name), text["arch"]).values()):
            res[name] = _verdict(name, form, {"missing": True}, what, limit, why)
            continue
        got = text_generator(os.path.join(HERE, name), text, threads=threads).complete(exp["prompts"])
        row = {"agreement": float(np.mean([g == e for g, e in zip(got, exp["completions"])])), "prompts": len(got),
               "decision": "completions identical to expected_completions.json's"}
        res[name] = _verdict(name, form, row, what, limit, why, "%d prompts" % len(got))
    return all(r["pass"] for r in res.values()), res


def chosen_model():
    """What --choose picked on this device (device_choice.json), else what deploy chose (deploy.json)."""
    for name in ("device_choice.json", "deploy.json"):
        cfg = os.path.join(HERE, name)
        if os.path.exists(cfg):
            with open(cfg) as f:
                return os.path.join(HERE, json.load(f).get("chosen", "model.onnx"))
    return os.path.join(HERE, "model.onnx")


class _Parser(argparse.ArgumentParser):
    def error(self, message):           # one line, exit 2 (argparse prints usage + error)
        sys.stderr.write("error: runner: %s (python3 runner.py --help)\n" % message)
        sys.exit(2)


def parse_args(argv=None):
    ap = _Parser(description="Run a grpo-edge ONNX model with onnxruntime.")
    ap.add_argument("--model", default=None, help="ONNX file (default: the chosen one: device_choice.json, "
                                                  "else deploy.json)")
    ap.add_argument("--input", default=None, help=".npy / .npz batch, .csv / .txt, or - for stdin (one sample "
                                                  "per line)")
    ap.add_argument("--out", default=None, help="save the first output to this .npy file")
    ap.add_argument("--check", action="store_true", help="run sample_inputs.npy through both models and compare "
                                                         "with expected_outputs.npy: one PASS / FAIL line per "
                                                         "model against deploy.json (exit 1 on a FAIL)")
    ap.add_argument("--no-range-check", action="store_true",
                    help="accept inputs far outside the range the model was trained on")
    ap.add_argument("--bench", action="store_true", help="measure latency (warm-up, many runs, median)")
    ap.add_argument("--runs", type=int, default=1000, help="timed calls for --bench / --choose (>= 1)")
    ap.add_argument("--warmup", type=int, default=100, help="untimed calls first (>= 0)")
    ap.add_argument("--reference", action="store_true", help="ORT graph optimizations off")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (>= 1)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--choose", action="store_true",
                    help="on the device: bench fp32 and int8, keep the faster one if deploy.json allows int8 "
                         "(written to device_choice.json)")
    ap.add_argument("--text", action="append", help="text models: a prompt to complete (repeatable)")
    ap.add_argument("--prompts", default=None, help="text models: file with one prompt per line, - for stdin")
    ap.add_argument("--batch-size", type=int, default=64, help="text models: prompts decoded together (>= 1)")
    ap.add_argument("--program", default=None, help="code-fixing models: a Python file to fix (- for stdin); "
                                                    "prints the suggested fix")
    args = ap.parse_args(argv)
    for flag, value, low in (("--runs", args.runs, 1), ("--warmup", args.warmup, 0), ("--threads", args.threads, 1),
                             ("--batch-size", args.batch_size, 1)):
        if value < low:
            ap.error("%s must be >= %d (got %d)" % (flag, low, value))
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        return run(args)
    except InputError as e:
        sys.stderr.write("error: runner: %s\n" % e)
        return 2


def run(args):
    if args.choose:
        result = choose(args.runs, args.warmup, args.threads)
        print(json.dumps(result) if args.json else "chosen: %s (%s)" % (result["chosen"], result["why"]))
        return 0
    if args.check:
        ok, result = check_folder(args.threads)
        print(json.dumps(result) if args.json else "\n".join(check_lines(ok, result)))
        return 0 if ok else 1
    path = args.model or chosen_model()
    if not os.path.isabs(path) and not os.path.exists(os.path.join(os.getcwd(), path)):
        path = os.path.join(HERE, path)
    text = text_config()
    if text is not None and args.program:
        result = run_program(args, path, text)
        print(json.dumps(result) if args.json else result["fix"])
        return 0
    if text is not None:
        return print_text(run_text(args, path, text), args.json)
    if not os.path.exists(path):
        raise InputError("model not found: %s" % path)
    runner = Runner(path, reference=args.reference, threads=args.threads)
    result = {}
    if args.input:
        x = read_inputs(args.input, runner)
        if not args.no_range_check:
            check_range(x, load_config(), args.input)
        first = runner.run(x)[0]
        if args.out:
            np.save(args.out, first)
        big = "%d values: saved to %s" % (first.size, args.out) if args.out else "%d values: use --out FILE" % first.size
        result["outputs"] = first.tolist() if first.size <= 4096 else big
        if runner.output_names[:1] == ["action"]:          # a continuous policy: the bounded actions
            result["actions"] = first.tolist() if first.size <= 4096 else big
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


def print_text(result, as_json):
    """Completions on stdout; each prompt the model could not take as one `error:` line (exit 1 then)."""
    if as_json:
        print(json.dumps(result))
    else:
        for c in result.get("completions", []):
            print(c)
        if "bench" in result:
            print("bench: %s" % json.dumps(result["bench"]))
    for e in result.get("errors", []):
        sys.stderr.write("error: runner: %s\n" % e)
    return 1 if result.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
