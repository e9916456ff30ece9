"""Calibration ranges, the TensorRT calibration cache, the Q/DQ model and the host simulation graphs.

One set of ranges serves every int8 artefact, so they cannot disagree:

    calibration feeds --collect_amax--> amax {tensor: max |x|}   (our own pass, onnxruntime, fp32 model)
        -> calibration cache (TensorRT 8.x implicit int8): scale = amax / 127 per tensor
        -> Q/DQ ONNX (TensorRT >= 10.1 explicit int8): the same scale on every activation Q/DQ pair
           (onnxruntime.quantization.quantize_static with TensorQuantOverrides), weights per channel
        -> fake-quant ONNX (host simulation of the cache): Q/DQ after every cached tensor with the
           scales read back from the written cache file

Range method: "minmax" (amax = max |x| over all calibration inputs; nothing clipped) or "percentile"
(the 99.99th percentile of |x|). Small control policies have few, meaningful outliers, hence minmax by
default. The cache header names the calibrator class that reads it back (trtexec uses
IInt8EntropyCalibrator2), not the range method: TensorRT skips a cache whose header names another class.
"""
from typing import Dict, List

import numpy as np

from grpo_edge.errors import ExportError

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _float_tensor_names(model) -> List[str]:
    """Graph inputs and node outputs (in graph order) that may carry float activations."""
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init and i.type.tensor_type.elem_type == 1]
    for node in model.graph.node:
        if node.op_type in ("Shape", "Constant", "ConstantOfShape", "Size"):
            continue
        names += [o for o in node.output if o]
    return names


def collect_amax(model, feeds: List[Dict[str, np.ndarray]], method: str = "minmax",
                 percentile: float = 99.99) -> Dict[str, float]:
    """amax per float activation tensor of `model` (ModelProto) over the calibration `feeds`.

    Also covers the constant B/C inputs of MatMul/Gemm (TensorRT 8's parser turns them into constant
    layers whose outputs need a range too); Conv weights are quantized per channel by TensorRT itself.
    """
    import onnx
    import onnxruntime as ort
    if method not in ("minmax", "percentile"):
        raise ExportError("calibration method must be minmax or percentile, got %r" % method)
    if not feeds:
        raise ExportError("int8 calibration needs at least one input batch")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    outs = {o.name for o in m.graph.output}
    names = _float_tensor_names(m)
    for n in names:
        if n not in outs and n not in {i.name for i in m.graph.input}:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    seen = {}
    for feed in feeds:
        values = dict(zip(out_names, sess.run(None, feed)))
        values.update(feed)
        for n in names:
            v = values.get(n)
            if v is None or v.dtype != np.float32:
                continue
            a = np.abs(v).ravel()
            seen.setdefault(n, []).append(a if method == "percentile" else np.array([a.max() if a.size else 0.0]))
    amax = {}
    for n in names:
        if n in seen:
            allv = np.concatenate(seen[n])
            amax[n] = float(np.percentile(allv, percentile) if method == "percentile" else allv.max())
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm"):
            for name in node.input[1:2]:
                if name in inits:
                    w = onnx.numpy_helper.to_array(inits[name])
                    amax[name] = float(np.abs(w).max())
    return amax


def scales_from_amax(amax: Dict[str, float]) -> Dict[str, float]:
    """TensorRT's symmetric int8 scale: amax / 127, rounded to float32 (what the cache stores)."""
    return {k: float(np.float32(np.float32(v) / np.float32(127.0))) for k, v in amax.items()}


def fake_quant(x: np.ndarray, scale, axis=None) -> np.ndarray:
    """Symmetric int8 quantize-dequantize, round half to even, clamp to [-127, 127] (TensorRT's range).
    scale: a scalar, or one per slice along `axis`."""
    s = np.asarray(scale, dtype=np.float32)
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        s = s.reshape(shape)
    safe = np.where(s == 0, np.float32(1), s)
    q = np.clip(np.rint(x / safe), -127, 127)
    return np.where(s == 0, np.float32(0), q * safe).astype(np.float32)


def _weight_axis(node) -> int:
    """Output-channel axis of a weighted op's constant input 1."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        return 0 if trans_b else 1
    return -1   # MatMul (K, N)


def fake_quant_model(model, scales: Dict[str, float]):
    """The host simulation of a TensorRT 8 implicit-int8 engine: a copy of `model` where
    - every tensor with a cache scale goes through QuantizeLinear/DequantizeLinear (int8, zero point 0);
      MatMul/Gemm constant weights with a cache scale are fake-quantized per tensor with it;
    - Conv/ConvTranspose weights are fake-quantized per output channel (amax / 127 per channel), as
      TensorRT does for kernel weights.
    Every cached tensor is quantized: an upper bound on the int8 error (TensorRT may keep some layers in
    fp16/fp32 when that is faster)."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    done = set()
    for node in g.node:
        if node.op_type not in WEIGHTED_OPS or len(node.input) < 2 or node.input[1] not in inits:
            continue
        name = node.input[1]
        if name in done:
            continue
        done.add(name)
        w = numpy_helper.to_array(inits[name]).astype(np.float32)
        if node.op_type in ("Conv", "ConvTranspose"):
            axis = _weight_axis(node)
            red = tuple(i for i in range(w.ndim) if i != axis)
            wq = fake_quant(w, np.abs(w).max(axis=red) / np.float32(127.0), axis=axis)
        elif name in scales:
            wq = fake_quant(w, scales[name])
        else:
            continue
        inits[name].CopyFrom(numpy_helper.from_array(wq, name))
    graph_inputs = {i.name for i in g.input}
    new_nodes = []
    rename = {}   # graph input -> fake-quantized name
    for t, s in scales.items():
        if t in inits:
            continue
        s_name, z_name = t + "__trt_scale", t + "__trt_zp"
        g.initializer.extend([numpy_helper.from_array(np.array(s, dtype=np.float32), s_name),
                              numpy_helper.from_array(np.array(0, dtype=np.int8), z_name)])
        if t in graph_inputs:
            src, dst = t, t + "__fq"
            rename[t] = dst
        else:
            src, dst = t + "__fp32", t
            for node in g.node:
                for k, o in enumerate(node.output):
                    if o == t:
                        node.output[k] = src
        new_nodes.append((src, [helper.make_node("QuantizeLinear", [src, s_name, z_name], [t + "__q"]),
                                helper.make_node("DequantizeLinear", [t + "__q", s_name, z_name], [dst])]))
    for node in g.node:
        for k, i in enumerate(node.input):
            if i in rename:
                node.input[k] = rename[i]
    # Insert each Q/DQ pair right after the node producing its input (graph inputs: at the front).
    order = list(g.node)
    producers = {o: idx for idx, n in enumerate(order) for o in n.output}
    placed = sorted(new_nodes, key=lambda p: producers.get(p[0], -1))
    out, k = [], 0
    for idx in range(-1, len(order)):
        if idx >= 0:
            out.append(order[idx])
        while k < len(placed) and producers.get(placed[k][0], -1) == idx:
            out.extend(placed[k][1])
            k += 1
    del g.node[:]
    g.node.extend(out)
    onnx.checker.check_model(m)
    return m


def qdq_model(model_path, out_path, feeds: List[Dict[str, np.ndarray]], scales: Dict[str, float],
              per_channel: bool = True) -> dict:
    """Write the explicit-quantization (Q/DQ) ONNX for TensorRT >= 10.1 with onnxruntime's quantizer.

    int8 activations and weights, symmetric (zero point 0: TensorRT's requirement), weights per output
    channel, biases left in float (QuantizeBias=False), Q/DQ only on the inputs of Conv/ConvTranspose/
    Gemm/MatMul (where TensorRT fuses them into int8 kernels). Activation scales are forced to `scales`
    (the cache's), so both int8 artefacts share one calibration.
    """
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class _Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    import logging
    overrides = {t: [{"scale": np.array(s, dtype=np.float32), "zero_point": np.array(0, dtype=np.int8)}] for t, s in scales.items() if s > 0}
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)   # onnxruntime logs "consider pre-processing" warnings on the root logger
    try:
        quantize_static(str(model_path), str(out_path), _Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=per_channel,
                        op_types_to_quantize=list(WEIGHTED_OPS),
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "QuantizeBias": False, "TensorQuantOverrides": overrides})
    except Exception as e:  # onnxruntime raises many types; keep the CLI's one-line contract
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportError("Q/DQ quantization of %s failed (%s)" % (model_path, msg[:200]))
    finally:
        root.setLevel(level)
    return {"path": str(out_path), "tool": "onnxruntime.quantization.quantize_static (QDQ, int8 symmetric)"}
