"""Attention masks written with -inf before a Softmax: Where(mask, -inf, scores) (masked_fill, torch.where)
or Add(scores, mask of 0 / -inf) (nn.MultiheadAttention's attn_mask, scaled_dot_product_attention's
is_causal, once the mask is folded to a constant).

onnxruntime's quantizer would give the mask an infinite scale. Instead (onnx2int8), the mask node and its
Softmax stay float between the scores' Q -> DQ and the Softmax's output Q: onnxruntime then computes the
exact masked softmax of the int8 scores, and the ESP32 compiler fuses the pair into one masked softmax (the
masked entries take no part and come out as probability 0).
"""
import numpy as np


# what a Where that is not such a mask is told (deploy's check before any work, and the compiler)
NOT_A_MASK = "only an attention mask compiles (a constant condition choosing -inf or the scores, read by a Softmax)"


def _constants(model) -> dict:
    """{name: value} of the initializers and Constant nodes."""
    from onnx import numpy_helper
    out = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
                if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    return out


def _is_minus_inf(v) -> bool:
    return v is not None and v.size == 1 and float(v.reshape(())) <= -1e30


def _mask_of(consts, n):
    """(scores input name, keep mask) when node n applies a constant attention mask of -inf, else None."""
    if n.op_type == "Where":
        cond = consts.get(n.input[0])
        for k in (1, 2):
            if cond is not None and _is_minus_inf(consts.get(n.input[k])) and n.input[3 - k] not in consts:
                return n.input[3 - k], (~cond.astype(bool) if k == 1 else cond.astype(bool))
    if n.op_type == "Add":
        for k in (0, 1):
            add = consts.get(n.input[k])
            if add is not None and n.input[1 - k] not in consts and add.dtype.kind == "f":
                masked = add <= -1e30
                if masked.any() and np.all((add == 0) | masked):
                    return n.input[1 - k], ~masked
    return None


def masked_softmaxes(model) -> list:
    """[{"node": the Where / Add, "softmax": node, "scores": input name, "keep": bool array (True: attended)}]
    for each constant attention mask of -inf whose output only a Softmax reads."""
    readers = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    consts = _constants(model)
    found = []
    for n in (n for n in model.graph.node if n.op_type in ("Where", "Add")):
        users = readers.get(n.output[0], [])
        mask = _mask_of(consts, n) if len(users) == 1 and users[0].op_type == "Softmax" else None
        if mask is not None:
            found.append({"node": n, "softmax": users[0], "scores": mask[0], "keep": mask[1]})
    return found


def quantize_scores(src, dst, data) -> None:
    """In the int8 QDQ model at dst: a Q -> DQ pair (minmax parameters, computed by onnxruntime's own
    compute_scale_zp) on each masked softmax's scores where the quantizer left them float (their only reader,
    the mask node, stays float)."""
    import onnx
    from onnxruntime.quantization.quant_utils import compute_scale_zp
    from grpo_edge.export.onnx_utils import insert_qdq, tensor_values
    model = onnx.load(str(dst))
    producers = {o: n for n in model.graph.node for o in n.output}
    todo = [p for p in masked_softmaxes(model)
            if producers.get(p["scores"]) is None or producers[p["scores"]].op_type != "DequantizeLinear"]
    if not todo:
        return
    for name, v in tensor_values(src, data, sorted({p["scores"] for p in todo})).items():
        zp, scale = compute_scale_zp(np.array(v.min(), np.float32), np.array(v.max(), np.float32),
                                     np.array(-128, np.int8), np.array(127, np.int8))
        dq = name + "_DequantizeLinear_Output"
        for p in (p for p in todo if p["scores"] == name):
            p["node"].input[list(p["node"].input).index(name)] = dq
        insert_qdq(model, name, dq, scale, zp, after=producers.get(name))
    onnx.save(model, str(dst))
