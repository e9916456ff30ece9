"""Self-describing checkpoints, written atomically (Python 3.6 / torch 1.10 safe).

A checkpoint is a dict of plain tensors and Python scalars/lists/dicts, so that
``torch.load(path, weights_only=True)`` reads it (never unpickles arbitrary objects):

  format        "grpo-edge/1"
  arch          model registry name ("mlp", "micro-gpt", ...)
  model_config  constructor kwargs: build_model(arch, **model_config) rebuilds the model
  task          task name;  task_meta: spaces / vocabulary / input shape (plain data)
  task_class    a user's Task class as 'module:Class' (absent for built-in tasks), so every command rebuilds it
  config        the resolved run config (nested dict)
  model         state dict
  optimizer, scheduler, rng, step, metrics   (training state; optional for deploy-only files)
  model_sha256  SHA-256 of the weights (names, dtypes, shapes, values), written by save_checkpoint

load_checkpoint refuses, with one line, a file whose entries have the wrong types, whose weights do not
match model_sha256, or whose weights are NaN / inf or beyond 1e6 (a flipped exponent bit: 1.3 -> 1.3e38),
before any model is built.
"""
import hashlib
import inspect
import os
import pickle
import tempfile
import types

import torch

FORMAT = "grpo-edge/1"


from grpo_edge.errors import CheckpointError  # noqa: F401  (plain-Python module, 3.6 safe)


def save_checkpoint(path, state):
    """Atomically write `state` to `path`: temp file in the same folder, fsync, rename."""
    state = dict(state)
    state.setdefault("format", FORMAT)
    if isinstance(state.get("model"), dict):
        state["model_sha256"] = weights_sha256(state["model"])
    path = str(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        os.makedirs(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o644 & ~mask)              # mkstemp makes 0600 files; a checkpoint is meant to be shared
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        try:  # make the rename itself durable
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _why_unreadable(path, exc):
    """One line on why torch.load refused `path`, without torch's advice to load it unsafely."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        head = b""
    if not head.startswith(b"PK"):      # torch >= 1.6 writes a zip archive
        return "not a torch checkpoint file: %s" % ("it is empty" if not head else "it is not a zip archive")
    msg = str(exc).strip()
    if "Weights only load failed" in msg or isinstance(exc, pickle.UnpicklingError):
        return ("it holds pickled Python objects, such as a whole model saved with torch.save(model), which are "
                "never loaded: a grpo-edge checkpoint holds tensors and plain values only (grpo-edge train writes them)")
    first = (msg.splitlines()[0] if msg else type(exc).__name__).split(". ")[0]
    return "a damaged torch file: %s" % first[:160]


def load_checkpoint(path, map_location="cpu"):
    """Load and validate a grpo-edge checkpoint; raises CheckpointError with a one-line reason."""
    path = str(path)
    if not os.path.exists(path):
        raise CheckpointError("checkpoint not found: %s" % path)
    try:
        state = _load_weights_only(path, map_location)
    except Exception as e:  # corrupt zip, truncated file, pickled objects we refuse to load
        raise CheckpointError("%s is not a readable grpo-edge checkpoint (%s)" % (path, _why_unreadable(path, e)))
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError("%s is not a grpo-edge checkpoint (no '%s' format tag)" % (path, FORMAT))
    check_entries(state, path)
    return state


# entry -> (type, what it must be), checked before anything is built from a checkpoint
ENTRIES = {"arch": (str, "an architecture name"), "model_config": (dict, "a mapping of constructor arguments"),
           "model": (dict, "a mapping of weight tensors"), "task": (str, "a task name"),
           "task_class": (str, "'module:Class'"),
           "config": (dict, "a mapping (the run config)"), "task_meta": (dict, "a mapping")}


def check_entries(state, path):
    """Types of the entries, the weights' checksum and their values; a CheckpointError naming the entry."""
    from grpo_edge.core.finite import weights_problem
    for key in ("arch", "model_config", "model"):
        if key not in state:
            raise CheckpointError("%s is missing '%s'" % (path, key))
    for key, (typ, what) in ENTRIES.items():
        if key in state and state[key] is not None and not isinstance(state[key], typ):
            raise CheckpointError("%s: entry '%s' must be %s, got %s" % (path, key, what, type(state[key]).__name__))
    cfg = state.get("config") or {}
    for section in ("model", "training", "grpo", "task"):
        if cfg.get(section) is not None and not isinstance(cfg[section], dict):
            raise CheckpointError("%s: config section '%s' must be a mapping" % (path, section))
    bad = [k for k, v in state["model"].items() if not isinstance(k, str) or not torch.is_tensor(v)]
    if bad:
        raise CheckpointError("%s: entry 'model' holds %r, which is not a named tensor" % (path, bad[0]))
    if any(not isinstance(k, str) for k in state["model_config"]):
        raise CheckpointError("%s: entry 'model_config' has a key that is not a string" % path)
    digest = state.get("model_sha256")
    if digest is not None and digest != weights_sha256(state["model"]):
        raise CheckpointError("%s: the weights do not match their checksum (model_sha256): the file was changed "
                              "or corrupted after it was written" % path)
    problem = weights_problem(list(state["model"].values()))
    if problem is not None:
        raise CheckpointError("%s: the weights are %s: a corrupted or diverged checkpoint; use an earlier one"
                              % (path, problem))


def weights_sha256(weights):
    """SHA-256 over the sorted names, dtypes, shapes and values of a state dict (float types as float32)."""
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].detach().cpu()
        h.update(("%s|%s|%s;" % (name, str(t.dtype), list(t.shape))).encode("utf-8"))
        if t.is_floating_point():
            t = t.float()
        elif t.dtype == torch.bool:
            t = t.to(torch.uint8)
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def check_fits_task(model, task, path=""):
    """The task's input/output sizes (task.model_kwargs()) match the model's (obs_dim, vocab_size, ...)."""
    cfg = model.config() if hasattr(model, "config") else {}
    try:
        need = task.model_kwargs()
    except Exception:  # a task that cannot say: nothing to compare
        return
    for key, value in need.items():
        if key in cfg and cfg[key] != value:
            raise CheckpointError("%s: the %s policy has %s=%r, task %s needs %r: it was trained on another task"
                                  % (path or "checkpoint", getattr(model, "arch", "?"), key, cfg[key],
                                     getattr(task, "name", "?"), value))


# torch.load(weights_only=True) exists from torch 1.13. Older torch (JetPack 4.6 ships 1.10) gets the same
# guarantee -- containers, scalars, strings and tensors only, never arbitrary objects -- from an unpickler
# that refuses every global except what a tensor or a state dict needs.
_HAS_WEIGHTS_ONLY = "weights_only" in inspect.signature(torch.load).parameters
_SAFE_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
                 ("collections", "OrderedDict")}


class _TensorsOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _SAFE_GLOBALS or (module == "torch" and name.endswith("Storage")):
            return super(_TensorsOnlyUnpickler, self).find_class(module, name)
        raise pickle.UnpicklingError("global %s.%s is not allowed in a weights-only checkpoint" % (module, name))


_tensors_only_pickle = types.ModuleType("grpo_edge_tensors_only_pickle")   # what torch.load's pickle_module needs
_tensors_only_pickle.Unpickler = _TensorsOnlyUnpickler
_tensors_only_pickle.load = lambda f, **kw: _TensorsOnlyUnpickler(f, **kw).load()


def _load_weights_only(path, map_location):
    if _HAS_WEIGHTS_ONLY:
        return torch.load(path, map_location=map_location, weights_only=True)
    return torch.load(path, map_location=map_location, pickle_module=_tensors_only_pickle)


def load_policy(path, map_location="cpu"):
    """Rebuild the model stored in a checkpoint. Returns (model in eval mode, checkpoint dict)."""
    from grpo_edge.core.models import build_model
    from grpo_edge.core.models import ARCHS
    state = load_checkpoint(path, map_location)
    if state["arch"] not in ARCHS:
        raise CheckpointError("%s: unknown architecture %r (known: %s)" % (path, state["arch"], ", ".join(sorted(ARCHS))))
    try:
        model = build_model(state["arch"], **state["model_config"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError("%s: cannot rebuild architecture %r (%s)" % (path, state["arch"], e))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError("%s: weights do not fit architecture %r (%s)"
                              % (path, state["arch"], str(e).splitlines()[0]))
    model.eval()
    return model, state


def rng_state():
    """The global random streams: torch's CPU stream, each CUDA device's (once CUDA is in use), numpy's
    and Python's, as plain tensors and lists."""
    import random
    import numpy as np
    st = np.random.get_state()
    out = {"torch": torch.get_rng_state(),
           "numpy": [st[0], torch.as_tensor(st[1].astype("int64")), int(st[2]), int(st[3]), float(st[4])],
           "python": _py_state_to_plain(random.getstate())}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = list(torch.cuda.get_rng_state_all())
    return out


def set_rng_state(state):
    """Restore rng_state(); states loaded with map_location='cuda' are moved back to the CPU first (torch
    takes CPU ByteTensors only). CUDA streams are restored when this machine has as many CUDA devices."""
    import random
    import numpy as np
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state((n[0], n[1].cpu().numpy().astype("uint32"), n[2], n[3], n[4]))
    random.setstate(_py_state_from_plain(state["python"]))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def _py_state_to_plain(st):
    return [st[0], list(st[1]), st[2]]


def _py_state_from_plain(st):
    return (st[0], tuple(st[1]), st[2])
