"""Devices and random streams, shared by the trainer, the tasks, the models and the online trainer.

Python 3.6 / torch 1.10 safe (the online trainer runs on a Jetson Nano), imports torch only.

The trainer's torch.Generator lives on the training device, so sampling (torch.multinomial in the
models' decode step, in the digits bandit) runs where the logits are, without a copy to the host. Draws
that pick host-side things (prompt indices, shuffles) come from the same generator and are returned on
the CPU. Every helper here takes a generator on any device (or None: the global stream), so the code
paths that CUDA runs are the ones the CPU tests exercise.

`--device auto` picks CUDA for a model big enough to gain from it and the CPU for a small MLP-sized
policy: a step of such a policy is a few dozen tiny kernels and, for control tasks, one host sync per
environment step, so launch and copy latency outweigh the arithmetic (benchmarks/gpu_check.py measures
the crossover; docs/results.md has the figures).
"""
import os

import torch

# Below this many parameters `--device auto` trains on the CPU even when a GPU is present. Measured with
# benchmarks/gpu_check.py ("auto" rows) on an NVIDIA H200 with a 16-core host, seconds per step of each
# built-in recipe, CPU (the trainer's 1 thread below 1M parameters) vs CUDA:
#   cartpole MLP 4,610 params 0.050 vs 0.122;  acrobot MLP 4,803: 0.98 vs 1.08   -> CPU
#   digits lite-resnet 101k: 0.054 vs 0.012;  arithmetic micro-gpt 0.8M: 0.234 vs 0.032;  3.9M: 0.267 vs 0.126
# The crossover lies between 4.8k and 101k parameters; 50k splits it (docs/results.md, GPU rows).
AUTO_CUDA_MIN_PARAMETERS = 50000


def cuda_available():
    return torch.cuda.is_available()


def _explicit(name):
    """torch.device for an explicit choice ('cpu', 'cuda', 'cuda:1', a torch.device); CUDA gets its index."""
    device = torch.device(name)
    if device.type == "cuda":
        if not cuda_available():
            from grpo_edge.errors import ConfigError
            raise ConfigError("device '%s' asked for, but torch sees no CUDA GPU (use --device cpu)" % name)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def choose_device(name, num_parameters=None):
    """(torch.device, reason): the device a run trains on and why, in words for one log line.

    name: 'auto' (or None), 'cpu', 'cuda', 'cuda:N' or a torch.device. With 'auto': CUDA when torch sees
    a GPU and the model has at least AUTO_CUDA_MIN_PARAMETERS parameters (or its size is not known yet, or
    the run is one rank of several under torchrun), else the CPU."""
    if name not in (None, "auto"):
        device = _explicit(name)
        return device, "asked for"
    if not cuda_available():
        return torch.device("cpu"), "auto: torch sees no CUDA GPU"
    gpu = torch.cuda.get_device_name(torch.cuda.current_device())
    if num_parameters is None or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return _explicit("cuda"), "auto: %s" % gpu
    if num_parameters < AUTO_CUDA_MIN_PARAMETERS:
        return torch.device("cpu"), ("auto: a %s-parameter model steps faster on the CPU than on %s "
                                     "(kernel launches outweigh its arithmetic below %s parameters; "
                                     "--device cuda to override)"
                                     % ("{:,}".format(num_parameters), gpu, "{:,}".format(AUTO_CUDA_MIN_PARAMETERS)))
    return _explicit("cuda"), "auto: %s, %s-parameter model" % (gpu, "{:,}".format(num_parameters))


def resolve_device(name, num_parameters=None):
    """The torch.device of choose_device (CUDA always with its index, so torch.cuda calls accept it)."""
    return choose_device(name, num_parameters)[0]


# ---------------------------------------------------------------------------------------------- random
def make_generator(device, seed):
    """A torch.Generator on `device` (CPU for devices without their own generators), seeded."""
    device = torch.device(device)
    g = torch.Generator(device=device if device.type == "cuda" else "cpu")
    g.manual_seed(int(seed))
    return g


def generator_device(generator):
    return generator.device if generator is not None else torch.device("cpu")


def multinomial(probs, generator=None):
    """One draw per row of probs (B, K) -> (B,) long on probs' device, from `generator` wherever it lives
    (a generator on another device draws there, and the tokens come back)."""
    where = generator_device(generator) if generator is not None else probs.device
    if where == probs.device:
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return torch.multinomial(probs.to(where), 1, generator=generator).squeeze(-1).to(probs.device)


def randint(high, size, generator=None):
    """torch.randint(high, size) drawn on the generator's device, returned on the CPU (host-side picks)."""
    return torch.randint(int(high), tuple(size), generator=generator,
                         device=generator_device(generator)).cpu()


def randperm(n, generator=None):
    """torch.randperm(n) drawn on the generator's device, returned on the CPU."""
    return torch.randperm(int(n), generator=generator, device=generator_device(generator)).cpu()


def generator_state(generator):
    """(state ByteTensor on the CPU, device type) of a generator, for a checkpoint."""
    return generator.get_state().cpu(), generator_device(generator).type


def set_generator_state(generator, state, saved_on=None):
    """Restore a generator saved by generator_state. Returns None, or a one-line note when the state came
    from another kind of device (a CUDA stream cannot continue on the CPU or back): the generator then
    keeps its fresh seed, so the run continues reproducibly but not on the original stream."""
    here = generator_device(generator).type
    if saved_on is None:
        saved_on = "cpu" if state.numel() > 16 else "cuda"     # CPU (mt19937) states are 5056 bytes, CUDA's 16
    if saved_on != here:
        return ("the sampling generator was saved on %s and this run is on %s: it continues from the seed, "
                "not the saved stream" % (saved_on, here))
    generator.set_state(state.cpu())
    return None


# ---------------------------------------------------------------------------------------------- AMP
def amp_dtype(device, name="auto"):
    """The autocast dtype of mixed precision on `device`: bfloat16 on the CPU; on CUDA float16 or
    bfloat16 as asked, 'auto' = bfloat16 where the GPU supports it, else float16."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.bfloat16
    bf16_ok = getattr(torch.cuda, "is_bf16_supported", lambda: False)()
    if name == "bfloat16" and not bf16_ok:
        from grpo_edge.errors import ConfigError
        raise ConfigError("training.amp_dtype 'bfloat16': %s has no bfloat16 support (use 'float16' or 'auto')"
                          % torch.cuda.get_device_name(device))
    if name == "float16" or (name == "auto" and not bf16_ok):
        return torch.float16
    return torch.bfloat16


def grad_scaler():
    """A CUDA loss scaler for float16 AMP (torch.amp's where it exists, torch.cuda.amp's on torch 1.x)."""
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


# ---------------------------------------------------------------------------------------------- memory
def parse_size(value, where):
    """'4G', '800M', '1.5GB', 65536 -> bytes; a ConfigError naming `where` otherwise."""
    s = str(value).strip().upper().rstrip("B")
    mult = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}.get(s[-1:], 1)
    try:
        n = float(s[:-1] if s[-1:] in ("K", "M", "G") else s) * mult
    except ValueError:
        n = -1
    if not n > 0 or n == float("inf"):
        from grpo_edge.errors import ConfigError
        raise ConfigError("%s must be a size such as 4G or 800M, got %r" % (where, value))
    return int(n)


# what training keeps besides the activations, per trainable parameter: fp32 weight, gradient and Adam's
# two moments (AMP autocasts activations only: the weights and Adam stay fp32)
STATE_BYTES_PER_PARAMETER = 16
# the reserve for the rollout (KV cache, logits), the Adam update's chunk and the allocator's rounding,
# measured on an H200 as reserved minus allocated peaks: 13-28% of the allocated peak (benchmarks/gpu_check.py)
ACTIVATION_SHARE = 0.5


def training_state_bytes(modules_trained, modules_frozen=()):
    """Bytes of weights + gradients + Adam moments of the trained modules, plus the frozen ones' weights."""
    n = sum(p.numel() for m in modules_trained if m is not None for p in m.parameters())
    frozen = sum(p.numel() for m in modules_frozen if m is not None for p in m.parameters())
    return STATE_BYTES_PER_PARAMETER * n + 4 * frozen


# training.micro_batch_mb's default on the CPU (peak RSS of the 3.9M micro-gpt 2410 -> 550 MB, issue 14)
CPU_MICRO_BATCH_MB = 128


def micro_batch_budget_mb(budget, state_bytes, micro_batch_mb, where="training.max_memory"):
    """The activation budget (training.micro_batch_mb) that keeps a run inside `budget` bytes: half of what
    the training state leaves (the rest is the rollout's and the allocator's), never above micro_batch_mb
    when that is > 0. A ConfigError when the state alone leaves less than 64 MB."""
    left = budget - state_bytes
    if left < 64 * 2 ** 20:
        from grpo_edge.errors import ConfigError
        raise ConfigError("%s %.0f MB: the weights, gradients and Adam moments need %.0f MB, which leaves %.0f MB "
                          "for activations (64 MB at least); use a smaller model or raise %s"
                          % (where, budget / 2.0 ** 20, state_bytes / 2.0 ** 20, max(0, left) / 2.0 ** 20, where))
    fit = max(1, int(ACTIVATION_SHARE * left / 2 ** 20))
    return min(fit, int(micro_batch_mb)) if int(micro_batch_mb) > 0 else fit


def cuda_free_bytes(device):
    """Free memory on the CUDA device now (the driver's count: other processes' use is taken off)."""
    return int(torch.cuda.mem_get_info(device)[0])


def cap_cuda_memory(device, budget):
    """Cap torch's CUDA allocator at `budget` bytes on `device` (the allocator frees its cache and retries
    before it raises); returns the fraction of the card set."""
    total = torch.cuda.get_device_properties(device).total_memory
    frac = min(1.0, budget / float(total))
    torch.cuda.set_per_process_memory_fraction(frac, device)
    return frac


def is_out_of_memory(exc):
    """True for an allocator's out-of-memory error (CUDA's, or the CPU's 'not enough memory')."""
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    msg = str(exc)
    return isinstance(exc, RuntimeError) and any(s in msg for s in ("out of memory", "not enough memory",
                                                                      "can't allocate memory"))


def peak_memory(device):
    """Peak memory of this process on `device`, in MB: {'peak_memory_mb': ...}, plus for CUDA the caching
    allocator's peaks: 'peak_cuda_allocated_mb' (tensors) and 'peak_cuda_reserved_mb' (what the process
    holds from the card, the figure to compare with a card's size)."""
    device = torch.device(device)
    if device.type == "cuda":
        alloc = torch.cuda.max_memory_allocated(device) / 2.0 ** 20
        reserved = torch.cuda.max_memory_reserved(device) / 2.0 ** 20
        return {"peak_memory_mb": alloc, "peak_cuda_allocated_mb": alloc, "peak_cuda_reserved_mb": reserved}
    import resource
    import sys
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_memory_mb": rss / 2.0 ** 20 if sys.platform == "darwin" else rss / 1024.0}


def device_of(module):
    """The device of a module's parameters; the CPU for one without parameters (e.g. a wrapped runtime engine)."""
    for p in (module.parameters() if hasattr(module, "parameters") else ()):
        return p.device
    return torch.device("cpu")
