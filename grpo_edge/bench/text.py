"""Bench rows for text models: the task metric through the ONNX generation loop, latency per completion.

    calls = text_rows(rows, checkpoint, model, state, task, out_dir, opts, run_row)     # used by grpo_edge/bench/table.py

Each row's metric is the task's metric (exact match) of greedy completions of the held-out prompts
task.evaluate scores; host latency is the median time of one batch-1 greedy completion of the first of
those prompts (torch: model.generate; ONNX: the deploy runner's loop, grpo_edge/runtime/textgen.py).
int8 is calibrated on decode-step inputs recorded from fp32 ONNX decoding and quantizes MatMul/Gemm only
(why: grpo_edge/targets/rpi_text.py). TFLite has no generation loop here: those rows say so.
"""
import io
import tempfile
from pathlib import Path


def text_rows(rows, checkpoint, model, state, task, out, opts, run_row) -> list:
    """Fill rows["torch" | "onnx fp32" | "onnx int8"] in place; returns the MACs per model call of a completion."""
    import torch
    from grpo_edge.export.evaluate import eval_problems, median_latency, text_metric
    from grpo_edge.export.decode_calibration import decode_calibration, part_path, text_config
    from grpo_edge.export.onnx2int8 import onnx2int8
    from grpo_edge.export.torch2onnx import torch2onnx
    from grpo_edge.targets.rpi_text import TEXT_OPS
    from grpo_edge.runtime.textgen import TextGenerator, model_files, ort_functions

    cfg = text_config(state)
    problems = eval_problems(task, opts["eval_n"])
    prompts = [p for p, _ in problems]
    files = {"onnx fp32": model_files(str(out / "model.onnx"), cfg["arch"]),
             "onnx int8": model_files(str(out / "model.int8.onnx"), cfg["arch"])}
    runs, warmup = max(1, opts["runs"] // 10), max(1, opts["warmup"] // 10)    # a completion is many calls
    model.eval()
    new_tokens = [cfg["max_new_tokens"]]

    def torch_row(r):
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        r.update(file=str(checkpoint), size_bytes=len(buf.getvalue()),
                 metric=text_metric(task, task.greedy_completions(model, prompts), problems))
        x = task.encode_inputs(prompts[:1])
        threads = torch.get_num_threads()
        torch.set_num_threads(1)          # the legend's "1 thread", as the ONNX rows
        try:
            with torch.no_grad():
                r["host_latency_s"] = median_latency(
                    lambda a: model.generate(a, cfg["max_new_tokens"], greedy=True), x, runs, warmup)
        finally:
            torch.set_num_threads(threads)

    def onnx_row(fmt):
        def build(r):
            if fmt == "onnx fp32":
                torch2onnx(model, out / "model.onnx")
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    calib = Path(tmp) / "calibration.npz"
                    if opts["calibration"]:
                        calib = Path(opts["calibration"])
                    else:
                        decode_calibration(cfg, ort_functions(str(out / "model.onnx"), cfg), task, calib,
                                           opts["calibration_samples"], "model.onnx (fp32)", opts["seed"])
                    for part, f32 in files["onnx fp32"].items():
                        onnx2int8(f32, part_path(calib, part), files[fmt][part], method=opts["method"],
                                  op_types=TEXT_OPS)
            paths = list(files[fmt].values())
            r.update(file=" + ".join(Path(p).name for p in paths),
                     size_bytes=sum(Path(p).stat().st_size for p in paths))
            name, int8 = str(out / ("model.int8.onnx" if fmt == "onnx int8" else "model.onnx")), fmt == "onnx int8"
            ref = TextGenerator(cfg, ort_functions(name, cfg, reference=int8))      # int8: QDQ reference arithmetic
            r["metric"] = text_metric(task, ref.complete(prompts), problems)
            b = TextGenerator(cfg, ort_functions(name, cfg)).bench(prompts[0], runs, warmup)
            r["host_latency_s"] = b["per_completion_median_s"]
            new_tokens[0] = b["new_tokens"]
        return build

    run_row("torch", torch_row)
    run_row("onnx fp32", onnx_row("onnx fp32"))
    run_row("onnx int8", onnx_row("onnx int8"))
    for fmt in ("tflite fp32", "tflite int8"):
        rows[fmt]["status"] = "unsupported: text generation (decode loop with a KV cache / prefix) has no TFLite runner"
    if not all(Path(p).exists() for p in files["onnx fp32"].values()):
        return []
    from grpo_edge.export.onnx_utils import completion_macs
    return completion_macs(cfg, files["onnx fp32"], new_tokens[0])


def text_legend(leg: dict, opts: dict, n_calls: int) -> dict:
    """The legend entries that differ for text models (figures per completion)."""
    leg = dict(leg)
    leg["metric"] = ("measured-host: %s of greedy completions of the prompts task.evaluate scores (eval_n=%s); "
                     "onnx rows decode with the deploy runner's loop, onnx int8 with ORT graph optimizations off "
                     "(QDQ reference arithmetic)" % ("task metric", opts["eval_n"] or "task default"))
    for k in list(leg):
        if k.endswith("_latency_s") and k != "host_latency_s":
            leg[k] = "per completion, " + leg[k].replace("call_overhead_s + ", "%d model calls x call_overhead_s + "
                                                         % n_calls)
        elif k.endswith("_energy_j"):
            leg[k] = "per completion, " + leg[k]
    leg["host_latency_s"] = ("measured-host: one batch-1 greedy completion of the first held-out prompt per call, "
                             "%d warm-up then median of %d, in-process, 1 thread (torch model.generate / the "
                             "deploy runner's ONNX decode loop)" % (max(1, opts["warmup"] // 10),
                                                                      max(1, opts["runs"] // 10)))
    return leg
