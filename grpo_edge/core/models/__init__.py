"""Model registry (Python 3.6 / torch 1.10 safe).

    model = build_model("micro-gpt", vocab_size=20)
    same = build_model(model.arch, **model.config())     # how a checkpoint rebuilds it

Every model has a class attribute `arch`, `config()`, and `export_spec(batch_size=1)` returning an
ExportSpec (tiny-transformer: a dict of two). See docs/architecture.md for the contracts.
"""
from .lite_resnet import LiteResNet
from .micro_gpt import MicroGPT
from .mlp import MLPPolicy
from .spec import ExportSpec, count_parameters
from .tiny_transformer import TinyTransformer

ARCHS = {
    MLPPolicy.arch: MLPPolicy,
    TinyTransformer.arch: TinyTransformer,
    MicroGPT.arch: MicroGPT,
    LiteResNet.arch: LiteResNet,
}


def build_model(arch, **kwargs):
    """Build the registered model `arch` ("mlp", "tiny-transformer", "micro-gpt", "lite-resnet") from kwargs."""
    if arch not in ARCHS:
        raise ValueError("unknown model arch %r; valid: %s" % (arch, ", ".join(sorted(ARCHS))))
    return ARCHS[arch](**kwargs)


__all__ = ["ARCHS", "build_model", "count_parameters", "ExportSpec", "LiteResNet", "MicroGPT", "MLPPolicy",
           "TinyTransformer"]
