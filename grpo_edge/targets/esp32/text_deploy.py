"""deploy_text(): a micro-gpt / tiny-transformer checkpoint -> C for the ESP32 + report (16x8 integers).

    from grpo_edge.targets.esp32.text_deploy import deploy_text
    rep = deploy_text("runs/arithmetic/best.pt", "esp32s3", "out/", {})

Steps: checkpoint -> textir (float IR) -> calibration on train prompts (the fp32 NumPy model decodes
them greedily) -> integer model -> fit check against the profile (fails before generating, with the
numbers) -> generated C (+ the firmware's prompt mode) -> proof: host C == NumPy reference on every
generated token of the held-out prompts (also under ASan/UBSan), rv32 in unicorn bit-exact with exact
instruction counts, completions vs the fp32 checkpoint, time per answer ESTIMATES for ESP32-S3 / C3.
"""
import time
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError
from grpo_edge.report import Report, atomic_write_text

DEFAULTS = {"prefix": None, "n_eval": 1000, "n_rv32": 20, "n_calib": 512, "rv32": True, "tflm": True,
            "host_opts": ("-O2",), "sanitize": None, "firmware": True, "goal_s": 0.3, "activations": None,
            "profile": True, "min_agreement": None, "min_retention": None}
CODE_BYTES_ESTIMATE = 12 * 1024          # generated step + kernels at -O2 (rv32 .text measured 6-9 KB)
STACK_ESTIMATE = 1024
ESTIMATE_TARGETS = ("esp32s3", "esp32c3")


def is_text_checkpoint(path) -> bool:
    """True for a micro-gpt / tiny-transformer checkpoint (those take the text path on an ESP32)."""
    from grpo_edge.core.checkpoint import load_checkpoint
    from .textir import TEXT_ARCHS
    return load_checkpoint(path).get("arch") in TEXT_ARCHS


def _fig(profile, key, default=None):
    f = (profile.get("figures") or {}).get(key)
    if f is None:
        return default, ""
    return float(f["value"]), "%s profile: %s" % (profile.get("name"), f.get("source", ""))


def estimate_bytes(ir) -> int:
    """Constant bytes of the integer model from the float IR's shapes (before calibrating): int8 weights +
    9 bytes per output channel (bias, multiplier, shift), int16 embeddings, 1 KB per int16 table."""
    n = 0
    for k, v in ir.w.items():
        if k.endswith("_w") or k == "head":
            n += v.size + 9 * v.shape[0]
        elif k in ("tok", "pos", "src_pos", "tgt_pos"):
            n += 2 * v.size
        elif k.endswith("_g"):
            n += 9 * v.size
    return n + 1026 * (2 + ir.cfg["n_layer"])


def fit_check(q, profile, ir=None) -> dict:
    """Flash (weights + tables + code) and RAM (arena + stack) against the chip, before generating.
    With ir (and q None): the same check from the float model's shapes, before calibrating."""
    from .deploy import APP_PARTITION, IDF_FLASH_RESERVED, IDF_RAM_RESERVED
    from .textgen_c import arena_plan
    from .textir import weight_bytes
    name = profile.get("name", "?")
    if q is None:
        q = {"arch": ir.arch, "cfg": ir.cfg}
        wbytes = estimate_bytes(ir)
    else:
        wbytes = weight_bytes(q)
    arena = arena_plan(q["cfg"])["bytes"] if q["arch"] == "micro-gpt" else _s2s_arena(q)
    flash_total = int(_fig(profile, "flash_bytes", 4 << 20)[0])
    flash_avail = min(flash_total, APP_PARTITION) - IDF_FLASH_RESERVED
    sram = int(_fig(profile, "sram_bytes", 320 * 1024)[0])
    ram_avail = sram - IDF_RAM_RESERVED
    flash_need = wbytes + CODE_BYTES_ESTIMATE
    ram_need = arena + STACK_ESTIMATE
    c = q["cfg"]
    shape = "d_model %d, %d layers, %d heads" % (c["d"], c["n_layer"], c["n_head"])
    if flash_need > flash_avail:
        raise TargetError("text model (%s) needs about %d bytes of flash (weights and tables %d + code %d); %s allows "
                          "%d (%d B flash, %d B app partition, %d B for ESP-IDF): use a smaller model"
                          % (shape, flash_need, wbytes, CODE_BYTES_ESTIMATE, name, flash_avail, flash_total,
                             APP_PARTITION, IDF_FLASH_RESERVED))
    if ram_need > ram_avail:
        raise TargetError("text model (%s) needs %d bytes of RAM (KV cache and activations %d + stack %d); %s allows "
                          "%d (%d B SRAM minus %d B for ESP-IDF): use a shorter context or a smaller model"
                          % (shape, ram_need, arena, STACK_ESTIMATE, name, ram_avail, sram, IDF_RAM_RESERVED))
    return {"flash_needed_estimate": flash_need, "flash_available": flash_avail, "weights_and_tables_bytes": wbytes,
            "ram_needed_estimate": ram_need, "ram_available": ram_avail, "arena_bytes": arena}


def _s2s_arena(q):
    from .textgen_s2s import arena_plan_s2s
    return arena_plan_s2s(q["cfg"])["bytes"]


def step_weight_bytes(q) -> int:
    """Constant bytes one decode step reads: everything for a micro-gpt; for an encoder-decoder the decoder,
    its embeddings and the head (the encoder and the cross key/value projections run once, in the prefill)."""
    import re
    if q["arch"] == "micro-gpt":
        from .textir import weight_bytes
        return weight_bytes(q)
    skip = re.compile(r"^(e\d+_|tok16e$|src_pos16$|enc_ln_|d\d+_x[kv]_)")
    return int(sum(np.asarray(v).nbytes for k, v in q["const"].items() if not skip.match(k)))


def answer_time(prof, instr_prefill, instr_decode, n_decode, input_len, weight_bytes, memory="flash",
                step_bytes=None) -> dict:
    """ESTIMATE of one answer on `prof`: per token max(compute, memory); compute = rv32 instructions
    (x the Xtensa factor on Xtensa chips) x CPI / clock, memory = the weights every step streams / bandwidth
    (the prefill: input_len passes over weight_bytes; a decode step: step_bytes, default weight_bytes)."""
    from .rv32 import CPI_RV32
    clock, s_clock = _fig(prof, "clock_hz")
    bw, s_bw = _fig(prof, "%s_read_bytes_per_s" % memory)
    factor, s_factor = _fig(prof, "xtensa_instr_per_rv32_instr", 1.0)
    if not clock or not bw:
        return {}
    k = factor * CPI_RV32 / clock
    comp_pre, comp_dec = instr_prefill * k, instr_decode * k
    mem_tok = (weight_bytes if step_bytes is None else step_bytes) / bw
    pre = max(comp_pre, input_len * weight_bytes / bw)   # prefill: one step per prompt token, each streams the weights
    dec = max(comp_dec, mem_tok)
    total = pre + n_decode * dec
    return {"answer_s": total, "prefill_s": pre, "decode_token_s": dec, "compute_prefill_s": comp_pre,
            "compute_decode_token_s": comp_dec, "memory_token_s": mem_tok, "memory": memory,
            "decode_tokens": n_decode, "tokens_per_s": 1.0 / dec, "tokens_per_s_memory_limit": 1.0 / mem_tok,
            "bound": "memory" if mem_tok > comp_dec else "compute",
            "model": ("per token max(compute, memory); compute = rv32imc instructions x %.3g (rv32 -> core factor) x "
                      "CPI %.2g (assumed) / %.0f MHz; memory = %d weight bytes per decode step (prefill %d x %d) / %.3g B/s (%s)"
                      % (factor, CPI_RV32, clock / 1e6, weight_bytes if step_bytes is None else step_bytes,
                         input_len, weight_bytes, bw, memory)),
            "sources": [s for s in (s_clock, s_bw, s_factor) if s]}


def deploy_text(checkpoint, profile, out_dir, options=None) -> Report:
    """A text checkpoint -> out_dir/{firmware/ or text_c/, report.json, report.md}; see the module docstring."""
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.tasks import task_from_state
    from grpo_edge.targets.profiles import load_profile
    from . import textsim
    from .cc import check_prefix
    from .text_model import textir2int, write_c
    from .textir import checkpoint2textir, weight_bytes

    opts = dict(DEFAULTS)
    unknown = set(options or {}) - set(DEFAULTS)
    if unknown:
        raise TargetError("unknown esp32 text deploy option(s): %s (known: %s)"
                          % (", ".join(sorted(unknown)), ", ".join(sorted(DEFAULTS))))
    opts.update({k: v for k, v in (options or {}).items() if v is not None})
    prof = load_profile(profile) if isinstance(profile, str) else profile
    model, state = load_policy(checkpoint) if not isinstance(checkpoint, tuple) else checkpoint
    task = task_from_state(state)
    ir = checkpoint2textir((model, state))
    prefix = check_prefix(opts["prefix"] or str(state.get("task") or "model").replace("-", "_"))
    out = Path(out_dir)
    t0 = time.time()
    if opts["activations"] not in (None, "auto", "int16"):
        raise TargetError("the ESP32 text path computes with int16 activations (16x8); --activations %s is not "
                          "available for text models" % opts["activations"])
    fit_check(None, prof, ir)                                   # from the shapes: too big -> error before calibrating
    calib = [p for p, _ in task.train_problems[:int(opts["n_calib"])]]
    q = textir2int(ir, calib)
    fit = fit_check(q, prof)                                    # too big -> TargetError, nothing written
    c = q["cfg"]
    rep = Report(title="ESP32 text deploy: %s (%s)" % (ir.arch, state.get("task")), target=prof.get("name", ""))
    rep.notes.append("Arithmetic: 16x8 (int16 activations, int8 per-channel weights, int32 bias), TFLite rules where "
                     "TFLite has them (FC, int16 softmax tables, int64-accumulator requantization, ADD); our integer "
                     "layer norm and int16 GELU table (docs/esp32.md, text path).")
    rep.sections["model"] = {k: c[k] for k in ("d", "n_layer", "n_head", "hd", "ff", "vocab", "input_len",
                                               "max_new_tokens", "max_len") if k in c}
    rep.sections["model"]["arch"] = ir.arch
    rep.sections["fit_check"] = fit
    rep.add("activations", "int16", "", "exact", "16x8: int16 activations and KV cache, int8 weights")
    rep.add("weights_bytes", weight_bytes(q), "B", "exact", "int8 weights, int16 embeddings, int32 biases and "
            "multipliers, shifts, int16 tables (all static const: flash)")
    rep.add("arena_bytes", fit["arena_bytes"], "B", "exact", "static int16 arena: KV cache (or encoder memory + caches) "
            "and activation buffers")

    # held-out prompts: fp32 torch vs integer reference
    prompts, ints = _agreement_stage(rep, task, model, q, int(opts["n_eval"]))
    n = len(prompts)

    # generated C: host bit-exactness (and sanitizers)
    host = textsim.host_check(q, prefix, prompts, opts=tuple(opts["host_opts"]), sanitize=opts["sanitize"])
    host.pop("answers", None)
    rep.sections["host_simulation"] = host
    rep.add("host_bit_exact", host["bit_exact"], "", "measured-host",
            "gcc %s builds %s: generated token ids and a hash of every decision step's int16 logits == NumPy "
            "reference, %d prompts (%d tokens)" % (" ".join(textsim.CFLAGS), ", ".join(host["builds"]), n,
                                                   host["tokens_compared"]))
    if not host["bit_exact"]:
        raise TargetError("generated text C differs from the NumPy reference on the host: %s" % host["builds"])
    if opts["firmware"]:
        from .textfw import assemble_text
        fw = assemble_text(q, prefix, out, prompts[:4], ints[:4], chip=prof.get("name", "esp32s3"))
        rep.sections["firmware"] = fw
    else:
        files = write_c(q, out / "text_c", prefix)
        rep.sections["generated"] = {k: str(v) for k, v in files.items() if k != "arena"}

    # rv32 (ESP32-C3 ISA) in unicorn: bit-exact, instructions per prefill and per decode token
    _rv32_stage(rep, q, prefix, prompts, prof, opts, fit["arena_bytes"])
    _per_op_stage(rep, q, prefix, prompts, out, fit["arena_bytes"], opts)
    if opts["tflm"] and q["arch"] == "micro-gpt":
        from . import text_tflm
        if text_tflm.available():
            rep.sections["tflm_baseline"] = text_tflm.baseline(q, out)
        else:
            rep.notes.append("TFLite Micro baseline skipped: pip install tflite-micro")
    rep.sections["timing_host_s"] = round(time.time() - t0, 1)
    return _finish(out, prompts, prefix, prof, opts, rep)


def _finish(out, prompts, prefix, prof, opts, rep):
    """The quality gate, prompts.txt, the folder's README.md (with a firmware) and the report."""
    from grpo_edge.targets import gate
    threshold = gate.check_threshold("min_agreement", opts["min_agreement"] if opts["min_agreement"] is not None
                                     else gate.MIN_AGREEMENT)
    rep.gate = gate.decide("completion agreement", rep.figures["completions_identical_to_fp32"].value, threshold,
                           len(prompts), "held-out prompts, greedy answers of the integer reference (the C) identical "
                           "to the fp32 checkpoint's", [], "16x8")
    atomic_write_text(out / "prompts.txt", "".join(p + "\n" for p in prompts))
    if opts["firmware"]:
        from .readme import write_text_readme
        write_text_readme(out, prefix, prof.get("name", "esp32s3"), rep, rep.sections["firmware"])
    rep.write(out)
    return rep


def _per_op_stage(rep, q, prefix, prompts, out, arena, opts):
    """The decode step op by op (text_profile.py): report sections per_op / per_op_totals and per_op.png
    (after the rv32 stage ran; --option profile=false skips it)."""
    if not opts["profile"] or "rv32_simulation" not in rep.sections:
        return
    from .profile import per_op_chart
    from .text_profile import by_kind, text_per_op
    prof = text_per_op(q, prefix, prompts)
    prof["totals"]["arena_bytes"] = int(arena)
    rep.sections["per_op"] = prof["ops"]
    rep.sections["per_op_totals"] = prof["totals"]
    out.mkdir(parents=True, exist_ok=True)
    per_op_chart(by_kind(prof), out / "per_op.png", "%s decode step: rv32imc instructions per op, all layers "
                 "(exact, mean of %d tokens)" % (prefix, prof["totals"]["decode_tokens"]), per="decode token")
    rep.notes.append("Per-op profile of the decode step (sections per_op, per_op_totals; per_op.png sums the layers): "
                     "rv32imc instructions counted at the GX_MARK before each call of the step, in a build with an "
                     "empty gx_mark call there, mean per decode token over the answers to %d prompts; attention MACs "
                     "over the positions attended. The ops' sum is within a few percent of the unmarked step's count "
                     "(per_op_totals has both)." % prof["totals"]["prompts"])


def _rv32_stage(rep, q, prefix, prompts, prof, opts, arena):
    """rv32 build in unicorn (bit-exact, exact counts), then the S3 / C3 time-per-answer ESTIMATES."""
    from grpo_edge.targets.profiles import load_profile
    from . import rv32, textsim
    from .textir import weight_bytes
    c = q["cfg"]
    wb = weight_bytes(q)
    if opts["rv32"] and rv32.available():
        r = textsim.rv32_check(q, prefix, prompts[:int(opts["n_rv32"])])
        rep.sections["rv32_simulation"] = r
        rep.add("rv32_bit_exact", r["bit_exact"], "", "measured-host",
                "unicorn rv32imc vs NumPy reference (ids + logit hash), %d prompts" % r["n_prompts"])
        ip, idc = r["instructions_prefill"]["mean"], r["instructions_per_decode_token"]["mean"]
        rep.add("rv32_instructions_prefill", int(round(ip)), "instr", "measured-host",
                "exact count, %d prompt tokens one step each (mean over %d prompts), %s"
                % (c["input_len"], r["n_prompts"], r["compiler"]))
        rep.add("rv32_instructions_per_decode_token", int(round(idc)), "instr", "measured-host",
                "exact count per decode step (mean over %d steps)" % r["instructions_per_decode_token"]["n"])
        flash = r["sections"]["text"] + r["sections"]["rodata"] + r["sections"]["data"]
        rep.add("flash_bytes", flash, "B", "measured-host", "rv32imc -O2 ELF: .text + .rodata + .data of the model")
        rep.add("ram_bytes", arena + r["stack_bytes"], "B", "measured-host",
                "arena %d + measured rv32 stack %d" % (arena, r["stack_bytes"]))
        n_dec = r["decode_tokens_per_answer"]
        est = {}
        for tname in sorted(ESTIMATE_TARGETS, key=lambda t: t != prof.get("name")):     # the chip asked for first
            tp = load_profile(tname)
            mems = ["flash"] + (["psram"] if _fig(tp, "psram_read_bytes_per_s")[0] else [])
            for mem in mems:
                e = answer_time(tp, ip, idc, n_dec, c["input_len"] if q["arch"] == "micro-gpt" else 1, wb, mem,
                                step_weight_bytes(q))
                if not e:
                    continue
                key = tname if mem == "flash" else "%s_psram" % tname
                est[key] = e
                src = e["model"] + "; decode tokens per answer %.2g (mean of the rv32 prompts) [%s]" % (
                    n_dec, " | ".join(e["sources"]))
                rep.add("answer_time_%s_s" % key, e["answer_s"], "s", "estimated", src)
                rep.add("tokens_per_s_%s" % key, e["tokens_per_s"], "tok/s", "estimated",
                        "1 / decode step time, same model as answer_time_%s_s; memory-bandwidth limit alone %.0f tok/s"
                        % (key, e["tokens_per_s_memory_limit"]))
        rep.sections["time_estimates"] = est
        if prof.get("name") in est:
            e = est[prof["name"]]
            rep.notes.append("ESTIMATE for %s: %.0f ms per answer (prefill %.0f ms + %.2g x %.1f ms per decode token, "
                             "%s-bound; compute %.1f ms vs memory %.1f ms per token), goal %.0f ms: %s."
                             % (prof["name"], 1e3 * e["answer_s"], 1e3 * e["prefill_s"], e["decode_tokens"],
                                1e3 * e["decode_token_s"], e["bound"], 1e3 * e["compute_decode_token_s"],
                                1e3 * e["memory_token_s"], 1e3 * opts["goal_s"],
                                "met" if e["answer_s"] < opts["goal_s"] else "NOT met"))
    elif opts["rv32"]:
        rep.notes.append("rv32 simulation skipped: %s" % rv32.missing_reason())


def _agreement_stage(rep, task, model, q, n_eval):
    """Greedy completions of the held-out prompts: fp32 torch vs the integer reference. -> (prompts, answers)."""
    from .text_model import run_prompts
    problems = task.test_problems[:n_eval]
    prompts, refs = [p for p, _ in problems], [r for _, r in problems]
    fp32 = task.greedy_completions(model, prompts)
    ref = run_prompts(q, prompts)
    ints = [r["answer"] for r in ref]
    agree = float(np.mean([a == b for a, b in zip(fp32, ints)]))
    em_fp = float(np.mean([a == b for a, b in zip(fp32, refs)]))
    em_int = float(np.mean([a == b for a, b in zip(ints, refs)]))
    n = len(prompts)
    rep.add("completions_identical_to_fp32", agree, "fraction", "measured-host",
            "integer reference (the C's arithmetic) vs the fp32 torch checkpoint, greedy, %d held-out prompts" % n)
    rep.add("exact_match_fp32", em_fp, "fraction", "measured-host", "torch checkpoint, greedy, %d held-out prompts" % n)
    rep.add("exact_match_int", em_int, "fraction", "measured-host", "integer reference, same prompts")
    rep.sections["examples"] = [{"prompt": p, "fp32": a, "int": b, "reference": r}
                                for p, a, b, r in list(zip(prompts, fp32, ints, refs))[:5]]
    return prompts, ints
