"""Small ONNX helpers shared by export, quantization, targets and the bench.

Heavy imports (onnx, onnxruntime) stay inside the functions. Every bad-input path raises a one-line
ExportError that names the file.
"""
from pathlib import Path
from typing import Dict, List

import numpy as np

from grpo_edge.errors import ExportError

# ONNX TensorProto element types we meet, as numpy dtypes.
_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16,
                11: np.float64}


def load_onnx(path):
    """Load and check an ONNX file; corrupt or non-ONNX files raise a one-line ExportError."""
    import onnx
    path = Path(path)
    if not path.is_file():
        raise ExportError("ONNX file not found: %s" % path)
    try:
        model = onnx.load(str(path))
    except Exception as e:  # DecodeError, protobuf errors, truncated files
        raise ExportError("%s is not a readable ONNX model (%s)" % (path, _first_line(e)))
    if not model.graph.node and not model.graph.output:
        raise ExportError("%s is not an ONNX model (empty graph)" % path)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ExportError("%s fails the ONNX checker (%s)" % (path, _first_line(e)))
    from grpo_edge.export.validate import check_qdq_scales
    check_qdq_scales(model, path)
    return model


def is_qdq(path) -> bool:
    """True when the ONNX model at `path` is already quantized (holds QuantizeLinear / DequantizeLinear)."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in load_onnx(path).graph.node)


def copy_onnx(src, dst) -> int:
    """The ONNX file src as one self-contained file dst: weights that torch's exporter wrote beside it
    (src.data, external data) are read in, and repeated or empty node names made unique (onnxruntime refuses
    a graph with two nodes of one name); a file with neither is copied as it is. -> nodes renamed."""
    import shutil
    import onnx
    from grpo_edge.report import atomic_write_bytes
    model = onnx.load(str(src), load_external_data=False)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    renamed = name_nodes_uniquely(model)
    if not external and not renamed:
        shutil.copyfile(str(src), str(dst))
        return 0
    if external:
        try:
            onnx.load_external_data_for_model(model, str(Path(src).resolve().parent))
        except Exception as e:  # noqa: BLE001 - a missing or short .data file
            raise ExportError("%s: its weights are stored outside it, and they cannot be read (%s)"
                              % (src, _first_line(e)))
    atomic_write_bytes(dst, model.SerializeToString())
    return renamed


def insert_qdq(model, src, dq_out, scale, zero_point, after=None, name=None, dtype=np.int8) -> None:
    """QuantizeLinear(src) -> DequantizeLinear -> dq_out, placed right after node `after` (or first): the pair
    onnxruntime's QDQ format puts on a quantized edge; its parameters are initializers named after `name`
    (default: src), as the nodes are; the zero point's dtype (int8, or int16 for 16x8) is the quantized type."""
    from onnx import helper, numpy_helper
    g = model.graph
    name = name or src
    names = (name + "_scale", name + "_zero_point")
    g.initializer.extend([numpy_helper.from_array(np.asarray(scale, np.float32).reshape(()), names[0]),
                          numpy_helper.from_array(np.asarray(zero_point, dtype).reshape(()), names[1])])
    q = name + "_QuantizeLinear_Output"
    at = list(g.node).index(after) + 1 if after is not None else 0
    g.node.insert(at, helper.make_node("QuantizeLinear", [src, names[0], names[1]], [q], name=name + "_Q"))
    g.node.insert(at + 1, helper.make_node("DequantizeLinear", [q, names[0], names[1]], [dq_out], name=name + "_DQ"))


def unique_name(model, base: str) -> str:
    """`base`, or base_1, base_2, ...: the first that no node, tensor or initializer of `model` uses yet (a
    pass that makes several nodes from one pattern, as every fused GELU of a model, must not name them alike:
    onnxruntime refuses a graph with two nodes of one name)."""
    g = model.graph
    used = {n.name for n in g.node} | {t for n in g.node for t in list(n.input) + list(n.output)}
    used |= {i.name for i in g.initializer} | {v.name for v in list(g.input) + list(g.output)}
    name, k = base, 0
    while name in used:
        k += 1
        name = "%s_%d" % (base, k)
    return name


def name_nodes_uniquely(model) -> int:
    """Give every unnamed node, and every node after the first of a repeated name, a name of its own
    (op type or the old name, with a suffix); -> how many were renamed. A user's graph may repeat a name,
    and onnxruntime, whose quantizer loads the graph again, refuses that."""
    taken = {n.name for n in model.graph.node if n.name}
    seen, renamed = set(), 0
    for n in model.graph.node:
        if n.name and n.name not in seen:
            seen.add(n.name)
            continue
        base, k = n.name or n.op_type, 1
        while "%s_%d" % (base, k) in taken:
            k += 1
        n.name = "%s_%d" % (base, k)
        taken.add(n.name)
        seen.add(n.name)
        renamed += 1
    return renamed


def static_shapes(model) -> dict:
    """{tensor: its shape} for the tensors whose every dimension shape inference knows."""
    import onnx
    try:
        typed = list(onnx.shape_inference.infer_shapes(model).graph.value_info) + list(model.graph.input)
    except Exception:  # noqa: BLE001 - a model shape inference cannot read: nothing is known
        return {}
    out = {}
    for v in typed:
        dims = v.type.tensor_type.shape.dim
        if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[v.name] = [int(d.dim_value) for d in dims]
    return out


def drop_unused_constants(model):
    """Constant nodes and initializers that no node reads any more (a fused pattern's 0.5, 1, sqrt 2; a folded
    batch norm's statistics) go."""
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    for n in [n for n in model.graph.node if n.op_type == "Constant" and n.output[0] not in read]:
        model.graph.node.remove(n)
    inputs = {i.name for i in model.graph.input}            # an initializer listed as an input stays
    for t in [t for t in model.graph.initializer if t.name not in read and t.name not in inputs]:
        model.graph.initializer.remove(t)


def io_specs(model, which="input") -> List[Dict]:
    """[{name, shape (ints or symbolic names), dtype}] of a ModelProto's graph inputs or outputs."""
    init = {i.name for i in model.graph.initializer}
    vals = model.graph.input if which == "input" else model.graph.output
    out = []
    for v in vals:
        if v.name in init:
            continue
        t = v.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
        out.append({"name": v.name, "shape": shape, "dtype": np.dtype(_ONNX_DTYPES.get(t.elem_type, np.float32)).name})
    return out


def opset_of(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return -1


def session(path, optimize=True, threads=1):
    """An onnxruntime CPU InferenceSession of a file path or serialized model bytes. optimize=False runs
    the graph as written (no fusions): grpo_edge.runtime.ort_session, the set-up the device runners use,
    with a load failure as a one-line ExportError.

    Why the switch: on x86 CPUs without VNNI, ORT's fused int8 kernels (u8s8 via AVX2) can saturate
    and lose accuracy; with optimizations disabled a QDQ model runs as DequantizeLinear -> fp32 op ->
    QuantizeLinear, i.e. exactly the quantization that the model describes (see export/onnx2int8.py).
    """
    from grpo_edge.runtime.ort_session import ort_session
    try:
        return ort_session(path, reference=not optimize, threads=threads)
    except Exception as e:
        raise ExportError("onnxruntime cannot load %s (%s)" % ("the model" if isinstance(path, bytes) else path,
                                                               _first_line(e)))


def fixed_batch(model) -> int:
    """The batch size an ONNX model's inputs are fixed to (the first dimension of its graph inputs, when
    every one of them is a number, as `torch.onnx.export` writes by default), or 0 when it is dynamic."""
    import onnx
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    firsts = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        if not dims:
            return 0
        firsts.append(dims[0].dim_value if dims[0].HasField("dim_value") else 0)
    return firsts[0] if firsts and all(f > 0 and f == firsts[0] for f in firsts) else 0


def batches_of(data: dict, batch: int):
    """Slices of stacked samples ({input: array}) of `batch` samples each, for running a model."""
    n = len(next(iter(data.values())))
    return [{k: v[i:i + batch] for k, v in data.items()} for i in range(0, n, batch)]


def tensor_values(path, data: dict, names, batch: int = 256) -> Dict[str, np.ndarray]:
    """Run the ONNX model at `path` on `data` ({input: array}, stacked samples) and return the values of
    the intermediate tensors `names` (graph outputs added in memory; graph optimizations off). A model
    exported with a fixed batch size is fed that many samples per run."""
    import onnx
    m = onnx.load(str(path))
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    sess = session(m.SerializeToString(), optimize=False)
    outs = dict(zip([o.name for o in sess.get_outputs()], run_in_batches(sess, data, fixed_batch(m) or batch)))
    return {name: outs[name] for name in names}


def run_in_batches(sess, data: dict, batch: int) -> list:
    """Every output of an onnxruntime session over stacked samples ({input: array}), `batch` samples per run:
    the last run padded with copies of the last sample (a model exported with a fixed batch takes only whole
    batches), the outputs trimmed back to the samples given."""
    n = len(next(iter(data.values())))
    pad = -n % batch
    if pad:
        data = {k: np.concatenate([v, np.repeat(v[-1:], pad, axis=0)]) for k, v in data.items()}
    runs = [sess.run(None, feed) for feed in batches_of(data, batch)]
    return [np.concatenate([r[j] for r in runs])[:n] for j in range(len(runs[0]))]


def count_macs(model, batch: int = 1, dims: Dict[str, int] = None) -> int:
    """Multiply-accumulates of one run: MatMul, Gemm, Conv (the ops that dominate small models).

    Shapes are taken from a real onnxruntime run (exact, also for attention with data-dependent
    reshapes) on zero inputs: symbolic dims named like "batch" are set to `batch`, other symbolic dims
    (sequence / cache lengths) to `dims.get(name, 8)`. Works on fp32 and QDQ int8 graphs alike.
    Returns 0 if the graph cannot run on zero inputs.
    """
    import onnx
    import onnxruntime as ort
    dims = dict(dims or {})
    m = onnx.ModelProto()
    m.CopyFrom(model)
    heavy = [n for n in m.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")]
    init = {i.name: list(i.dims) for i in m.graph.initializer}
    have = {o.name for o in m.graph.output}
    wanted = []
    for n in heavy:
        for name in list(n.input[:2]) + [n.output[0]]:
            if name not in init and name not in wanted:
                wanted.append(name)
    for name in wanted:
        if name not in have:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    feed = {}
    for spec in io_specs(model, "input"):
        shape = [d if isinstance(d, int) and d > 0 else
                 (batch if "batch" in str(d).lower() else int(dims.get(str(d), 8))) for d in spec["shape"]]
        feed[spec["name"]] = np.zeros(shape, dtype=spec["dtype"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        outs = sess.run(None, feed)
    except Exception:
        return 0
    shapes = dict(init)
    shapes.update({o.name: list(v.shape) for o, v in zip(sess.get_outputs(), outs)})
    total = 0
    for n in heavy:
        a, w, out = shapes.get(n.input[0]), shapes.get(n.input[1]), shapes.get(n.output[0])
        if a is None or w is None or out is None:
            continue
        if n.op_type == "Conv":
            total += int(np.prod(out)) * int(np.prod(w[1:]))
        else:
            trans_a = any(at.name == "transA" and at.i for at in n.attribute)
            k = a[-2] if (trans_a and len(a) >= 2) else a[-1]
            total += int(np.prod(out)) * int(k)
    return int(total)


def _first_line(e) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:300]


def completion_macs(cfg: dict, fp32_files: dict, new_tokens: int) -> list:
    """MACs of each model call of one batch-1 completion with `new_tokens` tokens (EOS included)."""
    new = max(1, int(new_tokens))
    if cfg["arch"] == "micro-gpt":
        m = load_onnx(fp32_files["model"])
        return [count_macs(m, 1, {"past_len": t}) for t in range(cfg["input_len"] + new - 1)]
    s = cfg["input_len"]
    enc, dec = load_onnx(fp32_files["encoder"]), load_onnx(fp32_files["decoder_step"])
    return [count_macs(enc, 1, {"src_len": s})] + [count_macs(dec, 1, {"src_len": s, "tgt_len": t})
                                                   for t in range(1, new + 1)]
