"""Fuse decomposed activations in an fp32 ONNX graph before quantization: one node per function.

    fusions = fuse_onnx("model.onnx", "model.fused.onnx")    # [{"op": "Gelu", "node": ..., "nodes": [...]}]

torch's exporter (opset < 20) writes GELU as five or nine elementwise nodes. Quantized as they are, every
one of them gets its own QuantizeLinear / DequantizeLinear pair, so the int8 model rounds four to eight
times inside one activation, and a compiler meets a Div or a Mul, not a GELU. Fused first, the quantizer sees
one node, whose int8 form is a single table (quantize(gelu(dequantize(q)))), the way TFLite's converter
fuses GELU:
- erf form: x * (erf(x / sqrt(2)) + 1) * 0.5 (also with x * 0.5 first) -> com.microsoft Gelu;
- tanh form: x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) -> com.microsoft FastGelu;
- x / (|x| + 1) -> Softsign; where(x > 20, x, softplus(x)) (the dynamo exporter's F.softplus) -> Softplus.
onnxruntime runs both contrib ops (CPU). A layer norm written out (torch at opset < 17: ReduceMean, Sub,
Pow, ReduceMean, Add eps, Sqrt, Div, then Mul gamma and Add beta) becomes one LayerNormalization over the
last axis (an ONNX op from opset 17: an older model's opset is raised to 17, which torch's exports at 13-16
run the same); a compiler then names it as such. A pattern whose inner tensors are read by another node is left
as it is. The fused graph computes the same function in float (up to float rounding).
"""
import math

import numpy as np

from grpo_edge.export.onnx_utils import drop_unused_constants, name_nodes_uniquely, static_shapes, unique_name

MS_DOMAIN = "com.microsoft"


class _Graph(object):
    """Producer / consumer maps and constant values of an ONNX graph, for matching."""

    def __init__(self, model):
        from onnx import numpy_helper
        g = model.graph
        self.consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        for n in g.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.producer = {o: n for n in g.node for o in n.output}
        self.consumers = {}
        for n in g.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in g.output}

    def only_consumer(self, tensor, op_type):
        """The one node that reads `tensor`, when it is of op_type and the tensor is not a graph output."""
        c = self.consumers.get(tensor, [])
        return c[0] if len(c) == 1 and c[0].op_type == op_type and tensor not in self.outputs else None

    def scalar(self, name):
        v = self.consts.get(name)
        return float(np.asarray(v).reshape(-1)[0]) if v is not None and np.asarray(v).size == 1 else None

    def const_side(self, node):
        """A binary node with one scalar constant input -> (its other input, the constant), else (None, None)."""
        for i, j in ((0, 1), (1, 0)):
            v = self.scalar(node.input[i])
            if v is not None:
                return node.input[j], v
        return None, None

    def other_input(self, node, tensor):
        """(the input of a binary node that is not `tensor`, its constant value or None)."""
        other = node.input[1] if node.input[0] == tensor else node.input[0]
        return other, self.scalar(other)


def _close(v, want):
    return v is not None and abs(v - want) <= 1e-4 * max(1.0, abs(want))


def _match_erf(g, erf):
    """erf node -> (x, [nodes], output) of x * (erf(x / sqrt 2) + 1) * 0.5, or None."""
    d = g.producer.get(erf.input[0])
    if d is None or d.op_type not in ("Div", "Mul") or d.input[0] in g.consts:
        return None
    x, c = d.input[0], g.scalar(d.input[1])
    if not (_close(c, math.sqrt(2.0)) if d.op_type == "Div" else _close(c, 1.0 / math.sqrt(2.0))):
        return None
    add = g.only_consumer(erf.output[0], "Add")
    if add is None or not _close(g.other_input(add, erf.output[0])[1], 1.0):
        return None
    return _tail(g, x, add, [d, erf, add])


def _match_softsign(g, abs_node):
    """Abs node -> (x, [nodes], output) of x / (|x| + 1) (torch's nn.Softsign), or None."""
    x = abs_node.input[0]
    add = g.only_consumer(abs_node.output[0], "Add")
    if add is None or not _close(g.other_input(add, abs_node.output[0])[1], 1.0):
        return None
    div = g.only_consumer(add.output[0], "Div")
    if div is None or div.input[0] != x or div.input[1] != add.output[0]:
        return None
    return x, [abs_node, add, div], div.output[0]


def _match_softplus_threshold(g, softplus):
    """Softplus node -> (x, [nodes], output) of where(x > t, x, softplus(x)) with t >= 15, or None: torch's
    dynamo exporter writes F.softplus's threshold (20) so; above 15, softplus(x) - x < 4e-7, the same
    function in float, so one Softplus (one int8 table) replaces the three nodes."""
    x = softplus.input[0]
    where = g.only_consumer(softplus.output[0], "Where")
    if where is None or list(where.input[1:]) != [x, softplus.output[0]]:
        return None
    cond = g.producer.get(where.input[0])
    if (cond is None or cond.op_type != "Greater" or cond.input[0] != x or (g.scalar(cond.input[1]) or 0) < 15
            or g.only_consumer(cond.output[0], "Where") is not where):
        return None
    return x, [cond, softplus, where], where.output[0]


def _match_tanh(g, tanh):
    """tanh node -> (x, [nodes], output) of x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), or None."""
    m = g.producer.get(tanh.input[0])
    if m is None or m.op_type != "Mul":
        return None
    inner, k = g.const_side(m)
    a = g.producer.get(inner)
    if not _close(k, math.sqrt(2.0 / math.pi)) or a is None or a.op_type != "Add":
        return None
    cube = _cube_term(g, a)
    if cube is None:
        return None
    x, nodes = cube
    add1 = g.only_consumer(tanh.output[0], "Add")
    if add1 is None or not _close(g.other_input(add1, tanh.output[0])[1], 1.0):
        return None
    return _tail(g, x, add1, nodes + [a, m, tanh, add1])


def _cube_term(g, add):
    """Add(x, 0.044715 * x^3) -> (x, the cube's nodes), or None (x^3 as x*x*x or Pow(x, 3))."""
    for x in add.input:
        other = add.input[1] if add.input[0] == x else add.input[0]
        s = g.producer.get(other)
        if s is None or s.op_type != "Mul":
            continue
        inner, c = g.const_side(s)
        cube = g.producer.get(inner)
        if not _close(c, 0.044715) or cube is None:
            continue
        if cube.op_type == "Pow" and cube.input[0] == x and _close(g.scalar(cube.input[1]), 3.0):
            return x, [cube, s]
        if cube.op_type == "Mul" and x in cube.input:
            sq = g.producer.get(cube.input[1] if cube.input[0] == x else cube.input[0])
            if sq is not None and sq.op_type == "Mul" and list(sq.input) == [x, x]:
                return x, [sq, cube, s]
    return None


def _tail(g, x, last, nodes):
    """After (erf|tanh) + 1: the products with x and with 0.5, in either order -> (x, nodes, output) or None."""
    out, t = last.output[0], last.output[0]
    seen_x = seen_half = False
    for _ in range(2):
        m = g.only_consumer(t, "Mul")
        if m is None:
            return None
        other, v = g.other_input(m, t)
        if other == x and not seen_x:
            seen_x = True
        elif _close(v, 0.5) and not seen_half:
            seen_half = True
        else:
            return None
        nodes.append(m)
        t = out = m.output[0]
    if not (seen_x and seen_half):
        return None
    return x, nodes, out


def _axes(g, node):
    """A ReduceMean's axes (attribute, or input from opset 18), or None."""
    for a in node.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(node.input) > 1 and node.input[1] in g.consts:
        return [int(v) for v in np.asarray(g.consts[node.input[1]]).reshape(-1)]
    return None


def _match_layer_norm(g, mean):
    """ReduceMean(x) -> (x, nodes, output, gamma, beta, eps) of a layer norm over the last axis, or None."""
    if _axes(g, mean) != [-1]:
        return None
    x = mean.input[0]
    sub = next((n for n in g.consumers.get(mean.output[0], []) if n.op_type == "Sub" and list(n.input) == [x, mean.output[0]]), None)
    users = g.consumers.get(sub.output[0], []) if sub is not None else []
    sq = next((n for n in users if (n.op_type == "Pow" and _close(g.scalar(n.input[1]), 2.0))
               or (n.op_type == "Mul" and list(n.input) == [sub.output[0]] * 2)), None)
    div = next((n for n in users if n.op_type == "Div" and n.input[0] == sub.output[0]), None)
    if sq is None or div is None or len(users) != 2:
        return None
    var = g.only_consumer(sq.output[0], "ReduceMean")
    add = g.only_consumer(var.output[0], "Add") if var is not None and _axes(g, var) == [-1] else None
    eps = g.other_input(add, var.output[0])[1] if add is not None else None
    sqrt = g.only_consumer(add.output[0], "Sqrt") if eps is not None else None
    if sqrt is None or g.only_consumer(sqrt.output[0], "Div") is not div:
        return None
    nodes, out, gamma, beta = [mean, sub, sq, var, add, sqrt, div], div.output[0], None, None
    mul = g.only_consumer(out, "Mul")
    if mul is not None and g.other_input(mul, out)[0] in g.consts:
        gamma, out = g.other_input(mul, out)[0], mul.output[0]
        nodes.append(mul)
    badd = g.only_consumer(out, "Add")
    if badd is not None and g.other_input(badd, out)[0] in g.consts:
        beta, out = g.other_input(badd, out)[0], badd.output[0]
        nodes.append(badd)
    return x, nodes, out, gamma, beta, eps


def _fuse_layer_norms(model, fusions):
    """Every decomposed layer norm -> one LayerNormalization (gamma / beta made when absent)."""
    from onnx import helper, numpy_helper
    g = _Graph(model)
    for node in list(model.graph.node):
        found = _match_layer_norm(g, node) if node.op_type == "ReduceMean" else None
        if found is None:
            continue
        x, nodes, out, gamma, beta, eps = found
        name = unique_name(model, (node.name or out).rsplit("/", 1)[0] + "/LayerNormalization")
        n = _last_dim(model, g, gamma, beta)
        for role, value in (("gamma", 1.0), ("beta", 0.0)):
            if (gamma if role == "gamma" else beta) is None:
                t = numpy_helper.from_array(np.full(n, value, np.float32), name + "/" + role)
                model.graph.initializer.append(t)
                gamma, beta = (t.name, beta) if role == "gamma" else (gamma, t.name)
        fused = helper.make_node("LayerNormalization", [x, gamma, beta], [out], name=name, axis=-1, epsilon=eps)
        model.graph.node.insert(list(model.graph.node).index(nodes[-1]), fused)
        for m in nodes:
            model.graph.node.remove(m)
        fusions.append({"op": "LayerNormalization", "node": name, "nodes": [m.name or m.output[0] for m in nodes]})


def _last_dim(model, g, gamma, beta):
    for t in (gamma, beta):
        if t is not None:
            return int(np.asarray(g.consts[t]).size)
    raise ValueError("a layer norm without gamma and beta needs its width")     # not met: torch always has them


def _fold_batch_norms(model, fusions):
    """Every BatchNormalization (inference form) of a rank 2-4 tensor: folded into the Conv (or Gemm) before it
    when the BN is its only reader, else written as the same per-channel affine: a depthwise 1x1 Conv (rank
    3-4) or a Gemm with a diagonal weight (rank 2)."""
    from onnx import numpy_helper
    g = _Graph(model)
    inits = {i.name: i for i in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization" and len(n.output) == 1]
    rank = {k: len(v) for k, v in static_shapes(model).items()} if bns else {}
    for bn in bns:
        if any(i not in g.consts for i in bn.input[1:5]) or rank.get(bn.input[0]) not in (2, 3, 4):
            continue
        eps = next((x.f for x in bn.attribute if x.name == "epsilon"), 1e-5)
        scale, beta, mean, var = (np.asarray(g.consts[i], np.float64) for i in bn.input[1:5])
        a = scale / np.sqrt(var + eps)
        b = beta - mean * a
        prev = g.producer.get(bn.input[0])
        foldable = (prev is not None and prev.op_type in ("Conv", "Gemm") and prev.input[1] in inits
                    and (len(prev.input) < 3 or prev.input[2] in inits)
                    and g.only_consumer(prev.output[0], "BatchNormalization") is bn
                    and all(x.f == 1.0 for x in prev.attribute if x.name in ("alpha", "beta")))
        if foldable:
            w = numpy_helper.to_array(inits[prev.input[1]]).astype(np.float64)
            bias = numpy_helper.to_array(inits[prev.input[2]]).astype(np.float64) if len(prev.input) > 2 else 0.0
            trans_b = next((x.i for x in prev.attribute if x.name == "transB"), 0)
            per_out = a.reshape((1, -1) if prev.op_type == "Gemm" and not trans_b else (-1,) + (1,) * (w.ndim - 1))
            _set_init(model, inits, prev.input[1], (w * per_out).astype(np.float32))
            name = unique_name(model, (prev.name or prev.output[0]) + "/bn_bias")
            model.graph.initializer.append(numpy_helper.from_array((bias * a + b).astype(np.float32), name))
            del prev.input[2:]
            prev.input.append(name)
            prev.output[0] = bn.output[0]
            how = "folded into %s" % (prev.name or prev.output[0])
        else:
            how = _affine_node(model, bn, a, b, rank[bn.input[0]])
        model.graph.node.remove(bn)
        fusions.append({"op": "BatchNormalization", "node": bn.name or bn.output[0], "nodes": [bn.name], "how": how})


def _affine_node(model, bn, a, b, rank) -> str:
    """x a + b per channel, in place of `bn`: a depthwise 1x1 Conv (rank 3-4) or a diagonal Gemm (rank 2)."""
    from onnx import helper, numpy_helper
    name = unique_name(model, (bn.name or bn.output[0]) + "/affine")
    if rank == 2:
        w, node = np.diag(a), helper.make_node("Gemm", [bn.input[0], name + "/w", name + "/b"], [bn.output[0]],
                                               name=name)
        how = "as a Gemm with a diagonal weight"
    else:
        w = a.reshape((-1,) + (1,) * (rank - 1))
        node = helper.make_node("Conv", [bn.input[0], name + "/w", name + "/b"], [bn.output[0]], name=name,
                                group=len(a), kernel_shape=[1] * (rank - 2))
        how = "as a depthwise 1x1 Conv"
    model.graph.initializer.extend([numpy_helper.from_array(w.astype(np.float32), name + "/w"),
                                    numpy_helper.from_array(b.astype(np.float32), name + "/b")])
    model.graph.node.insert(list(model.graph.node).index(bn), node)
    return how


def _set_init(model, inits, name, value):
    from onnx import numpy_helper
    t = numpy_helper.from_array(value, name)
    inits[name].CopyFrom(t)


def _batch_of_one(model):
    """A dynamic batch axis (torch's dynamic_axes) becomes 1, what the ESP32 runs: every Shape of an
    activation is then static and folds (nn.MultiheadAttention reads the batch size through Shape)."""
    inits = {i.name for i in model.graph.initializer}
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if v.name not in inits and dims and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = 1


def _fold_constants(model, fusions):
    """Nodes whose inputs are all constants (torch's Pow(4, 0.5) for an attention scale, Identity of a shared
    weight) become initializers, computed with onnx's reference evaluator; so does a Shape of a tensor whose
    shape is static (nn.MultiheadAttention computes its head size from Shape, Gather, Cast, Sqrt)."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    values.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    shapes = static_shapes(model)
    for n in list(model.graph.node):
        if n.op_type in ("Constant", "QuantizeLinear", "DequantizeLinear") or not n.input:
            continue
        if n.op_type == "Shape" and n.input[0] in shapes and not n.attribute:
            outs = [np.array(shapes[n.input[0]], np.int64)]
        elif all(i in values for i in n.input if i):
            g = helper.make_graph([n], "fold", [], [helper.make_tensor_value_info(o, 0, None) for o in n.output])
            sub = helper.make_model(g, opset_imports=list(model.opset_import))
            outs = ReferenceEvaluator(sub).run(None, {i: values[i] for i in n.input if i})
        else:
            continue
        for name, v in zip(n.output, outs):
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(v), name))
            values[name] = np.asarray(v)
        model.graph.node.remove(n)
        fusions.append({"op": "constant", "node": n.name or n.output[0], "nodes": [n.name], "how": "folded"})


def fuse_model(model):
    """Fold constant subexpressions, fuse every decomposed GELU and layer norm of `model`, fold its batch
    norms and keep the batch axis first in every tensor (export/onnx_layout.py: nn.MultiheadAttention's
    sequence-first tensors) (an onnx ModelProto, changed in place); -> the list of fusions and rewrites
    (a rewrite has "layout": True)."""
    from onnx import helper
    fusions = []
    name_nodes_uniquely(model)               # names below are made from the nodes' names
    _batch_of_one(model)
    for _ in range(16):                      # a folded Shape can make the next Reshape's shape static
        n = len(fusions)
        _fold_constants(model, fusions)
        if len(fusions) == n:
            break
    _fold_batch_norms(model, fusions)
    _fuse_layer_norms(model, fusions)
    if any(f["op"] == "LayerNormalization" for f in fusions):     # LayerNormalization is an ONNX op from opset 17; ops 13..16 run the same there
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx") and o.version < 17:
                o.version = 17
    for op_type, start, match in (("Gelu", "Erf", _match_erf), ("FastGelu", "Tanh", _match_tanh),
                                  ("Softsign", "Abs", _match_softsign),
                                  ("Softplus", "Softplus", _match_softplus_threshold)):
        g = _Graph(model)
        for node in list(model.graph.node):
            if node.op_type != start:
                continue
            found = match(g, node)
            if found is None:
                continue
            x, nodes, out = found
            name = unique_name(model, (nodes[0].name or out).rsplit("/", 1)[0] + "/" + op_type)
            fused = helper.make_node(op_type, [x], [out], name=name, domain="" if op_type in ("Softsign", "Softplus") else MS_DOMAIN)
            pos = list(model.graph.node).index(nodes[-1])
            model.graph.node.insert(pos, fused)
            for n in nodes:
                model.graph.node.remove(n)
            fusions.append({"op": op_type, "node": name, "nodes": [n.name or n.output[0] for n in nodes]})
    if any(f["op"] != "LayerNormalization" for f in fusions):
        if not any(o.domain == MS_DOMAIN for o in model.opset_import):
            model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    if fusions:
        drop_unused_constants(model)
        _type_fused_outputs(model, fusions)
    from grpo_edge.export.onnx_layout import batch_first
    fusions.extend(dict(r, layout=True) for r in batch_first(model))
    return fusions


def _type_fused_outputs(model, fusions):
    """ONNX shape inference does not know the contrib ops: give each fused output its input's type and shape
    (an elementwise function), so the quantizer's calibration sees a float tensor there. In graph order, with
    inference run again after each, so a fused op after another one (Gelu after FastGelu) is typed too."""
    import onnx
    fused = {f["node"] for f in fusions if f["op"] in ("Gelu", "FastGelu")}
    for n in model.graph.node:
        if n.name not in fused or any(v.name == n.output[0] for v in model.graph.value_info):
            continue
        known = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        known.update({v.name: v for v in model.graph.input})
        if n.input[0] in known:
            v = onnx.ValueInfoProto()
            v.CopyFrom(known[n.input[0]])
            v.name = n.output[0]
            model.graph.value_info.append(v)


def fuse_onnx(src, dst) -> list:
    """fp32 ONNX file src -> dst with its decomposed activations fused (see the module docstring); the list of
    fusions (empty: dst is a copy of src)."""
    from grpo_edge.export.onnx_utils import load_onnx
    from grpo_edge.report import atomic_write_bytes
    model = load_onnx(src)
    fusions = fuse_model(model)
    atomic_write_bytes(dst, model.SerializeToString())
    return fusions
