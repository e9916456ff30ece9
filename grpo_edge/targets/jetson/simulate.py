"""Host simulation of the Jetson engines' numerics with onnxruntime (CPU), and the comparisons.

- fp32: the simplified ONNX as is (the reference).
- fp16: the model converted to float16 by onnxruntime's own converter
  (onnxruntime.transformers.float16.convert_float_to_float16, inputs/outputs kept float32) and run by
  onnxruntime in fp16: weights and activations are rounded to fp16 at every op, as in a TensorRT
  --fp16 engine (TensorRT may still pick fp32 kernels for some layers, so this is the fp16-everywhere case).
- int8, TensorRT 8 (cache): quantize.fake_quant_model with the scales read back from the written cache.
- int8, TensorRT 10 (Q/DQ): the Q/DQ ONNX itself.
All run with graph optimizations off, so onnxruntime executes exactly the ops the graph describes
(its fused int8 kernels would add their own rounding).
"""
from typing import Dict, List

import numpy as np


def session(model):
    """An onnxruntime CPU session on a ModelProto or path, graph optimizations off, 1 thread."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model if isinstance(model, (str, bytes)) else (model.SerializeToString() if hasattr(model, "SerializeToString")
                                                         else str(model))
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def fp16_model(model):
    """float16 copy of a ModelProto (float32 inputs/outputs kept, casts inserted at the edges)."""
    import logging
    from onnxruntime.transformers.float16 import convert_float_to_float16
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        return convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=False)
    finally:
        logging.getLogger().setLevel(level)


def run_all(sess, feeds: List[Dict[str, np.ndarray]]) -> List[List[np.ndarray]]:
    return [sess.run(None, f) for f in feeds]


def compare(ref: List[List[np.ndarray]], got: List[List[np.ndarray]]) -> dict:
    """Max/mean absolute error, error relative to the reference's range, the share of samples whose every
    output is within 1% of that output's range (output_agreement), and (for outputs with a last axis > 1,
    i.e. logits) how often the argmax agrees. Aggregated over batches and outputs; a sample is a row of the
    first output, and an output whose first axis is not the batch (a key/value cache) does not judge rows."""
    max_abs, sum_abs, n, ref_max, agree, total = 0.0, 0.0, 0, 0.0, 0, 0
    span = {}                                     # per output: the range of the reference's values
    for r_outs in ref:
        for i, r in enumerate(r_outs):
            lo, hi = span.get(i, (np.inf, -np.inf))
            span[i] = (min(lo, float(r.min())), max(hi, float(r.max()))) if r.size else (lo, hi)
    close, samples = 0, 0
    for r_outs, g_outs in zip(ref, got):
        ok = None
        for i, (r, g) in enumerate(zip(r_outs, g_outs)):
            r = r.astype(np.float64)
            g = g.astype(np.float64)
            d = np.abs(r - g)
            if r.ndim >= 1 and r.size and len(r) == len(r_outs[0]):
                width = max(span[i][1] - span[i][0], 1e-12)
                row = (d.reshape(len(r), -1) <= 0.01 * width).all(-1)
                ok = row if ok is None else ok & row
            max_abs = max(max_abs, float(d.max()) if d.size else 0.0)
            sum_abs += float(d.sum())
            n += d.size
            ref_max = max(ref_max, float(np.abs(r).max()) if r.size else 0.0)
            if r.ndim >= 2 and r.shape[-1] > 1:
                agree += int((r.argmax(-1) == g.argmax(-1)).sum())
                total += int(np.prod(r.shape[:-1]))
        if ok is not None:
            close, samples = close + int(ok.sum()), samples + len(ok)
    out = {"max_abs_err": max_abs, "mean_abs_err": sum_abs / max(n, 1),
           "rel_err": max_abs / ref_max if ref_max > 0 else 0.0, "samples": samples}
    if samples:
        out["output_agreement"] = close / samples
    if total:
        out["argmax_agreement"] = agree / total
    return out


def onnx_policy(sess):
    """A torch.nn.Module that runs `sess` (single float input -> first output), so a task's
    evaluate(policy) can score a simulated engine exactly as it scores the checkpoint."""
    import torch

    class OnnxPolicy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self._anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)   # .parameters() / device
            self._name = sess.get_inputs()[0].name

        def forward(self, x):
            out = sess.run(None, {self._name: x.detach().cpu().numpy().astype(np.float32)})[0]
            return torch.from_numpy(out)

    return OnnxPolicy()
