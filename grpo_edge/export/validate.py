"""Checks at the boundary of the export side, before any work starts: calibration sets (which inputs,
dtypes, shapes, finite values) and quantized models (finite, positive Q/DQ scales). Each failure is an
ExportError naming the file and the place at fault, which the CLI prints as one line."""
import numpy as np

from grpo_edge.errors import ExportError


def _check_finite(a, what, per_sample=False):
    """Refuse NaN / inf in a floating array, naming where the first one is (sample index when stacked)."""
    a = np.asarray(a)
    if a.dtype.kind != "f" or a.size == 0:
        return
    bad = ~np.isfinite(a)
    if not bad.any():
        return
    first = np.argwhere(bad)[0]
    where = ("sample %d" % first[0]) if per_sample and a.ndim >= 1 else "index %s" % (tuple(int(i) for i in first),)
    raise ExportError("%s holds %d non-finite value(s) (first: %s at %s): every calibration value must be "
                      "finite" % (what, int(bad.sum()), a[tuple(first)], where))


def check_feeds(feeds, specs, src, onnx_path):
    """Every feed holds every input with its dtype, rank and static dims (dynamic dims may vary)."""
    for i, f in enumerate(feeds):
        for s in specs:
            if s["name"] not in f:
                raise ExportError("calibration %s: feed %d lacks input %r of %s" % (src, i, s["name"], onnx_path))
            a = f[s["name"]]
            ok = a.dtype == np.dtype(s["dtype"]) and a.ndim == len(s["shape"]) and all(
                not isinstance(d, int) or d <= 0 or d == got for d, got in zip(s["shape"], a.shape))
            if not ok:
                raise ExportError("calibration %s feed %d does not fit %s input %r: expected (%s) %s, found %s %s"
                                  % (src, i, onnx_path, s["name"], ", ".join(str(d) for d in s["shape"]),
                                     s["dtype"], tuple(a.shape), a.dtype))
            _check_finite(a, "calibration %s feed %d input %r" % (src, i, s["name"]))


def check_calibration(data, specs, src, onnx_path):
    if isinstance(data, list):
        return check_feeds(data, specs, src, onnx_path)
    if "?" in data:
        raise ExportError("%s: one array given, but %s has %d inputs %s"
                          % (src, onnx_path, len(specs), [s["name"] for s in specs]))
    counts = set()
    for s in specs:
        a = data[s["name"]]
        want = "(%s) %s" % (", ".join(str(d) for d in s["shape"]), s["dtype"])
        found = "%s %s" % (tuple(a.shape), a.dtype)
        ok = a.dtype == np.dtype(s["dtype"]) and a.ndim == len(s["shape"]) and a.ndim >= 1 and a.shape[0] > 0
        if ok:
            ok = all(not isinstance(d, int) or d <= 0 or d == got
                     for d, got in list(zip(s["shape"], a.shape))[1:])
        if not ok:
            raise ExportError("calibration %s does not fit %s input %r: expected %s, found %s"
                              % (src, onnx_path, s["name"], want, found))
        _check_finite(a, "calibration %s input %r" % (src, s["name"]), per_sample=True)
        counts.add(a.shape[0])
    if len(counts) > 1:
        raise ExportError("calibration %s: inputs have different sample counts %s" % (src, sorted(counts)))


def check_qdq_scales(model, path) -> None:
    """Every QuantizeLinear / DequantizeLinear scale of an int8/int16 QDQ model is finite and > 0 (an inf
    scale turns every value it touches into 0 or NaN; 0 divides by zero)."""
    from onnx import numpy_helper
    inits = {i.name: i for i in model.graph.initializer}
    consts = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(node.input) < 2:
            continue
        name = node.input[1]
        if name in inits:
            scale = numpy_helper.to_array(inits[name])
        elif name in consts:
            scale = numpy_helper.to_array(consts[name].attribute[0].t)
        else:
            continue
        scale = np.asarray(scale, dtype=np.float64)
        if not (np.isfinite(scale).all() and (scale > 0).all()):
            bad = scale[~(np.isfinite(scale) & (scale > 0))].ravel()[0]
            raise ExportError("%s: %s %r has scale %r; quantization scales must be finite and > 0 "
                              "(re-quantize from a finite calibration set)" % (path, node.op_type, node.name or name, float(bad)))
