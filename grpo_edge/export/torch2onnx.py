"""torch2onnx: export a model's runtime function (its `export_spec()`) to single-file ONNX.

    from grpo_edge.core.checkpoint import load_policy
    model, state = load_policy("runs/cartpole/best.pt")
    info = torch2onnx(model, "model.onnx")          # {"files": {"model": {...}}, "max_abs_diff": ...}

Exporter choice: the TorchScript-based exporter (`dynamo=False`) at opset 17. It writes one
self-contained file for our small models, honours `dynamic_axes` as given by the model's spec, needs
no onnxscript at export time, and produces the plain MatMul/Gemm/Conv graphs that ORT quantization and
the ESP32 generator expect. torch 2.13's default (`dynamo=True`) picks opset 18+, splits weights into
`.onnx.data` unless told otherwise and expresses dynamic shapes differently; we keep it out of the
default path (pass `dynamo=True` to try it).

Models with several runtime functions (tiny-transformer: encoder + decoder step) give a dict of specs:
one file per spec, `model.encoder.onnx`, `model.decoder_step.onnx`.
"""
import io
import warnings
from pathlib import Path

import numpy as np

from grpo_edge.errors import ExportError
from grpo_edge.report import atomic_write_bytes


OPSETS = (13, 20)           # 13: QuantizeLinear's per-channel axis; 20: torch's TorchScript exporter maximum


def torch2onnx(model, out_path, batch_size: int = 1, opset: int = 17, check: bool = True, simplify: bool = True,
               atol: float = 1e-4, dynamo: bool = False) -> dict:
    """Export `model.export_spec(batch_size)` to ONNX at `out_path`; returns an info dict.

    check: run the ONNX file in onnxruntime on fresh random inputs at two batch sizes and compare with
      torch; raises ExportError if max |diff| > atol (fp32 exports reach ~1e-6).
    simplify: fold constants / fuse with onnxslim (onnxsim if onnxslim is missing); the result is
      checked again when `check` is set.
    Returns {"files": {name: per-file info}, "opset", "max_abs_diff", "exporter"}; per-file info holds
    path, size_bytes, inputs, outputs, macs, max_abs_diff, simplified.
    """
    import torch
    if not isinstance(opset, int) or not OPSETS[0] <= opset <= OPSETS[1]:
        raise ExportError("opset must be %d-%d, got %r (%d: per-channel int8 Q/DQ; %d: the newest the TorchScript "
                          "exporter writes)" % (OPSETS + (opset,) + OPSETS))
    if not hasattr(model, "export_spec"):
        raise ExportError("%s has no export_spec(); only grpo-edge models can be exported" % type(model).__name__)
    specs = model.export_spec(batch_size=batch_size)
    out_path = Path(out_path)
    if isinstance(specs, dict):
        stem = out_path.name[:-5] if out_path.name.endswith(".onnx") else out_path.name
        targets = {k: out_path.with_name("%s.%s.onnx" % (stem, k)) for k in specs}
    else:
        specs = {"model": specs}
        targets = {"model": out_path}
    was_training = model.training
    model.eval()
    files = {}
    try:
        for key, spec in specs.items():
            files[key] = _export_one(spec, targets[key], opset, dynamo)
            if simplify:
                files[key]["simplified"] = _simplify(targets[key])
            if check:
                fresh = model.export_spec(batch_size=batch_size + 2)
                fresh = fresh[key] if isinstance(fresh, dict) else fresh
                diffs = [_max_diff(spec, targets[key], spec.example_inputs),
                         _max_diff(spec, targets[key], fresh.example_inputs)]
                files[key]["max_abs_diff"] = max(diffs)
                if files[key]["max_abs_diff"] > atol:
                    raise ExportError("%s: ONNX output differs from torch by %.3g (> %.1g)"
                                      % (targets[key], files[key]["max_abs_diff"], atol))
            files[key].update(_describe(targets[key]))
    finally:
        model.train(was_training)
    del torch
    diffs = [f["max_abs_diff"] for f in files.values() if f.get("max_abs_diff") is not None]
    return {"files": files, "opset": opset, "max_abs_diff": max(diffs) if diffs else None,
            "exporter": "torch.onnx.export(dynamo=%s)" % dynamo}


def _export_one(spec, path, opset, dynamo) -> dict:
    import torch
    args = tuple(spec.example_inputs)
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            if dynamo:
                prog = torch.onnx.export(spec.module, args, None, input_names=list(spec.input_names),
                                         output_names=list(spec.output_names), opset_version=opset,
                                         dynamic_axes=dict(spec.dynamic_axes or {}), dynamo=True)
                data = prog.model_proto.SerializeToString()
            else:
                torch.onnx.export(spec.module, args, buf, input_names=list(spec.input_names),
                                  output_names=list(spec.output_names), dynamic_axes=dict(spec.dynamic_axes or {}),
                                  opset_version=opset, do_constant_folding=True, dynamo=False)
                data = buf.getvalue()
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportError("torch.onnx.export failed for %s (%s)" % (type(spec.module).__name__, msg[:300]))
    if len(data) > 2 ** 31 - 1:
        raise ExportError("%s: model is over 2 GB, cannot be a single ONNX file" % path)
    atomic_write_bytes(path, data)
    return {"path": str(path)}


def _simplify(path) -> str:
    """Simplify in place; returns the tool used, or 'none (...)' when no simplifier is installed."""
    import onnx
    model = onnx.load(str(path))
    try:
        import onnxslim
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            slim = onnxslim.slim(model)
        tool = "onnxslim %s" % getattr(onnxslim, "__version__", "")
    except ImportError:
        try:
            import onnxsim
        except ImportError:
            return "none (install onnxslim or onnxsim)"
        slim, ok = onnxsim.simplify(model)
        if not ok:
            return "none (onnxsim check failed, kept the exported graph)"
        tool = "onnxsim %s" % getattr(onnxsim, "__version__", "")
    onnx.checker.check_model(slim)
    atomic_write_bytes(path, slim.SerializeToString())
    return tool.strip()


def _max_diff(spec, path, inputs) -> float:
    import torch
    from grpo_edge.export.onnx_utils import session
    sess = session(path, optimize=True)
    with torch.no_grad():
        ref = spec.module(*inputs)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    feed = {name: t.detach().cpu().numpy() for name, t in zip(spec.input_names, inputs)}
    feed = {k: v for k, v in feed.items() if k in {i.name for i in sess.get_inputs()}}  # constant inputs folded away
    got = sess.run(None, feed)
    if len(got) != len(ref):
        raise ExportError("%s: %d outputs, torch gives %d" % (path, len(got), len(ref)))
    return float(max(np.max(np.abs(g.astype(np.float64) - r.detach().cpu().numpy().astype(np.float64)))
                     if g.size else 0.0 for g, r in zip(got, ref)))


def _describe(path) -> dict:
    from grpo_edge.export.onnx_utils import count_macs, io_specs, load_onnx, opset_of
    m = load_onnx(path)
    return {"size_bytes": Path(path).stat().st_size, "inputs": io_specs(m, "input"),
            "outputs": io_specs(m, "output"), "opset": opset_of(m), "macs": count_macs(m, batch=1)}
