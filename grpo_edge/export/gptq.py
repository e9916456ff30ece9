"""Error-compensating rounding of int8 weights (GPTQ / Optimal Brain Quantization), NumPy only.

Nearest rounding quantizes each weight on its own. When a layer has few inputs of very different
magnitude (a CartPole policy's first layer: 4 state features, one of them ~50x smaller than another),
the per-channel scale is set by the largest weight and the rounding errors of the small ones are not
averaged away: the layer's output moves, and a balancing policy whose two logits are nearly tied flips
its decision. GPTQ rounds the columns (inputs) one at a time and moves each column's rounding error onto
the columns not yet rounded, weighted by the inverse of the input second-moment matrix H = E[x x^T]
measured on calibration data. The grid is unchanged (same per-channel scales, zero point 0, [-127, 127]),
so every target reads the result exactly like a nearest-rounded model.

    q = gptq_round(w, scales, x)            # w (OUT, IN) float, scales (OUT,), x (N, IN) layer inputs
    info = onnx_gptq(fp32.onnx, int8.onnx, {input: array})   # rewrite a QDQ model's Gemm/MatMul weights

Reference: Frantar et al., "GPTQ" (2022), after Hassibi & Stork's Optimal Brain Surgeon.
"""
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError

QMAX = 127


def gptq_round(w, scales, x, damp: float = 0.01) -> np.ndarray:
    """w (OUT, IN) float weights, scales (OUT,) per-channel steps, x (N, IN) calibration inputs of the
    layer -> (OUT, IN) int8 codes on the same grid, chosen to keep x @ w.T close to the float result."""
    w = np.array(w, dtype=np.float64)
    s = np.asarray(scales, dtype=np.float64).reshape(-1, 1)
    x = np.asarray(x, dtype=np.float64).reshape(-1, w.shape[1])
    if len(x) == 0:
        raise ExportError("GPTQ needs calibration inputs for the layer")
    h = x.T @ x / len(x)
    dead = np.diag(h) == 0                 # an input that is always 0: its weights do not matter
    h[dead, dead] = 1.0
    h += damp * np.mean(np.diag(h)) * np.eye(len(h))
    # Upper Cholesky factor of H^-1: row j holds how column j's error spreads to later columns.
    u = np.linalg.cholesky(np.linalg.inv(h)).T
    q = np.zeros(w.shape, dtype=np.int8)
    safe = np.where(s > 0, s, 1.0)
    for j in range(w.shape[1]):
        code = np.clip(np.round(w[:, j:j + 1] / safe), -QMAX, QMAX)
        q[:, j] = code[:, 0].astype(np.int8)
        err = (w[:, j] - code[:, 0] * safe[:, 0]) / u[j, j]
        w[:, j + 1:] -= np.outer(err, u[j, j + 1:])
    return q


def layer_output_error(w, q, scales, x) -> float:
    """Mean squared error of x @ w.T when the weights are the codes q times their scales."""
    x = np.asarray(x, dtype=np.float64)
    deq = q.astype(np.float64) * np.asarray(scales, dtype=np.float64).reshape(-1, 1)
    return float(np.mean((x @ (deq - np.asarray(w, dtype=np.float64)).T) ** 2))


def onnx_gptq(fp32_path, qdq_path, data: dict, out_path=None) -> dict:
    """Re-round the int8 weights of every Gemm / MatMul of the QDQ model `qdq_path` (made by onnx2int8
    from `fp32_path`) with GPTQ, using the layer inputs the fp32 model computes on `data` ({input: array}).
    Scales, zero points and biases stay as they are. Writes `out_path` (default: in place). Returns
    {layer name: {"mse_nearest", "mse_gptq"}} on the calibration inputs."""
    import onnx
    from onnx import numpy_helper

    from grpo_edge.export.onnx_utils import tensor_values
    from grpo_edge.report import atomic_write_bytes
    fp32 = onnx.load(str(fp32_path))
    qdq = onnx.load(str(qdq_path))
    inits = {i.name: i for i in qdq.graph.initializer}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    fp32_nodes = {n.name: n for n in fp32.graph.node if n.name}
    jobs = []                                   # (node name, fp32 input tensor, weight init, scale init, transposed)
    for node in qdq.graph.node:
        if node.op_type not in ("Gemm", "MatMul") or node.name not in fp32_nodes:
            continue
        dq = producer.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
            continue
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0) if node.op_type == "Gemm" else 0
        jobs.append((node.name, fp32_nodes[node.name].input[0], dq.input[0], dq.input[1], bool(trans_b)))
    if not jobs:
        return {}
    values = tensor_values(fp32_path, data, sorted({t for _, t, _, _, _ in jobs}))    # the fp32 layer inputs
    acts = {t: v.reshape(-1, v.shape[-1]) for t, v in values.items()}
    fp32_inits = {i.name: numpy_helper.to_array(i) for i in fp32.graph.initializer}
    report = {}
    for name, t, wname, sname, trans_b in jobs:
        codes = numpy_helper.to_array(inits[wname])
        scales = numpy_helper.to_array(inits[sname]).astype(np.float64).reshape(-1)
        wf = fp32_inits.get(fp32_nodes[name].input[1])
        if wf is None or codes.dtype != np.int8 or wf.shape != codes.shape:
            continue
        w = wf if trans_b else wf.T                    # (OUT, IN)
        old = codes if trans_b else codes.T
        sc = np.repeat(scales, w.shape[0]) if scales.size == 1 else scales
        x = acts[t]
        new = gptq_round(w, sc, x)
        report[name] = {"mse_nearest": layer_output_error(w, old, sc, x), "mse_gptq": layer_output_error(w, new, sc, x)}
        if report[name]["mse_gptq"] < report[name]["mse_nearest"]:
            inits[wname].CopyFrom(numpy_helper.from_array(new if trans_b else np.ascontiguousarray(new.T), wname))
        else:
            report[name]["kept"] = "nearest"
    atomic_write_bytes(Path(out_path or qdq_path), qdq.SerializeToString())
    return report
