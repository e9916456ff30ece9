"""deploy(): int8 QDQ ONNX -> ESP-IDF firmware + report (simulated, estimated, TFLM baseline).

    from grpo_edge.targets.esp32 import deploy
    report = deploy("model.int8.onnx", "esp32c3", "out/", {"prefix": "cartpole"})
"""
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError
from grpo_edge.report import Report
from grpo_edge.targets.contract import check_options

from . import codegen, firmware, parse, rv32, simulate, tflm
from .ir import Graph

# What ESP-IDF itself takes, so the model gets the rest (our estimates, see docs/esp32.md).
IDF_FLASH_RESERVED = 256 * 1024      # bootloader-free app image base: IDF runtime, drivers, newlib
APP_PARTITION = 1536 * 1024          # CONFIG_PARTITION_TABLE_SINGLE_APP_LARGE
IDF_RAM_RESERVED = 160 * 1024        # FreeRTOS, IDF heap users, caches, main task stack
STACK_ESTIMATE = 512
CODE_PER_OP = 400                    # bytes of rv32 code per generated op (observed 200-700 at -O2)

DEFAULTS = {"prefix": None, "n_check": 1000, "n_vectors": 8, "seed": 0, "rv32": True, "tflm": True,
            "callgrind": True, "ort": True, "n_callgrind": 20, "eval_inputs": None, "fp32_onnx": None,
            "quantization": None, "task": None, "profile": True, "source": None, "gate": None,
            "tflite_inputs": None, "n_tflm": 200, "esp_nn": True}


def _profile(profile):
    """A profile name, a load_profile() dict or a plain dict {clock_hz, sram_bytes, ...} -> (name, getter)."""
    if isinstance(profile, str):
        from grpo_edge.targets.profiles import load_profile
        profile = load_profile(profile)
    if not isinstance(profile, dict):
        raise TargetError("profile must be a name or a dict, got %s" % type(profile).__name__)
    figs = profile.get("figures")
    name = profile.get("name", "custom")

    def get(key, default=None):
        if isinstance(figs, dict) and key in figs:
            f = figs[key]
            return f.get("value", default) if isinstance(f, dict) else f
        return profile.get(key, default)

    def source(key):
        if isinstance(figs, dict) and isinstance(figs.get(key), dict):
            return "%s profile: %s" % (name, figs[key].get("source", ""))
        return "%s profile (given)" % name
    return name, get, source


def default_prefix(path) -> str:
    stem = Path(str(path)).name.split(".")[0]
    p = re.sub(r"[^A-Za-z0-9_]", "_", stem) or "model"
    return ("m_" + p if p[0].isdigit() else p)[:32]


def fit_check(graph: Graph, plan, profile) -> dict:
    """Fail BEFORE generating when the model cannot fit the chip's flash or RAM."""
    name, get, _ = _profile(profile)
    flash_need = graph.weight_bytes() + CODE_PER_OP * len(graph.ops) + 2048
    ram_need = plan.arena_bytes + STACK_ESTIMATE + graph.tensors[graph.output].nbytes
    flash_total = int(get("flash_bytes", 4 << 20))
    flash_avail = min(flash_total, APP_PARTITION) - IDF_FLASH_RESERVED
    sram = int(get("sram_bytes", 320 * 1024))
    psram = int(get("psram_bytes", 0) or 0)
    ram_avail = sram - IDF_RAM_RESERVED
    hint = "try a smaller model (fewer hidden units / channels)"
    if name != "esp32s3":
        hint += ", or --target esp32s3 with PSRAM (8 MB variants)"
    if flash_need > flash_avail:
        raise TargetError("model needs about %d bytes of flash (weights %d + code), %s allows %d (%d B flash, %d B app "
                          "partition, %d B for ESP-IDF): %s"
                          % (flash_need, graph.weight_bytes(), name, flash_avail, flash_total, APP_PARTITION,
                             IDF_FLASH_RESERVED, hint))
    if ram_need > ram_avail:
        extra = " (PSRAM %d B not used by the static arena)" % psram if psram else ""
        raise TargetError("model needs %d bytes of RAM (arena %d + stack/output %d), %s allows %d (%d B SRAM minus %d B "
                          "for ESP-IDF)%s: %s" % (ram_need, plan.arena_bytes, ram_need - plan.arena_bytes, name,
                                                  ram_avail, sram, IDF_RAM_RESERVED, extra, hint))
    return {"flash_needed_estimate": flash_need, "flash_available": flash_avail,
            "ram_needed_estimate": ram_need, "ram_available": ram_avail}


def onnx2c(int8_onnx_path, out_dir, prefix=None) -> dict:
    """Pure exporter: int8 QDQ ONNX -> out_dir/<prefix>_model.{c,h}. Fails before writing on any
    unsupported op. Returns {"header", "source", "arena_bytes", "ops", "prefix"}."""
    prefix = codegen.check_prefix(prefix or default_prefix(int8_onnx_path))
    graph = parse.parse(int8_onnx_path)
    gen = codegen.generate(graph, prefix)
    files = codegen.write(gen, out_dir)
    return {"header": files["header"], "source": files["source"], "arena_bytes": gen.plan.arena_bytes,
            "ops": [op.kind for op in graph.ops], "prefix": prefix}


def _require_tools() -> bool:
    return os.environ.get("GRPO_EDGE_REQUIRE_TOOLS", "") == "1"


def deploy(source, profile, out_dir, options=None) -> Report:
    """int8 QDQ ONNX `source` -> out_dir/firmware (ESP-IDF project + generated model) and
    out_dir/report.{json,md}. options: see DEFAULTS."""
    pname, get, fsource = _profile(profile)
    src = _check_source(source)
    tflite_src = src.suffix == ".tflite"
    if tflite_src:
        options = tflite_options(options or {})
    check_options({"name": pname}, options or {}, DEFAULTS)
    opts = dict(DEFAULTS, **(options or {}))
    prefix = codegen.check_prefix(opts["prefix"] or default_prefix(src))

    if tflite_src:                                  # the TFLite front end; TFLM on the same file is the oracle
        from .parse_tflite import tflite2ir
        esp_nn = pname == "esp32s3" and opts["esp_nn"]  # the S3: NHWC, ESP-NN's kernels in the firmware
        graph = tflite2ir(src, layout="nhwc" if esp_nn else "nchw")   # bad file -> ExportError, nothing written
        esp_nn = esp_nn and graph.layout == "nhwc"  # a 16x8 model: no ESP-NN kernels (graph.layout_fallback)
        if esp_nn:
            from .esp_nn_adapters import prepare
            prepare(graph)
        if opts["tflite_inputs"] is not None:
            opts["tflite_inputs"] = user_inputs(opts["tflite_inputs"], graph.tensors[graph.input])
    else:
        graph = parse.parse(src)                    # unsupported op -> ExportError, nothing written
    gen = codegen.generate(graph, prefix)
    fit = fit_check(graph, gen.plan, profile)       # too big -> TargetError, nothing written

    out = Path(out_dir)
    rep = Report(title="ESP32 deploy: %s" % Path(opts["source"] or src).name, target=pname)
    rep.sections["source"] = os.path.relpath(str(Path(opts["source"] or src).resolve()), str(out.resolve()))
    _describe_model(graph, gen, fit, opts["quantization"], rep)
    rng = np.random.default_rng(opts["seed"])
    tin = graph.tensors[graph.input]
    x_q = rng.integers(tin.qmin, tin.qmax + 1, size=(opts["n_check"],) + tuple(tin.shape[1:])).astype(tin.np_dtype)
    if tflite_src and opts["tflite_inputs"] is not None:     # the user's inputs first: checked and profiled
        x_q = np.concatenate([opts["tflite_inputs"], x_q])
    _host_check(graph, gen, x_q, rep, tflite_src)   # 1. host C == reference, two optimisation levels
    if graph.esp_nn:                                # 1b. the same C calling ESP-NN (its ANSI C) == reference
        _esp_nn_check(graph, gen, x_q, rep)
    fw = firmware.assemble(graph, gen, out, opts["n_vectors"], opts["seed"])
    if opts["ort"]:                                 # 2. onnxruntime QDQ within 1 LSB per op
        _ort_check(graph, src, rng, opts, rep)
    if opts["rv32"] and (rv32.available() or _require_tools()):
        _rv32_check(graph, gen, x_q, (pname, get, fsource), rep)    # 3. rv32imc instruction-level simulation
        if opts["profile"]:
            _per_op_profile(graph, gen, x_q, rep, out)               # 3b. where the instructions go, op by op
    elif opts["rv32"]:
        rep.notes.append("rv32 simulation skipped: %s" % rv32.missing_reason())
    if opts["tflm"] and (tflm.available() or _require_tools()):
        _tflm_check(graph, gen, x_q, opts, out, rep)                # 4. TFLite Micro baseline
    elif opts["tflm"]:
        rep.notes.append("TFLite Micro baseline skipped: pip install tflite-micro")
    if "per_op" in rep.sections:
        _per_op_chart(gen, rep, out)
    if pname == "esp32s3" and "per_op" in rep.sections:          # 5. the S3 against TFLM + ESP-NN (estimate)
        _s3_estimate(graph, gen, get("clock_hz", 240e6), rep)
    rep.sections["firmware"] = {"dir": str(fw["dir"]), "checksum": "0x%08x" % fw["checksum"],
                                "test_vectors": fw["n_vectors"],
                                "build": "cd %s && idf.py set-target %s && idf.py build flash monitor"
                                         % (fw["dir"], pname if pname.startswith("esp32") else "esp32"),
                                "flash": "grpo-edge flash %s --port PORT" % out}
    rep.gate = (tflm_gate(rep, 0 if opts["tflite_inputs"] is None else len(opts["tflite_inputs"]),
                          graph.activation_dtype) if tflite_src
                else quality_gate(rep, opts["gate"] or {}, graph.activation_dtype))
    from .readme import write_readme
    write_readme(out, graph, prefix, pname if pname.startswith("esp32") else "esp32", rep)
    rep.write(out)
    return rep


def _agreements(cand) -> str:
    if "error" in cand:
        return cand["error"]
    return " / ".join("%.3f" % cand[k] if cand.get(k) is not None else "n/a"
                      for k in ("agreement_calibration", "agreement_held_out"))


def quality_gate(rep, settings: dict, dtype: str) -> dict:
    """The deploy's gate (targets/gate.py) from its figures: the integer reference's agreement with fp32 on
    the evaluation inputs, each quantization form tried, and for a continuous policy with its task the
    return it keeps. A QDQ model given as it is has no fp32 model to compare with: not measured."""
    from grpo_edge.targets import gate
    f = rep.figures.get("decision_agreement_fp32")
    q = rep.sections.get("quantization") or {}
    forms = {"int8": "int8", "int16": "16x8"}
    tried = [{"form": forms.get(c["activations"], c["activations"]), "error": c["error"]} if "error" in c else
             {"form": forms.get(c["activations"], c["activations"]),
              "value": c.get("agreement_eval", c.get("agreement_calibration"))} for c in q.get("candidates", [])]
    continuous = "action_error_max_relative" in rep.figures
    retention = noise = None
    if continuous and "task_metric_fp32" in rep.figures:
        m = rep.sections.get("task_metric") or {}
        retention = gate.return_retention(rep.figures["task_metric_integer"].value, rep.figures["task_metric_fp32"].value)
        noise = gate.retention_noise(m.get("fp32"), m.get("integer"))
    n = (rep.sections.get("fp32_comparison") or {}).get("inputs", 0)
    on = settings.get("on", "evaluation inputs")
    if f is None:
        return gate.decide("agreement with fp32", None, 0.0, 0, "inputs: an int8 QDQ model was given, with no fp32 "
                           "model to compare it with", tried, forms.get(dtype, dtype))
    figure = "action agreement" if continuous else "decision agreement"
    return gate.decide(figure, f.value, settings.get("min_agreement", gate.MIN_AGREEMENT), n, on, tried,
                       forms.get(dtype, dtype), retention, settings.get("min_retention", gate.MIN_RETENTION), noise)


def _check_source(source) -> Path:
    """The source must be an existing .onnx file (an int8 QDQ model) or an int8 .tflite."""
    src = Path(str(source))
    if not src.is_file():
        raise TargetError("model file not found: %s" % src)
    if src.suffix not in (".onnx", ".tflite"):
        raise TargetError("esp32 deploy takes an int8 QDQ .onnx (export a checkpoint with onnx2int8 first) or an int8 "
                          ".tflite, got %s" % src.name)
    return src


def tflite_options(opts) -> dict:
    """The options of a .tflite deploy: no onnxruntime (TFLM on the same file is the oracle), the file's own types
    kept (no --activations), --calibration as inputs to check on (read when the graph is known: tflite_inputs)."""
    opts = dict(opts)
    opts["ort"] = False
    for key in ("activations", "method", "weight_rounding", "calibration_samples", "min_agreement", "min_retention"):
        if opts.get(key) not in (None, "auto"):
            raise TargetError("--%s does not apply to a .tflite: its quantization is the file's, and its gate is "
                              "TFLM's outputs on the same file" % key.replace("_", "-"))
        opts.pop(key, None)
    if opts.get("calibration") is not None:
        opts["tflite_inputs"] = opts.pop("calibration")
    opts.pop("calibration", None)
    return opts


def user_inputs(path, tin) -> np.ndarray:
    """--calibration for a .tflite: an .npy / .npz of inputs, int8 codes as the model takes them, or float values
    quantized with the input's scale and zero point (TFLite's QUANTIZE rule)."""
    from grpo_edge.export.calibration import load_calibration
    from . import reference as R
    arrays = load_calibration(path)
    if len(arrays) != 1:
        raise TargetError("%s holds %d arrays (%s): a .tflite takes one input" % (path, len(arrays), ", ".join(arrays)))
    x = np.asarray(next(iter(arrays.values())))
    shape = tuple(tin.shape[1:])
    if x.size % max(int(np.prod(shape)), 1) or x.size == 0:
        raise TargetError("%s holds an array of shape %s: inputs of shape %s expected" % (path, list(x.shape), list(shape)))
    x = x.reshape((-1,) + shape)
    if np.issubdtype(x.dtype, np.integer):
        if x.min() < tin.qmin or x.max() > tin.qmax:
            raise TargetError("%s holds integers outside the input's %s range [%d, %d]" % (path, tin.dtype, tin.qmin, tin.qmax))
        return x.astype(tin.np_dtype)
    if not np.all(np.isfinite(x)):
        raise TargetError("%s holds non-finite values" % path)
    return R.quantize(x, tin.scale, tin.zero_point, tin.dtype).astype(tin.np_dtype)


def tflm_gate(rep, user, form="int8") -> dict:
    """A .tflite's gate: the generated C's outputs equal TFLM's on the same file, on every input checked (form:
    the model's activations, int8 or int16)."""
    from grpo_edge.targets import gate
    tb = rep.sections.get("tflm_baseline") or {}
    o = tb.get("outputs")
    on = "inputs (%srandom across the input range), TFLM on the same .tflite" % (
        "the %d of --calibration, then " % user if user else "")
    if not o:
        return gate.decide("outputs equal to TFLM's", None, 1.0, 0, "inputs: TFLM did not run (%s)"
                           % tb.get("skipped", "pip install tflite-micro"), [], form)
    return gate.decide("outputs equal to TFLM's", o["frac_equal"], 1.0, o["n_inputs"], on, [], form)


def _describe_model(graph, gen, fit, quantization, rep) -> None:
    """The model's arithmetic, how its quantization was chosen, its sizes and MACs (exact figures)."""
    if graph.activation_dtype == "int16" and any(op.attrs.get("requant64") for op in graph.ops):
        rep.notes.append("Arithmetic: TFLite 16x8 rules (int16 activations, int8 weights; the .tflite's int64 biases "
                         "select TFLM's int64 requantization, over int32 sums proved not to overflow).")
    elif graph.activation_dtype == "int16":
        rep.notes.append("Arithmetic: TFLite 16x8 rules (int16 activations, int8 weights, int32 bias and accumulator, "
                         "double rounding; TFLM's int16 tanh).")
    else:
        rep.notes.append("Arithmetic: TFLite int8 rules, double rounding (TFLM default); elementwise functions (tanh, "
                         "sigmoid, GELU, HardSwish, ...) as 256-entry tables.")
    rep.add("activations", graph.activation_dtype, "", "exact", "activation type of the generated code (weights int8)")
    if getattr(graph, "layout_fallback", None):
        rep.notes.append("ESP-NN not used: %s." % graph.layout_fallback)
    if quantization:
        q = quantization
        rep.sections["quantization"] = {k: v for k, v in q.items() if k != "chosen_path"}
        rep.notes.append("Quantization chosen by measurement: %s. Candidates (decision agreement with fp32 on the "
                         "calibration states / held out of them): %s." % (q.get("rule", ""), ", ".join(
                             "%s/%s %s" % (c["activations"], c["weight_rounding"], _agreements(c))
                             for c in q.get("candidates", []))))
        fused = [f for f in q.get("fusions") or [] if f["op"] != "constant" and not f.get("layout")]
        moved = [f for f in q.get("fusions") or [] if f.get("layout")]
        if moved:
            rep.notes.append("Before quantizing (export/onnx_layout.py), %d nodes rewritten so every tensor keeps "
                             "the batch axis first: %s." % (len(moved), "; ".join(
                                 "%s %s: %s" % (f["op"], f["node"], f["how"]) for f in moved)))
        if fused:
            rep.notes.append("Before quantizing (export/onnx_fuse.py), fused: %s." % "; ".join(
                "%s at %s %s" % (f["op"], f["node"], f.get("how") or "from %d nodes" % len(f["nodes"])) for f in fused))
    rep.sections["model"] = graph.summary()
    rep.sections["fit_check"] = fit
    rep.add("arena_bytes", gen.plan.arena_bytes, "B", "exact", "buffer-lifetime planner (no reuse: %d B)" % gen.plan.naive_bytes)
    table = 512 if any(op.kind in ("tanh16", "sigmoid16") for op in graph.ops) else 0     # uint16 sigmoid table, once
    rep.add("weights_bytes", graph.weight_bytes() + table, "B", "exact", "int8 weights + int32 bias/multipliers + shifts"
            + (" + the 512-byte int16 tanh table" if table else ""))
    macs = sum(op.macs(graph.tensors) for op in graph.ops if op.kind in ("fc", "fc16", "conv"))
    rep.add("macs_per_inference", macs, "MAC", "exact", "sum over fc/conv ops")


def input_words(t) -> str:
    """How reports name a model's input values: 'int8', or 'token-id (0..N-1)' for an embedding's input."""
    return "token-id (0..%d)" % (t.limit - 1) if t.limit else t.dtype


def _host_check(graph, gen, x_q, rep, sanitize=False) -> None:
    """The generated C, compiled for this host at two optimisation levels (and with AddressSanitizer + UBSan for a
    .tflite, where they run here), must equal the NumPy reference."""
    from .cc import sanitizers_available
    opts = ("O2", "O0-novec") + (("O1-sanitize",) if sanitize and sanitizers_available() else ())
    host = simulate.host_check(graph, gen, x_q, opts)
    rep.sections["host_simulation"] = host
    rep.add("host_bit_exact", host["bit_exact"], "", "measured-host",
            "gcc %s (%s), %d random %s inputs vs NumPy reference" % (
                " ".join(simulate.CFLAGS), ", ".join(opts), len(x_q), input_words(graph.tensors[graph.input])))
    if not host["bit_exact"]:
        raise TargetError("generated C differs from the NumPy reference on the host (%s): not deploying"
                          % {k: v["mismatches"] for k, v in host["builds"].items()})


def _ort_check(graph, src, rng, opts, rep) -> None:
    """onnxruntime's QDQ arithmetic vs our reference (LSB per op and end to end); with the fp32 model, the
    decision agreement and the task metric too."""
    tin = graph.tensors[graph.input]
    in_shape = tuple(tin.shape[1:])
    if tin.limit:                                 # token ids: the calibration ids, or random ones
        xf = (opts["eval_inputs"] if opts["eval_inputs"] is not None
              else rng.integers(0, tin.limit, size=(200,) + in_shape))
        xf = np.asarray(xf, dtype=np.int64).reshape((-1,) + in_shape)
    else:
        xf = (opts["eval_inputs"] if opts["eval_inputs"] is not None
              else rng.standard_normal((200,) + in_shape).astype(np.float32))
        xf = np.asarray(xf, dtype=np.float32).reshape((-1,) + in_shape)
    o = simulate.ort_check(graph, src, xf[:500])
    rep.sections["onnxruntime_check"] = o
    rep.add("ort_max_lsb_per_op", o["per_op_max_lsb"], "LSB", "measured-host",
            "onnxruntime QDQ, graph optimizations disabled, our reference fed ORT's %s inputs per op" % input_words(tin))
    rep.add("ort_ops_over_bound", int(o["ops_over_bound"]), "ops", "measured-host",
            "ops further from onnxruntime than their documented bound (1 LSB; TFLM's int16 tanh 3, "
            "int16 matmul 2, int16 softmax 2 n + 2: OpSpec.ort_lsb)")
    rep.add("ort_max_lsb_end_to_end", o["end_to_end_max_lsb"], "LSB", "measured-host", "same inputs, whole model")
    if opts["fp32_onnx"]:
        _fp32_check(graph, xf[:1000], opts["fp32_onnx"], opts["task"], rep)


def _fp32_check(graph, xf, fp32_onnx, task, rep) -> None:
    """Decisions of the integer reference vs the fp32 ONNX model (and each quantization candidate's), and
    the task metric of both when the task is known."""
    from grpo_edge.core.distributions import action_range as range_of
    from grpo_edge.export.evaluate import ACTION_TOLERANCE, action_errors
    action_range = range_of(task)
    agree = fp32_agreement(graph, fp32_onnx, xf, action_range)
    rep.sections["fp32_comparison"] = {"inputs": int(len(xf)), "continuous": action_range is not None}
    if action_range is None:
        rep.add("decision_agreement_fp32", agree, "", "measured-host",
                "argmax of the %s integer reference vs fp32 ONNX on %d eval inputs" % (graph.activation_dtype, len(xf)))
    else:
        yq, yf = _integer_and_fp32(graph, fp32_onnx, xf)
        rep.add("decision_agreement_fp32", agree, "", "measured-host",
                "share of %d eval inputs where every action of the %s integer reference is within %g of the "
                "action range of fp32 ONNX's" % (len(xf), graph.activation_dtype, ACTION_TOLERANCE))
        rep.add("action_error_max_relative", float(action_errors(yq, yf, action_range).max()), "", "measured-host",
                "max |a_int - a_fp32| / (high - low) over %d eval inputs and the action dimensions" % len(xf))
    if task is not None:
        m = task_metrics(graph, task, fp32_onnx)
        name = getattr(task, "metric_name", "metric")
        rep.add("task_metric_fp32", m["fp32"]["mean"], name, "measured-host", "fp32 ONNX as the policy, task "
                "evaluation%s" % _spread(m["fp32"]))
        rep.add("task_metric_integer", m["integer"]["mean"], name, "measured-host",
                "the %s integer reference (the C's arithmetic) as the policy, same evaluation%s"
                % (graph.activation_dtype, _spread(m["integer"])))
        rep.sections["task_metric"] = m
    for c in (rep.sections.get("quantization") or {}).get("candidates", []):
        if "error" not in c and Path(c["path"]).is_file():    # what each candidate does on the same states
            c["agreement_eval"] = fp32_agreement(parse.parse(c["path"]), fp32_onnx, xf, action_range)


def _rv32_check(graph, gen, x_q, prof, rep) -> None:
    """The C on an rv32imc instruction-level simulator: bit-exact check, instruction count, flash and RAM;
    then the device latency and energy estimated from the count and the profile."""
    r = rv32.rv32_check(graph, gen, x_q[:min(100, len(x_q))])
    rep.sections["rv32_simulation"] = r
    n = r["instructions"]["mean"]
    rep.add("rv32_bit_exact", r["bit_exact"], "", "measured-host", "unicorn rv32imc vs NumPy reference")
    rep.add("rv32_instructions_per_inference", int(round(n)), "instr", "measured-host",
            "unicorn rv32imc, exact count, %s" % r["compiler"])
    flash_ours = r["sections"]["text"] + r["sections"]["rodata"] + r["sections"]["data"]
    rep.add("flash_bytes", flash_ours, "B", "measured-host", "rv32imc -O2 ELF: .text + .rodata + .data of the model")
    rep.add("ram_bytes", gen.plan.arena_bytes + r["stack_bytes"], "B", "measured-host",
            "arena %d + measured rv32 stack %d" % (gen.plan.arena_bytes, r["stack_bytes"]))
    _estimate_latency(n, prof, rep)


def _per_op_profile(graph, gen, x_q, rep, out) -> None:
    """Per op: MACs, rv32 instructions, instructions per MAC, live arena, flash (esp32/profile.py)."""
    from .profile import per_op_profile
    total = rep.figures["rv32_instructions_per_inference"].value
    prof = per_op_profile(graph, gen, x_q[:3], total)
    rep.sections["per_op"] = prof["ops"]
    rep.sections["per_op_totals"] = prof["totals"]
    rep.notes.append("Per-op profile (sections per_op, per_op_totals; per_op.png): rv32imc instructions counted at "
                     "GX_MARK(i) before each op's call, in a build with an empty gx_mark call there (the ops' sum "
                     "leaves out invoke's entry and exit, and the calls move registers a little: it is within a few "
                     "percent of the unmarked model's count, per_op_totals has both); arena bytes live during the "
                     "op; flash bytes of its constant data.")


def _per_op_chart(gen, rep, out) -> None:
    from .profile import per_op_chart
    out.mkdir(parents=True, exist_ok=True)
    prof = {"ops": rep.sections["per_op"], "totals": rep.sections["per_op_totals"]}
    per_op_chart(prof, out / "per_op.png", "%s: rv32imc instructions per op (exact, mean of %d inputs)"
                 % (gen.prefix, prof["totals"]["inputs"]))


def _esp_nn_check(graph, gen, x_q, rep) -> None:
    """The generated C with GX_USE_ESP_NN against ESP-NN's ANSI C (where its source is here) == the reference."""
    from . import esp_nn_adapters as E
    src = E.source_dir()
    rep.add("esp_nn_ops", len(gen.esp_nn_ops), "ops", "exact", "ops the S3 firmware runs with ESP-NN's kernels "
            "(%s, an ESP-IDF component dependency): %s" % (" ".join(E.COMPONENT), ", ".join(
                "%d %s" % (i, graph.ops[i].kind) for i in gen.esp_nn_ops)))
    if src is None:
        rep.notes.append("ESP-NN's calls were not compiled here: its source is not on the package registries; set %s "
                         "to a checkout of espressif/esp-nn to prove them against its ANSI C" % E.ENV_SRC)
        return
    r = E.host_check(graph, gen, x_q[:200], src)
    rep.sections["esp_nn_host_check"] = r
    rep.add("esp_nn_host_bit_exact", r["bit_exact"], "", "measured-host", "%s, ESP-NN %s, %d inputs vs NumPy reference "
            "(the S3's assembly kernels cannot run here)" % (r["how"], r["esp_nn_version"], r["n_inputs"]))
    if not r["bit_exact"]:
        raise TargetError("the generated C calling ESP-NN differs from the reference on the host (max %d LSB): not "
                          "deploying" % r["max_lsb"])


def _s3_estimate(graph, gen, clock_hz, rep) -> None:
    """Ours, TFLM's reference kernels and TFLM + ESP-NN on the S3, per op (espnn_estimate.py): ESTIMATES."""
    from .espnn_estimate import anchor_check, estimate
    e = estimate(graph, rep.sections["per_op"], rep.sections["per_op_totals"], float(clock_hz), gen.esp_nn_ops)
    if e is None:
        rep.notes.append("S3 estimate against TFLM + ESP-NN skipped: it needs the per-op host columns (TFLM, valgrind)")
        return
    rep.sections["s3_estimate"] = e
    m = e["model"]
    rep.add("s3_estimate_ours_us", m["ours_us"], "us", "estimated", "the generated plain C on the S3: " + e["sources"])
    rep.add("s3_estimate_tflm_esp_nn_us", m["tflm_esp_nn_us"], "us", "estimated",
            "TFLM + ESP-NN on the S3, per op from TFLM's measured host instructions / ESP-NN's published speed-ups; "
            + anchor_check(m["esp_nn_over_reference"]))
    scratch = max([int(op.attrs.get("esp_nn_scratch", 0)) for op in graph.ops] + [0])
    tb = rep.sections.get("tflm_baseline") or {}
    if scratch and tb.get("arena_bytes"):
        rep.add("s3_estimate_tflm_esp_nn_arena_bytes", tb["arena_bytes"] + scratch, "B", "estimated",
                "TFLM's smallest arena with its reference kernels (measured) + the largest scratch ESP-NN's S3 kernels "
                "ask for (%d B, esp_nn_adapters.py: ESP-NN 1.2.3's size rules), an upper bound" % scratch)
    if gen.esp_nn_ops:
        rep.add("s3_estimate_ours_esp_nn_us", m["ours_esp_nn_us"], "us", "estimated",
                "the S3 firmware (GX_USE_ESP_NN): ESP-NN's kernels for %d ops (the same per-op estimate as TFLM + "
                "ESP-NN's), our plain C for the rest, no interpreter" % len(gen.esp_nn_ops))
    rep.notes.append("ESTIMATE, ESP32-S3 (no device here): ours plain C %.0f us%s, TFLM reference %.0f us, TFLM + ESP-NN "
                     "%.0f us (ours / TFLM + ESP-NN %.2fx); %s. How: %s" % (
                         m["ours_us"], ", ours with ESP-NN %.0f us" % m["ours_esp_nn_us"] if gen.esp_nn_ops else "",
                         m["tflm_reference_us"], m["tflm_esp_nn_us"], m["ours_esp_nn_us"] / m["tflm_esp_nn_us"],
                         anchor_check(m["esp_nn_over_reference"]), e["how"]))


def _estimate_latency(n_instructions, prof, rep) -> None:
    """Latency = instructions x CPI / clock, energy = latency x active power: estimates from the profile."""
    pname, get, fsource = prof
    clock = get("clock_hz")
    if not clock:
        rep.notes.append("no clock_hz in the profile: latency and energy not estimated")
        return
    from grpo_edge.targets.device_model import esp32_c_latency        # the model bench uses too
    e = esp32_c_latency(pname, float(clock), fsource("clock_hz"), n_instructions)
    lat = e["value"]
    rep.add("latency_s", lat, "s", "estimated", e["source"])
    power = get("active_power_w")
    if power:
        rep.add("energy_j", lat * float(power), "J", "estimated",
                "latency estimate x active_power_w %.3g W [%s]" % (float(power), fsource("active_power_w")))


def _tflm_check(graph, gen, x_q, opts, out, rep) -> None:
    """The same parameters in TensorFlow Lite Micro: arena, outputs vs ours, host instructions."""
    tb = tflm_baseline(graph, gen, x_q, opts, out)
    rep.sections["tflm_baseline"] = tb
    if "skipped" in tb:
        return
    rep.add("tflm_arena_bytes", tb["arena_bytes"], "B", "measured-host",
            "smallest arena TFLM runs in (subprocess bisection), %s" % tb["tflm"])
    why = tb["outputs"]["reason"]
    rep.add("tflm_outputs_max_lsb", tb["outputs"]["max_lsb"], "LSB", "measured-host",
            "TFLM vs our reference, same parameters" + ("; " + why if why else ""))
    ipi = tb.get("instructions_per_inference")
    if ipi:
        rep.add("host_instructions_ours", int(round(ipi["ours"])), "instr", "measured-host", ipi["how"])
        rep.add("host_instructions_tflm", int(round(ipi["tflm"])), "instr", "measured-host", ipi["how"])
    host = tb.pop("per_op_host", None)
    if host and "per_op" in rep.sections:
        from .profile import add_host_columns
        add_host_columns(rep.sections["per_op"], rep.sections["per_op_totals"], host["ours"], host["tflm"])
        rep.notes.append("Per-op host columns (x86-64, valgrind callgrind, mean of %d inputs): our op from the "
                         "GX_MARK before its call to the next (gcc -O2); TFLM's from its kernel's entry to the next "
                         "kernel's, summed over the TFLite operators that compute the op (its last one includes "
                         "Invoke's return). Entry and exit are in per_op_totals." % host["ours"]["calls"])


def fp32_agreement(graph, fp32_onnx, xf, action_range=None) -> float:
    """Share of inputs where the integer reference decides as the fp32 model (export/evaluate.py:agreement)."""
    from grpo_edge.export.evaluate import agreement
    yq, yf = _integer_and_fp32(graph, fp32_onnx, xf)
    return agreement(yq, yf, action_range)


def _integer_and_fp32(graph, fp32_onnx, xf):
    from . import reference as R
    sess = simulate.ort_session(str(fp32_onnx))
    yf = np.concatenate([sess.run(None, simulate.feed(sess, xf[i:i + 1]))[0] for i in range(len(xf))]).reshape(len(xf), -1)
    t, o = graph.tensors[graph.input], graph.tensors[graph.output]
    yq = R.run(graph, R.input_codes(t, xf))
    if o.scale is not None:                               # real units (actions), not integer codes
        yq = R.dequantize(yq, o.scale, o.zero_point)
    return yq.reshape(len(xf), -1), yf


def _spread(m) -> str:
    return "" if m["std"] is None else " (%d episodes, std %.4g per episode)" % (m["n"], m["std"])


def task_metrics(graph, task, fp32_onnx) -> dict:
    """The task's own metric (e.g. CartPole return) with the fp32 model and with the integer reference
    driving the task: decisions that differ only where the policy is indifferent cost nothing here."""
    from grpo_edge.export.evaluate import ArrayPolicy, onnx_policy, task_metric_stats
    from . import reference as R
    tin, tout = graph.tensors[graph.input], graph.tensors[graph.output]
    shape = tuple(tin.shape[1:])

    def integer(x):
        q = R.quantize(x.reshape((-1,) + shape), tin.scale, tin.zero_point, tin.dtype)
        return R.dequantize(R.run(graph, q), tout.scale, tout.zero_point).reshape(len(x), -1)
    return {"fp32": task_metric_stats(task, onnx_policy(fp32_onnx, reference=True)),
            "integer": task_metric_stats(task, ArrayPolicy(integer, name="integer reference"))}


def tflm_baseline(graph, gen, x_q, opts, out) -> dict:
    """Same parameters in TFLite Micro: outputs, arena, flash, host instructions (callgrind)."""
    from . import reference as R
    if graph.io_layout == "tflite":                 # the user's own file: TFLM runs it as it is
        buf, notes, owners = Path(graph.source).read_bytes(), [], graph.owners
    else:
        try:
            buf, notes, owners = tflm.to_tflite_owned(graph)
        except TargetError as e:
            return {"skipped": str(e)}
        (Path(out) / (gen.prefix + ".tflite")).write_bytes(buf)
    res = {"tflm": tflm.tflm_env_note(), "notes": notes, "tflite_bytes": len(buf),
           "model": "the source .tflite itself" if graph.io_layout == "tflite" else "our parameters written as a .tflite"}
    with tempfile.TemporaryDirectory(prefix="tflm_") as d:
        mp = Path(d) / "m.tflite"
        mp.write_bytes(buf)
        ar = tflm.find_arena(mp, d)
        res.update(ar)
        n = min(opts["n_tflm"], len(x_q))
        y = tflm.run(mp, tflm.to_tflm_input(graph, x_q[:n]), d, ar["arena_bytes"]).reshape(n, -1)
        ref = R.run(graph, x_q[:n])
        ref = (ref.transpose(0, 2, 3, 1) if ref.ndim == 4 and graph.io_layout == "onnx" else ref).reshape(n, -1)
        if graph.float_edges[1]:                # a float32 output: TFLM's DEQUANTIZE of the same codes
            to = graph.tensors[graph.output]
            ref = R.dequantize(ref, to.scale, to.zero_point)
            y = y.astype(np.float32)
        if graph.float_edges[1]:                # in LSB of the output's scale (0 when the floats are equal)
            diff = np.abs(y.astype(np.float64) - ref.astype(np.float64)) / float(graph.tensors[graph.output].scale)
            diff = np.ceil(diff).astype(np.int64)
        else:
            diff = np.abs(y.astype(np.int64) - ref.astype(np.int64))
        res["outputs"] = {"n_inputs": n, "bit_exact": bool(diff.max() == 0), "max_lsb": int(diff.max()),
                          "frac_diff": float((diff > 0).mean()), "frac_equal": float((diff.max(axis=1) == 0).mean()),
                          "reason": "; ".join(notes) if diff.max() else ""}
        if graph.io_layout == "tflite":         # the firmware's golden outputs are TFLM's own on those inputs
            from .firmware import test_vectors
            xv, yv, _ = test_vectors(graph, opts["n_vectors"], opts["seed"])
            tv = tflm.run(mp, tflm.to_tflm_input(graph, xv), d, ar["arena_bytes"]).reshape(len(xv), -1)
            if graph.float_edges[1]:
                to = graph.tensors[graph.output]
                yv = R.dequantize(yv, to.scale, to.zero_point)
            res["test_vectors"] = {"n": int(len(xv)), "equal_tflm": bool(np.array_equal(tv.astype(yv.dtype), yv))}
            if not res["test_vectors"]["equal_tflm"]:
                res["outputs"]["frac_equal"] = 0.0      # the gate fails: the firmware would check wrong outputs
        if opts["callgrind"] and (shutil_which("valgrind") or _require_tools()):
            k = opts["n_callgrind"]
            tp = _tflm_per_op_or_note(graph, mp, x_q, d, ar["arena_bytes"], k, owners, res)
            if opts["profile"] and "per_op" in tp:
                from .profile import host_per_op
                res["per_op_host"] = {"ours": host_per_op(gen, x_q, k), "tflm": tp}
            res["instructions_per_inference"] = {
                "ours": simulate.host_callgrind(gen, x_q, k), "tflm": tp["total"],
                "how": "valgrind callgrind, x86-64 host, inclusive instructions of %s_invoke (gcc -O2) vs "
                       "tflite::MicroInterpreter::Invoke (pip tflite-micro), mean over %d inputs" % (gen.prefix, k)}
            ipi = res["instructions_per_inference"]
            ipi["ratio"] = ipi["ours"] / ipi["tflm"]
    res["ram"] = {"ours_arena": gen.plan.arena_bytes, "tflm_arena": res["arena_bytes"],
                  "ratio": gen.plan.arena_bytes / float(res["arena_bytes"])}
    res["flash"] = {"tflm_model": len(buf), "tflm_runtime_estimate": list(tflm.TFLM_RUNTIME_FLASH),
                    "how": ".tflite bytes (measured) + TFLM interpreter code 10-20 KB (public figure, estimate) + kernels"}
    return res


def _tflm_per_op_or_note(graph, mp, x_q, work, arena, k, owners, res) -> dict:
    """TFLM's instructions split by op (tflm.tflm_per_op); when this TFLM build cannot be split (its kernels
    named otherwise), its whole Invoke counted in one piece, and a note says why the per-op column is missing."""
    x = tflm.to_tflm_input(graph, x_q)
    try:
        return tflm.tflm_per_op(mp, x, work, arena, k, owners)
    except TargetError as e:
        res["per_op_note"] = "TFLM's per-op split is not available: %s" % e
        return {"total": tflm.tflm_callgrind(mp, x, work, arena, k)}


def shutil_which(name):
    import shutil
    return shutil.which(name)


def main(argv=None):
    """python -m grpo_edge.targets.esp32.deploy MODEL.int8.onnx [--profile esp32c3] [--out DIR] [--prefix P]"""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m grpo_edge.targets.esp32.deploy", description=main.__doc__)
    ap.add_argument("model")
    ap.add_argument("--profile", default="esp32c3")
    ap.add_argument("--out", default="esp32_out")
    ap.add_argument("--prefix", default=None)
    ap.add_argument("--n-callgrind", type=int, default=10)
    a = ap.parse_args(argv)
    rep = deploy(a.model, a.profile, a.out, {"prefix": a.prefix, "n_callgrind": a.n_callgrind})
    print(rep.to_markdown().split("\n## ")[0])
    print("report: %s/report.md" % a.out)


if __name__ == "__main__":
    main()
