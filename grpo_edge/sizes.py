"""Sizes checked against memory before anything is allocated (issue 31).

    sizes.check_before_build(cfg, task, model_kwargs, device)     # GRPOTrainer, before build_model

`model.max_len=1000000` (a max_len x max_len causal mask) or `training.batch_size=100000000` used to run
into an out-of-memory traceback, the second after minutes and tens of GB. Here the model is built on
torch's meta device (shapes only, no memory) to count its weights and buffers, the rollout's tensors are
counted per sample, and a total above the memory there is (training.max_memory, else the GPU's free memory
or the machine's available RAM) is one line with the estimate. Both figures are lower bounds: activations,
the allocator and the Python objects come on top, so a run that passes may still not fit; one that fails
here could never have fit.
"""

from grpo_edge.core.devices import STATE_BYTES_PER_PARAMETER     # fp32 weight, gradient, two Adam moments
from grpo_edge.errors import ConfigError


def check_before_build(cfg, task, model_kwargs, device):
    budget, where = available_bytes(cfg.training.max_memory, device)
    if budget is None:
        return
    arch = cfg.model["arch"]
    params, buffers = model_bytes(arch, model_kwargs)
    state = STATE_BYTES_PER_PARAMETER * params + buffers
    if state > budget:
        raise ConfigError("model: the %s (%s parameters%s) needs at least %s for its weights, gradients, Adam "
                          "moments and buffers (buffers %s), more than %s (%s); use a smaller model"
                          % (arch, _count(params), _settings(cfg.model), human(state), human(buffers),
                             human(budget), where))
    per_sample, what = rollout_bytes_per_sample(task)
    samples = int(cfg.training.batch_size) * int(cfg.grpo.group_size)
    if per_sample and state + samples * per_sample > budget:
        raise ConfigError("training.batch_size=%d x grpo.group_size=%d = %s samples: the rollout alone needs at "
                          "least %s (%s each: %s), and the model %s, more than %s (%s); use a smaller batch"
                          % (cfg.training.batch_size, cfg.grpo.group_size, _count(samples),
                             human(samples * per_sample), human(per_sample), what, human(state), human(budget),
                             where))


def available_bytes(max_memory, device):
    """(bytes, where they come from): training.max_memory when set, else the GPU's free memory (CUDA) or
    the machine's available RAM (Linux MemAvailable); (None, None) where neither can be read."""
    from grpo_edge.core import devices
    if max_memory:
        return devices.parse_size(max_memory, "training.max_memory"), "training.max_memory"
    if getattr(device, "type", "cpu") == "cuda":
        return devices.cuda_free_bytes(device), "free on %s" % device
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f if ":" in line)
        return int(info["MemAvailable"].split()[0]) * 1024, "available RAM"
    except (OSError, KeyError, ValueError, IndexError):
        return None, None


def model_bytes(arch, kwargs):
    """(parameters, buffer bytes) of build_model(arch, **kwargs), counted on the meta device (torch >= 2);
    (0, 0) where the model cannot be built there (its own errors come when it is really built)."""
    import torch
    from grpo_edge.core.models import build_model
    if not hasattr(torch, "get_default_device"):        # torch.device as a context manager: torch >= 2
        return 0, 0
    try:
        with torch.device("meta"), _skip_init_on_meta():
            model = build_model(arch, **kwargs)
    except Exception:
        return 0, 0
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return params, buffers


# In-place initializers: on a meta tensor they would only run Python reference kernels (normal_ does, for
# nn.Embedding's default init) whose first call imports torch._dynamo: 0.9 s and 77 MB on every text-model
# start, and under torchrun, once the process group exists, that import keeps the group alive past
# destroy_process_group and the process aborts at exit ("terminate called without an active exception").
INITIALIZERS = frozenset(("normal_", "uniform_", "trunc_normal_", "kaiming_normal_", "kaiming_uniform_",
                          "xavier_normal_", "xavier_uniform_", "orthogonal_", "sparse_", "log_normal_",
                          "exponential_", "geometric_", "cauchy_", "bernoulli_", "random_"))


def _skip_init_on_meta():
    """A torch function mode in which an initializer (INITIALIZERS) called on a meta tensor returns the tensor
    as it is: counting a model needs its shapes, not its values."""
    from torch.overrides import TorchFunctionMode

    class SkipInitOnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            target = args[0] if args else kwargs.get("tensor")      # nn.init passes it as tensor=
            if getattr(func, "__name__", "") in INITIALIZERS and getattr(target, "is_meta", False):
                return target
            return func(*args, **kwargs)
    return SkipInitOnMeta()


def rollout_bytes_per_sample(task):
    """(bytes, how) of the rollout tensors one sample needs at least: a control episode's observations,
    actions, log-probs, rewards and mask over max_steps; a text sample's ids, log-probs and mask over its
    input and completion, plus one step's logits."""
    kind = getattr(task, "kind", None)
    kw = task.model_kwargs() if hasattr(task, "model_kwargs") else {}
    if kind == "control" and getattr(task, "max_steps", None):
        obs = int(kw.get("obs_dim", 1))
        return 4 * int(task.max_steps) * (obs + 4), "up to %d steps x (%d observation + 4) float32" % (
            task.max_steps, obs)
    if hasattr(task, "max_new_tokens") and hasattr(task, "encode_inputs"):
        n_in = input_tokens(task)
        vocab = int(kw.get("vocab_size", 0))
        return 32 * (n_in + int(task.max_new_tokens)) + 4 * vocab, "%d input + %d completion tokens, %d logits" % (
            n_in, task.max_new_tokens, vocab)
    return 0, ""


def input_tokens(task):
    """The fixed length of a text task's encoded inputs (tasks/text_base.py: encode_inputs' contract)."""
    return int(task.encode_inputs([task.train_problems[0][0]]).shape[1])


def human(n):
    for unit, size in (("TB", 2 ** 40), ("GB", 2 ** 30), ("MB", 2 ** 20)):
        if n >= size:
            return "%.1f %s" % (n / float(size), unit)
    return ("%.1f KB" % (n / 1024.0)) if n >= 1024 else "%d B" % n


def _count(n):
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return "%.1f%s" % (n / size, unit)
    return str(int(n))


def _settings(model_cfg):
    keys = [k for k in ("max_len", "d_model", "n_layer", "num_layers", "hidden") if model_cfg.get(k) is not None]
    return "".join(", %s %s" % (k, model_cfg[k]) for k in keys)
