"""Self-describing checkpoints, written atomically (Python 3.6 / torch 1.10 safe).

A checkpoint is a dict of plain tensors and Python scalars/lists/dicts, so that
``torch.load(path, weights_only=True)`` reads it (never unpickles arbitrary objects):

  format        "grpo-edge/1"
  arch          model registry name ("mlp", "micro-gpt", ...)
  model_config  constructor kwargs: build_model(arch, **model_config) rebuilds the model
  task          task name;  task_meta: spaces / vocabulary / input shape (plain data)
  config        the resolved run config (nested dict)
  model         state dict
  optimizer, scheduler, rng, step, metrics   (training state; optional for deploy-only files)
"""
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


def load_checkpoint(path, map_location="cpu"):
    """Load and validate a grpo-edge checkpoint; raises CheckpointError with a one-line reason."""
    path = str(path)
    if not os.path.exists(path):
        raise CheckpointError("checkpoint not found: %s" % path)
    try:
        state = _load_weights_only(path, map_location)
    except Exception as e:  # corrupt zip, truncated file, pickled objects we refuse to load
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError("%s is not a readable grpo-edge checkpoint (%s)" % (path, msg[:200]))
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError("%s is not a grpo-edge checkpoint (no '%s' format tag)" % (path, FORMAT))
    for key in ("arch", "model_config", "model"):
        if key not in state:
            raise CheckpointError("%s is missing '%s'" % (path, key))
    return state


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
    state = load_checkpoint(path, map_location)
    try:
        model = build_model(state["arch"], **state["model_config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError("%s: cannot rebuild architecture %r (%s)" % (path, state["arch"], e))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError("%s: weights do not fit architecture %r (%s)"
                              % (path, state["arch"], str(e).splitlines()[0]))
    model.eval()
    return model, state


def rng_state():
    import random
    import numpy as np
    st = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "numpy": [st[0], torch.as_tensor(st[1].astype("int64")), int(st[2]), int(st[3]), float(st[4])],
            "python": _py_state_to_plain(random.getstate())}


def set_rng_state(state):
    import random
    import numpy as np
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype("uint32"), n[2], n[3], n[4]))
    random.setstate(_py_state_from_plain(state["python"]))


def _py_state_to_plain(st):
    return [st[0], list(st[1]), st[2]]


def _py_state_from_plain(st):
    return (st[0], tuple(st[1]), st[2])
