"""ExportSpec: what a runtime runs, described for torch.onnx.export (Python 3.6 / torch 1.10 safe)."""
import collections

ExportSpec = collections.namedtuple(
    "ExportSpec", ["module", "example_inputs", "input_names", "output_names", "dynamic_axes"])
ExportSpec.__doc__ = """One tensor-in/tensor-out function to export.

module          nn.Module whose forward(*example_inputs) is the function (eval mode at export)
example_inputs  tuple of tensors, in forward's argument order
input_names     list of str, one per example input
output_names    list of str, one per output
dynamic_axes    {name: {axis: symbolic name}}, e.g. {"obs": {0: "batch"}}, as torch.onnx.export takes it

Typical use: torch.onnx.export(s.module, s.example_inputs, path, input_names=s.input_names,
output_names=s.output_names, dynamic_axes=s.dynamic_axes, opset_version=17).
"""


def count_parameters(model, trainable_only=False):
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
