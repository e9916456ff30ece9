"""Latent-space augmentation: Gaussian noise on hidden representations, in training mode only
(Python 3.6 / torch 1.10 safe).

    handle = add_latent_noise(model, std=0.1, layers="all")   # forward hooks on the chosen layers
    ...train...
    handle.remove()                                           # back to the plain model

Each chosen layer's output h becomes h + std * rms(h) * eps, eps ~ N(0, 1), where rms(h) is the
root-mean-square of h over every dimension but the batch one, per sample: `std` is relative to the
activation's own scale, so one value means the same at every depth. Noise is added only while the
layer is in training mode; in eval mode (rollouts, evaluation, export) the hook returns the output
untouched, so outputs are bit-identical to the model without hooks. The hooks are not part of the
state dict: a checkpoint, and every model rebuilt from one, has no noise at all.

Under gradient checkpointing the noise is drawn from the global torch RNG, which checkpointing
replays in the recomputation, so forward and backward see the same noise.
"""
import torch


def latent_layer_names(model):
    """The names of the modules whose outputs are the model's hidden representations, input to output.

    micro-gpt: blocks.<i>; tiny-transformer: encoder.<i>, decoder.<i>; lite-resnet: stem, layers.<i>;
    mlp: the hidden activations net.<j>.
    """
    arch = getattr(model, "arch", None)
    if arch == "micro-gpt":
        return ["blocks.%d" % i for i in range(len(model.blocks))]
    if arch == "tiny-transformer":
        return (["encoder.%d" % i for i in range(len(model.encoder))]
                + ["decoder.%d" % i for i in range(len(model.decoder))])
    if arch == "lite-resnet":
        return ["stem"] + ["layers.%d" % i for i in range(len(model.layers))]
    if arch == "mlp":
        return ["net.%d" % i for i, m in enumerate(model.net)
                if isinstance(m, (torch.nn.Tanh, torch.nn.ReLU))]
    raise ValueError("latent noise: no hidden layers known for model %r (arch %r)"
                     % (type(model).__name__, arch))


def resolve_layers(model, layers="all"):
    """'all', a list of names from latent_layer_names(model), or a list of indices into it -> names."""
    names = latent_layer_names(model)
    if layers in (None, "all"):
        return list(names)
    if isinstance(layers, (str, int)):
        layers = [layers]
    out = []
    for item in layers:
        if isinstance(item, bool):
            raise ValueError("latent layer %r is not a name or an index" % (item,))
        if isinstance(item, int):
            if not -len(names) <= item < len(names):
                raise ValueError("latent layer index %d is out of range: %s has %d (%s)"
                                 % (item, model.arch, len(names), ", ".join(names)))
            out.append(names[item])
        elif item in names:
            out.append(item)
        else:
            raise ValueError("unknown latent layer %r for %s; valid: all, or any of %s"
                             % (item, model.arch, ", ".join(names)))
    return out


def _noisy(h, std):
    """h + std * rms(h) * N(0, 1); rms per sample over all but the first dimension."""
    dims = tuple(range(1, h.dim()))
    if dims:
        rms = h.detach().pow(2).mean(dim=dims, keepdim=True).sqrt()
    else:
        rms = h.detach().abs()
    return h + std * rms * torch.randn_like(h)


class LatentNoise(object):
    """The forward hooks of add_latent_noise; `std` may be changed while they are attached."""

    def __init__(self, model, std, layers):
        if not std >= 0:
            raise ValueError("latent noise std must be >= 0, got %r" % (std,))
        self.std = float(std)
        self.layers = resolve_layers(model, layers)
        modules = dict(model.named_modules())
        self._handles = [modules[name].register_forward_hook(self._hook) for name in self.layers]

    def _hook(self, module, inputs, output):
        if not module.training or self.std <= 0:
            return None                                   # eval / export: the output as it is
        if isinstance(output, tuple):                     # micro-gpt blocks return (x, k, v): noise on x
            return (_noisy(output[0], self.std),) + tuple(output[1:])
        return _noisy(output, self.std)

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []


def add_latent_noise(model, std=0.1, layers="all"):
    """Attach training-only Gaussian noise to the outputs of `layers` of `model`. Returns a LatentNoise
    handle (call .remove() to detach). layers: 'all', names from latent_layer_names(model), or indices."""
    return LatentNoise(model, std, layers)
