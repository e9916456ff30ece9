"""Check that every op of an ONNX model is imported by the TensorRT ONNX parser of a given version."""
from typing import List

from grpo_edge.targets.jetson.trt_ops import RESTRICTIONS, table_for


def _walk(graph, path=""):
    """Yield (node, where) for every node, descending into If/Loop/Scan subgraphs."""
    for node in graph.node:
        yield node, path
        for attr in node.attribute:
            subs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
            for sub in subs:
                for item in _walk(sub, "%s%s/%s/" % (path, node.name or node.op_type, attr.name)):
                    yield item


def check_ops(model, trt_version: str) -> dict:
    """Op compatibility of `model` (onnx.ModelProto or path) with TensorRT `trt_version` (e.g. "8.2.1").

    Returns {"ok", "trt_version", "source", "opset", "ops": [{op, count, status, first_node, note}],
    "problems": [one line per problem, naming the op and node]}.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    table = table_for(trt_version)
    supported, unsupported = set(table["supported"]), set(table["unsupported"])
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [0])
    inits = {i.name: i for i in model.graph.initializer}
    problems: List[str] = []
    warnings: List[str] = []
    if opset > table["opset_max"]:
        warnings.append("model opset %d is above the highest opset documented for TensorRT %s (%d): ops whose "
                        "signature changed after opset %d may not import; export with opset %d"
                        % (opset, trt_version, table["opset_max"], table["opset_max"], table["opset_max"]))
    rows = {}
    for node, where in _walk(model.graph):
        name = where + (node.name or "(unnamed %s)" % node.op_type)
        key = node.op_type if node.domain in ("", "ai.onnx") else "%s::%s" % (node.domain, node.op_type)
        row = rows.get(key)
        if row is None:
            if node.domain not in ("", "ai.onnx"):
                status = "needs plugin"
                problems.append("op %s (domain %s) at node %s is not an ONNX standard op: TensorRT %s needs a plugin"
                                % (node.op_type, node.domain, name, trt_version))
            elif node.op_type in supported:
                status = "supported"
            elif node.op_type in unsupported:
                status = "unsupported"
                problems.append("op %s at node %s is not supported by TensorRT %s's ONNX parser (%s)"
                                % (node.op_type, name, trt_version, table["source"]))
            else:
                status = "unknown"
                problems.append("op %s at node %s is not in TensorRT %s's operator matrix (%s)"
                                % (node.op_type, name, trt_version, table["source"]))
            row = rows[key] = {"op": key, "count": 0, "status": status, "first_node": name,
                               "note": RESTRICTIONS.get(node.op_type, "")}
        row["count"] += 1
        # Restrictions that can be checked statically.
        if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 and node.input[1] not in inits:
            warnings.append("%s at node %s: weights are not an initializer (TensorRT %s wants a constant W)"
                            % (node.op_type, name, trt_version))
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2:
            zp = inits.get(node.input[2])
            if zp is not None:
                arr = numpy_helper.to_array(zp)
                if arr.dtype != np.int8 or np.any(arr != 0):
                    problems.append("%s at node %s: zero point must be int8 0 for TensorRT (got %s %s)"
                                    % (node.op_type, name, arr.dtype, arr.ravel()[:4].tolist()))
    return {"ok": not problems, "trt_version": str(trt_version), "source": table["source"], "opset": opset,
            "ops": sorted(rows.values(), key=lambda r: r["op"]), "problems": problems, "warnings": warnings}
