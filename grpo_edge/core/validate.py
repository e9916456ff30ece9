"""Value checks, in one place: type, range and finiteness, with a message that says what is allowed.

Python 3.6 safe and dependency-free, so the run config (grpo_edge/config/__init__.py), the online trainer's config
(grpo_edge/online/config.py) and the trainer core use the same rules:

    check_number("training.lr", 3e-4, "float", lo=0, lo_incl=False)   -> 0.0003
    check_number("training.lr", float("nan"))                         -> ConfigError: ... finite ...
    check_choice("model.activation", "relu6", ("tanh", "relu", "gelu"))

RANGES / CHOICES hold the ranges of the `training` and `grpo` keys; TRAINING_KEYS / GRPO_KEYS their kinds
(a test keeps them in step with the dataclasses of grpo_edge/config/__init__.py).
"""
import math

from grpo_edge.core import defaults
from grpo_edge.errors import ConfigError

# np.random.seed takes 0 .. 2**32 - 1; torch's generators take less than 2**64.
SEED_MAX = 2 ** 32 - 1
INT_MAX = 2 ** 63 - 1

# (section, key) -> (low, high, low_inclusive[, high_inclusive]); None = unbounded
RANGES = {
    ("training", "steps"): (1, None, True), ("training", "batch_size"): (1, None, True),
    ("training", "lr"): (0, None, False), ("training", "base_batch_size"): (1, None, True),
    ("training", "adam_beta1"): (0, 1, True, False), ("training", "adam_beta2"): (0, 1, True, False),
    ("training", "adam_eps"): (0, None, False), ("training", "weight_decay"): (0, None, True),
    ("training", "grad_norm_clip"): (0, None, True), ("training", "grad_accum_steps"): (1, None, True),
    ("training", "minibatch_size"): (0, None, True), ("training", "warmup_steps"): (0, None, True),
    ("training", "eval_every"): (0, None, True), ("training", "save_every"): (1, None, True),
    ("training", "eval_n"): (0, None, True), ("training", "warm_start_lr"): (0, None, False),
    ("training", "warm_start_epochs"): (0, None, True), ("training", "log_every"): (1, None, True),
    ("training", "seed"): (0, SEED_MAX, True), ("training", "plot_grad_flow_every"): (0, None, True),
    ("training", "gradient_checkpointing"): (0, None, True), ("training", "threads"): (0, None, True),
    ("training", "micro_batch_mb"): (0, None, True),
    ("grpo", "group_size"): (2, None, True), ("grpo", "num_iterations"): (1, None, True),
    ("grpo", "clip_eps"): (0, 1, False), ("grpo", "clip_eps_high"): (0, None, False),
    ("grpo", "beta"): (0, None, True), ("grpo", "entropy_coef"): (0, None, True),
    ("grpo", "gamma"): (0, 1, True), ("grpo", "gae_lambda"): (0, 1, True),
    ("grpo", "temperature"): (0, None, False), ("grpo", "grad_penalty_lambda"): (0, None, True),
    ("grpo", "target_grad_norm"): (0, None, True), ("grpo", "vf_coef"): (0, None, True),
    ("grpo", "critic_hidden"): (1, None, True),
}
CHOICES = defaults.CHOICES      # (section, key) -> allowed values: grpo_edge/core/defaults.py
# Kinds of the training / grpo keys: "int", "float", "bool", "str", "size" ('4G', '800M' or bytes), and any
# of them with "?" (null allowed).
TRAINING_KEYS = {
    "steps": "int", "batch_size": "int", "lr": "float", "lr_scaling": "str", "base_batch_size": "int",
    "lr_schedule": "str", "warmup_steps": "int", "adam_beta1": "float", "adam_beta2": "float", "adam_eps": "float",
    "weight_decay": "float", "grad_norm_clip": "float", "grad_accum_steps": "int", "minibatch_size": "int",
    "eval_every": "int", "eval_n": "int", "save_every": "int", "target_metric": "float?",
    "warm_start_epochs": "int", "warm_start_lr": "float", "warm_start_schedule": "str", "amp": "bool", "amp_dtype": "str",
    "gradient_checkpointing": "int",
    "device": "str", "seed": "int", "threads": "int", "log_every": "int", "tensorboard": "bool",
    "plot_grad_flow_every": "int", "micro_batch_mb": "int?", "max_memory": "size?",
}
GRPO_KEYS = {
    "algo": "str", "group_size": "int", "num_iterations": "int", "clip_eps": "float", "clip_eps_high": "float?",
    "loss_type": "str", "importance_level": "str", "scale_rewards": "str", "advantage": "str", "gamma": "float",
    "beta": "float", "kl_estimator": "str", "entropy_coef": "float", "temperature": "float",
    "mask_truncated": "bool", "filter_zero_std": "bool", "grad_penalty_lambda": "float",
    "target_grad_norm": "float", "gae_lambda": "float", "vf_coef": "float", "critic_hidden": "int",
}


def is_number(value):
    """A Python / NumPy int or float that is not a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf" \
        and getattr(value, "ndim", 0) == 0


def span(lo, hi, lo_incl=True, hi_incl=True):
    """The allowed interval as text: '(0, inf)', '[0, 1)', '>= 1'."""
    if hi is None:
        if lo is None:
            return "any finite number"
        return (">= %s" if lo_incl else "> %s") % (lo,)
    return "%s%s, %s%s" % ("[" if lo_incl else "(", "-inf" if lo is None else lo, hi, "]" if hi_incl else ")")


def check_number(where, value, kind="float", lo=None, hi=None, lo_incl=True, hi_incl=True, error=ConfigError):
    """`value` as an int (kind 'int') or float, finite and inside [lo, hi]; raise `error` naming `where`."""
    if not is_number(value):
        hint = " (written in quotes: drop them)" if isinstance(value, str) and is_number(_number_or_none(value)) else ""
        raise error("%s must be %s, got %r%s" % (where, "an integer" if kind == "int" else "a number", value, hint))
    value = float(value) if kind != "int" or isinstance(value, float) else int(value)
    if isinstance(value, float) and not math.isfinite(value):
        allowed = "" if lo is None and hi is None else (" in " if hi is not None else " ") + span(lo, hi, lo_incl,
                                                                                                  hi_incl)
        raise error("%s must be a finite number%s, got %r" % (where, allowed, value))
    if kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                raise error("%s must be an integer, got %r" % (where, value))
            value = int(value)
        if hi is None and abs(value) > INT_MAX:
            raise error("%s must be an integer below 2**63, got %r" % (where, value))
    if (lo is not None and (value < lo if lo_incl else value <= lo)) or \
            (hi is not None and (value > hi if hi_incl else value >= hi)):
        allowed = span(lo, hi, lo_incl, hi_incl)
        raise error("%s must be %s%s, got %r" % (where, "in " if hi is not None else "", allowed, value))
    return value


def check_choice(where, value, choices, error=ConfigError):
    if not isinstance(value, str) or value not in choices:
        raise error("%s must be one of %s, got %r%s" % (where, ", ".join(choices), value, closest(value, choices)))
    return value


def check_bool(where, value, error=ConfigError):
    """true / false only: a quoted "yes" is a string, refused as a quoted "2" is for a number."""
    if isinstance(value, bool):
        return value
    hint = " (written in quotes: drop them)" if isinstance(value, str) and value.lower() in (
        "true", "false", "yes", "no", "on", "off") else ""
    raise error("%s must be true or false, got %r%s" % (where, value, hint))


def check_key(section, key, value, kind, error=ConfigError, ranges=None, choices=None):
    """One config key: its kind ('int', 'float', 'bool', 'str', 'float?'), range and choices (by default
    from RANGES and CHOICES)."""
    ranges = RANGES if ranges is None else ranges
    choices = CHOICES if choices is None else choices
    where = "%s.%s" % (section, key)
    if value is None:
        if kind.endswith("?"):
            return None
        raise error("%s must not be empty" % where)
    kind = kind.rstrip("?")
    if kind == "size":                  # '4G', '800M' or a number of bytes; checked, kept as given
        from grpo_edge.core.devices import parse_size
        parse_size(value, where)
        return value if isinstance(value, str) else str(value)
    if kind == "bool":
        return check_bool(where, value, error)
    if kind == "str":
        allowed = choices.get((section, key))
        if allowed:
            return check_choice(where, value, allowed, error)
        if not isinstance(value, str):
            raise error("%s must be a string, got %r" % (where, value))
        return value
    rng = ranges.get((section, key), (None, None, True))
    lo, hi, lo_incl = rng[:3]
    hi_incl = rng[3] if len(rng) > 3 else True
    return check_number(where, value, kind, lo, hi, lo_incl, hi_incl, error)


def check_finite_tree(where, value, error=ConfigError):
    """Every number inside nested lists / dicts is finite (e.g. task.env_kwargs, online.env_schedule)."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_finite_tree("%s.%s" % (where, k), v, error)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite_tree("%s[%d]" % (where, i), v, error)
    elif isinstance(value, float) and not math.isfinite(value):
        raise error("%s must be a finite number, got %r" % (where, value))
    return value


def closest(key, valid):
    import difflib
    if not isinstance(key, str):
        return ""
    m = difflib.get_close_matches(key, [str(v) for v in valid], n=1, cutoff=0.5)
    return (" (did you mean '%s'?)" % m[0]) if m else ""


def _number_or_none(text):
    try:
        return float(text)
    except ValueError:
        return None


def yaml_load(text):
    """yaml.safe_load, but numbers as people write them (`3e-4`, `1e-3`, YAML 1.2) are floats, not strings,
    and a key given twice in one mapping is an error (yaml takes the last one without a word)."""
    import re
    import yaml

    class _Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, "key %r appears twice (lines %d and %d): keep one"
                        % (key, seen[key] + 1, key_node.start_mark.line + 1), key_node.start_mark)
                seen[key] = key_node.start_mark.line
            return super(_Loader, self).construct_mapping(node, deep=deep)
    _Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"), list("-+0123456789."))
    return yaml.load(text, Loader=_Loader)
