"""Batch-first layout: rewrite an fp32 ONNX graph of batch 1 so that every activation keeps the batch axis
first, without changing what it computes.

    rewrites = batch_first(model)        # onnx ModelProto, changed in place; [{"op", "node", "how"}]

A compiler that runs a batch of inputs through its reference (the ESP32 one) needs the batch axis first in
every tensor. nn.MultiheadAttention and nn.TransformerEncoderLayer do not keep it there: they move the
sequence axis first ((1, T, D) -> (T, 1, D)), go through rank-5 tensors to split q, k and v, and compute on
(T, 1, D) and (T, D) tensors. With a batch of 1 those moves are only renamings of the same bytes, so each
rewrite below is exact:
- a Transpose that moves only size-1 axes is a Reshape; another one moves its non-1 axes after a Reshape
  that drops the size-1 axes (rank 4 at most), then a Reshape gives the original shape;
- Squeeze / Unsqueeze / Flatten of such a tensor are Reshapes;
- an op that works on the last axis (activations, Softmax and LayerNormalization over the last axis, a
  MatMul by a constant, elementwise ops whose constants vary along the last axis only) runs on the rows
  (1, rows, last); a Gemm becomes MatMul (+ Add) first;
- a MatMul of two activations runs on (1, batches, M, K) x (1, batches, K, N);
- Gather (constant indices), Slice and Split along an axis run on (1, before, axis, after); so does a
  ReduceMean over one axis;
- chains of Reshapes merge into one, and a Reshape to the same shape goes.
Tensors that stay without the batch axis first are left for the compiler to refuse by name.
"""
import numpy as np

from grpo_edge.export.onnx_utils import drop_unused_constants, static_shapes

ROWWISE_UNARY = ("Relu", "Tanh", "Sigmoid", "Gelu", "FastGelu", "HardSwish", "HardSigmoid", "LeakyRelu",
                 "Clip", "Identity", "Erf")
ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


class _Layout(object):
    """The model, its static shapes and constants, and the edits of one pass."""

    def __init__(self, model):
        from onnx import numpy_helper
        self.model = model
        self.shapes = {k: tuple(v) for k, v in static_shapes(model).items()}
        for v in model.graph.value_info:                  # contrib ops' outputs, typed by whoever added them
            dims = v.type.tensor_type.shape.dim
            if v.name not in self.shapes and dims and all(d.HasField("dim_value") for d in dims):
                self.shapes[v.name] = tuple(int(d.dim_value) for d in dims)
        self.consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
                            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
        present = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
        self.shapes = {k: v for k, v in self.shapes.items() if k in present}
        self.outputs = {o.name for o in model.graph.output}
        self.count = 0

    def bad(self, name) -> bool:
        """An activation whose static shape does not start with the batch axis of size 1 (or is rank > 4)."""
        s = self.shapes.get(name)
        return name not in self.consts and s is not None and len(s) > 0 and (s[0] != 1 or len(s) > 4)

    def const(self, value, hint) -> str:
        from onnx import numpy_helper
        self.count += 1
        name = "%s/layout_const_%d" % (hint, self.count)
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        self.consts[name] = np.asarray(value)
        return name

    def typed(self, name, shape):
        from onnx import TensorProto, helper
        self.model.graph.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shapes[name] = tuple(shape)

    def reshape(self, x, shape, hint, out=None):
        """A Reshape node of x to the static `shape` (output `out` or a new name); -> (node, output name)."""
        from onnx import helper
        self.count += 1
        out = out or "%s/layout_%d" % (hint, self.count)
        node = helper.make_node("Reshape", [x, self.const(np.array(shape, np.int64), hint)], [out],
                                name="%s/reshape_%d" % (hint, self.count))
        if out not in self.shapes or tuple(self.shapes[out]) != tuple(shape):
            self.typed(out, shape)
        return node, out

    def around(self, node, ins, outs):
        """Run `node` on other shapes: ins {input index: new shape}, outs {output index: new shape}; Reshapes
        go before and after it, the original output names keep their shapes."""
        g = self.model.graph
        hint = node.name or node.output[0]
        pos = list(g.node).index(node)
        before = []
        for k, shape in sorted(ins.items()):
            r, name = self.reshape(node.input[k], shape, hint)
            before.append(r)
            node.input[k] = name
        after = []
        for k, shape in sorted(outs.items()):
            self.count += 1
            inner = "%s/layout_out_%d" % (hint, self.count)
            self.typed(inner, shape)
            after.append(self.reshape(inner, self.shapes[node.output[k]], hint, out=node.output[k])[0])
            node.output[k] = inner
        for r in reversed(before):
            g.node.insert(pos, r)
        pos = list(g.node).index(node) + 1
        for r in reversed(after):
            g.node.insert(pos, r)

    def replace(self, node, new_nodes):
        g = self.model.graph
        pos = list(g.node).index(node)
        g.node.remove(node)
        for n in reversed(new_nodes):
            g.node.insert(pos, n)


def _attr(node, name, default=None):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _set_attr(node, name, value):
    from onnx import helper
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.extend([helper.make_attribute(name, value)])


def _rows(shape):
    return (1, int(np.prod(shape[:-1])), int(shape[-1]))


def _around_axis(shape, axis):
    """(1, before, axis, after) with the unit sizes dropped (rank 3 or 4), and the axis's index there."""
    pre, post = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    dims = [1] + ([pre] if pre > 1 else []) + [int(shape[axis])] + ([post] if post > 1 else [])
    return tuple(dims), 2 if pre > 1 else 1


def _transpose(L, node, rewrites):
    from onnx import helper
    x, y = node.input[0], node.output[0]
    sin, sout = L.shapes.get(x), L.shapes.get(y)
    if sin is None or sout is None:
        return False
    rank = len(sin)
    perm = [int(k) % rank for k in _attr(node, "perm", list(range(rank))[::-1])]
    moved = [a for a in perm if sin[a] != 1]
    if moved == sorted(moved):
        L.replace(node, [L.reshape(x, sout, node.name or y, out=y)[0]])
        rewrites.append({"op": "Transpose", "node": node.name, "how": "a reshape (it moves only size-1 axes)"})
        return True
    if not (L.bad(x) or L.bad(y) or perm[0] != 0):
        return False
    groups = _groups([a for a in range(rank) if sin[a] != 1], moved)
    if len(groups) > 3:
        return False
    hint = node.name or y
    by_input = sorted(groups)
    dims = [int(np.prod([sin[a] for a in grp])) for grp in by_input]
    r1, squeezed = L.reshape(x, (1,) + tuple(dims), hint)
    new_perm = [0] + [by_input.index(grp) + 1 for grp in groups]
    L.count += 1
    inner = "%s/layout_t_%d" % (hint, L.count)
    L.typed(inner, (1,) + tuple(dims[k - 1] for k in new_perm[1:]))
    t = helper.make_node("Transpose", [squeezed], [inner], name=node.name, perm=new_perm)
    L.replace(node, [r1, t, L.reshape(inner, sout, hint, out=y)[0]])
    rewrites.append({"op": "Transpose", "node": node.name, "how": "a transpose %s of the non-1 axes" % new_perm})
    return True


def _groups(kept, moved):
    """The non-1 input axes (kept, in input order) as runs that stay together in the output order (moved):
    [[axes of the first output run], ...]; a transpose of the runs is the same data move."""
    groups = []
    for a in moved:
        if groups and kept.index(a) == kept.index(groups[-1][-1]) + 1:
            groups[-1].append(a)
        else:
            groups.append([a])
    return groups


def _rowwise(L, node) -> bool:
    """Does `node` compute each row of its last axis alone (so it can run on (1, rows, last))?"""
    t, out = node.op_type, L.shapes.get(node.output[0])
    if out is None:
        return False
    if t in ROWWISE_UNARY or (t == "Softmax" and _attr(node, "axis", -1) in (-1, len(out) - 1)):
        return True
    if t == "LayerNormalization":
        return _attr(node, "axis", -1) in (-1, len(out) - 1)
    if t == "MatMul":
        w = L.consts.get(node.input[1])
        return w is not None and w.ndim == 2 and node.input[0] not in L.consts
    if t in ELEMENTWISE:
        acts = [i for i in node.input if i not in L.consts]
        if any(L.shapes.get(i) != out for i in acts):
            return False
        return all(L.consts[i].size == 1 or (L.consts[i].ndim <= len(out) and all(
            d == 1 for d in L.consts[i].shape[:-1])) for i in node.input if i in L.consts)
    return False


def _gemm_to_matmul(L, node, rewrites):
    from onnx import helper
    if _attr(node, "transA", 0) or _attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0:
        return False
    w = L.consts.get(node.input[1])
    if w is None or w.ndim != 2:
        return False
    hint = node.name or node.output[0]
    wt = L.const(np.ascontiguousarray(w.T if _attr(node, "transB", 0) else w), hint)
    if len(node.input) < 3 or not node.input[2]:
        L.replace(node, [helper.make_node("MatMul", [node.input[0], wt], [node.output[0]], name=node.name)])
    else:
        L.count += 1
        mid = "%s/layout_mm_%d" % (hint, L.count)
        L.typed(mid, L.shapes[node.output[0]])
        L.replace(node, [helper.make_node("MatMul", [node.input[0], wt], [mid], name=node.name),
                         helper.make_node("Add", [mid, node.input[2]], [node.output[0]], name=hint + "/bias")])
    rewrites.append({"op": "Gemm", "node": node.name, "how": "MatMul + Add (it reads rows without the batch axis)"})
    return True


def _on_axis(L, node, rewrites):
    """Gather / Slice / Split / ReduceMean along one axis of a tensor without the batch axis first."""
    x = node.input[0]
    s = L.shapes.get(x)
    t = node.op_type
    if t == "Gather":
        idx = L.consts.get(node.input[1])
        if idx is None or idx.ndim > 1:
            return False
        axis = int(_attr(node, "axis", 0)) % len(s)
        lifted, k = _around_axis(s, axis)
        i = L.const(np.asarray(idx, np.int64).reshape(-1), node.name or node.output[0])
        node.input[1] = i
        _set_attr(node, "axis", k)
        out = list(lifted)
        out[k] = int(idx.size)
        L.around(node, {0: lifted}, {0: tuple(out)})
    elif t == "Split":
        axis = int(_attr(node, "axis", 0)) % len(s)
        lifted, k = _around_axis(s, axis)
        _set_attr(node, "axis", k)
        outs = {}
        for j, o in enumerate(node.output):
            shape = list(lifted)
            shape[k] = L.shapes[o][axis]
            outs[j] = tuple(shape)
        L.around(node, {0: lifted}, outs)
    elif t == "Slice":
        axes = L.consts.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        steps = L.consts.get(node.input[4]) if len(node.input) > 4 and node.input[4] else None
        if axes is None or axes.size != 1 or (steps is not None and int(steps.reshape(-1)[0]) != 1):
            return False
        axis = int(axes.reshape(-1)[0]) % len(s)
        lifted, k = _around_axis(s, axis)
        node.input[3] = L.const(np.array([k], np.int64), node.name or node.output[0])
        shape = list(lifted)
        shape[k] = L.shapes[node.output[0]][axis]
        L.around(node, {0: lifted}, {0: tuple(shape)})
    elif t == "ReduceMean":
        axes = _attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = L.consts.get(node.input[1])
        if axes is None or np.asarray(axes).size != 1:
            return False
        axis = int(np.asarray(axes).reshape(-1)[0]) % len(s)
        lifted, k = _around_axis(s, axis)
        if len(lifted) != 3:
            return False
        if len(node.input) > 1 and node.input[1]:
            node.input[1] = L.const(np.array([k], np.int64), node.name or node.output[0])
        else:
            _set_attr(node, "axes", [k])
        _set_attr(node, "keepdims", 1)
        shape = list(lifted)
        shape[k] = 1
        L.around(node, {0: lifted}, {0: tuple(shape)})
    else:
        return False
    rewrites.append({"op": t, "node": node.name, "how": "on a view with the batch axis first"})
    return True


def _lift(L, node, rewrites) -> bool:
    """Rewrite one node that reads or writes a tensor without the batch axis first; -> whether it did."""
    t, outs = node.op_type, list(node.output)
    ins = [i for i in node.input if i and i not in L.consts]
    if not any(L.bad(n) for n in ins + outs) or any(n not in L.shapes for n in ins + outs):
        return False
    if any(L.bad(i.name) for i in L.model.graph.input if i.name in ins):
        return False                     # a model input of rank > 4: no rewrite makes it one the compiler takes
    if t == "Transpose":
        return _transpose(L, node, rewrites)
    if t in ("Squeeze", "Unsqueeze", "Flatten"):
        L.replace(node, [L.reshape(node.input[0], L.shapes[outs[0]], node.name or outs[0], out=outs[0])[0]])
        rewrites.append({"op": t, "node": node.name, "how": "a reshape"})
        return True
    if t == "Gemm":
        return _gemm_to_matmul(L, node, rewrites)
    if _rowwise(L, node):
        last_in = {k: _rows(L.shapes[i]) for k, i in enumerate(node.input) if i and i not in L.consts}
        L.around(node, last_in, {0: _rows(L.shapes[outs[0]])})
        rewrites.append({"op": t, "node": node.name, "how": "on rows (1, rows, last)"})
        return True
    if t == "MatMul" and len(ins) == 2:
        a, b = (L.shapes[i] for i in node.input[:2])
        if len(a) != len(b) or len(a) < 2 or a[:-2] != b[:-2]:
            return False
        lead = int(np.prod(a[:-2]))
        L.around(node, {0: (1, lead) + a[-2:], 1: (1, lead) + b[-2:]}, {0: (1, lead, a[-2], b[-1])})
        rewrites.append({"op": t, "node": node.name, "how": "batched over (1, %d, ...)" % lead})
        return True
    if t in ("Gather", "Split", "Slice", "ReduceMean") and L.bad(node.input[0]):
        return _on_axis(L, node, rewrites)
    return False


def _merge_reshapes(L) -> bool:
    """One edit: a Reshape of a Reshape reads the first one's input, a Reshape to its input's shape goes, or
    an unread Reshape goes. -> whether there was one."""
    g = L.model.graph
    producer = {o: n for n in g.node for o in n.output}
    read = {i for n in g.node for i in n.input} | L.outputs
    for n in list(g.node):
        if n.op_type != "Reshape" or n.output[0] not in L.shapes:
            continue
        if n.output[0] not in read:
            g.node.remove(n)
            return True
        p = producer.get(n.input[0])
        if p is not None and p.op_type == "Reshape" and p.input[0] in L.shapes:
            n.input[0] = p.input[0]
            n.input[1] = L.const(np.array(L.shapes[n.output[0]], np.int64), n.name or n.output[0])
            return True
        if L.shapes.get(n.input[0]) == L.shapes[n.output[0]] and n.output[0] not in L.outputs:
            for m in g.node:
                for k, i in enumerate(m.input):
                    if i == n.output[0]:
                        m.input[k] = n.input[0]
            g.node.remove(n)
            return True
    return False


def batch_first(model) -> list:
    """Rewrite `model` (batch 1, static shapes) so every activation it can has the batch axis first (see the
    module docstring); -> the list of rewrites, empty when the graph had no such tensor."""
    rewrites = []
    for _ in range(8 * len(model.graph.node) + 8):
        L = _Layout(model)
        if not any(L.bad(n) for n in L.shapes):
            break
        if not any(_lift(L, n, rewrites) for n in list(model.graph.node)) and not _merge_reshapes(L):
            break
    if rewrites:
        while _merge_reshapes(_Layout(model)):
            pass
        drop_unused_constants(model)
        present = {o for n in model.graph.node for o in n.output}
        for v in [v for v in model.graph.value_info if v.name not in present]:
            model.graph.value_info.remove(v)
    return rewrites


def not_batch_first(model) -> list:
    """[(node, tensor, shape)]: where a tensor without the batch axis first (or of rank > 4) begins, after
    batch_first did what it could: each node that writes one from tensors that have it."""
    L = _Layout(model)
    out = []
    for n in model.graph.node:
        bad = [o for o in n.output if L.bad(o)]
        if bad and not any(L.bad(i) for i in n.input if i):
            out.append((n, bad[0], L.shapes[bad[0]]))
    return out
