"""The online trainer's config: the `online` section's keys, defaults and checks (Python 3.6 safe).

    cfg = load_online_config("online.json", ["online.margin=10", "training.lr=1e-3"])

Defaults < config file (JSON; YAML when PyYAML imports) < overrides. Sections: online (the keys below),
training and grpo (the core Trainer's, with small-batch defaults for a 4 GB device), model (the fresh
policy built when online.policy is not given). `python3 -m grpo_edge.online --help` lists the keys.
"""
import copy
import difflib
import json
import os
import sys

from grpo_edge.core import defaults, validate
from grpo_edge.errors import ConfigError

# (key, default, documentation) of the `online` section; --help prints them.
ONLINE_KEYS = [
    ("policy", None, "checkpoint to start serving (ignored once save_dir/served.pt exists); none: a fresh mlp"),
    ("env", None, "experience from an env: a gymnasium id, or module:Class with gymnasium-API reset/step"),
    ("env_kwargs", {}, "keyword arguments for the env"),
    ("env_schedule", [], "simulation studies: [[episodes, {param: value}], ...] changes the env's dynamics"),
    ("stream", None, "experience from JSON-lines records: 'stdin' or 'tcp:PORT' (localhost)"),
    ("max_steps", 500, "longest episode kept (longer ones are cut and marked truncated)"),
    ("eval_episodes", 10, "env: greedy episodes per gate evaluation; stream: held-out episodes kept"),
    ("holdout_every", 4, "stream: every N-th complete group is held out for evaluation, never trained on"),
    ("gate_every", 5, "updates between gates (evaluate, then promote or roll back the candidate)"),
    ("margin", 0.0, "promote when candidate >= served - margin (metric units; 0: never worse on the gate)"),
    ("checkpoint_every", 5, "updates between state.pt writes (a restart loses at most this many)"),
    ("max_updates", 0, "stop after this many updates in total (0: run until stopped / end of stream)"),
    ("max_memory", "1.5G", "RSS budget of the process (bytes, or 800M / 1.5G); bounds the buffers"),
    ("bad_records", "drop", "stream: a record training cannot use (not UTF-8, too long, not JSON, a wrong field, "
                            "NaN / out-of-range numbers): 'drop' its episode and log it, or 'stop' the trainer"),
    ("buffer_groups", 8, "stream: complete groups buffered for training (fewer if max_memory says so)"),
    ("export_onnx", True, "write served.onnx next to served.pt when torch.onnx can export here"),
    ("threads", 1, "torch CPU threads (1 is fastest for small policies)"),
]
# The online trainer's overrides of the core defaults (grpo_edge/core/defaults.py, the one source of the
# rest): small batches for a 4 GB device, a constant lr, an unbounded run, automatic AMP on CUDA.
TRAINING_DEFAULTS = defaults.complete("training", {
    "batch_size": 2, "lr": 1e-3, "lr_scaling": "none", "steps": 10 ** 9, "grad_accum_steps": 0, "amp": "auto"})
GRPO_DEFAULTS = defaults.complete("grpo", {"num_iterations": 2, "advantage": "reward_to_go"})
MODEL_DEFAULTS = {"arch": "mlp", "hidden": 64, "num_layers": 3, "activation": "tanh"}
# The fresh policy's keys (an mlp: online training takes vector observations) and their checks.
MODEL_KEYS = {"arch": ("mlp",), "hidden": "int", "num_layers": "int", "activation": ("tanh", "relu"),
              "hidden_dropout": "dropout"}
SECTIONS = ("online", "training", "grpo", "model")


def parse_memory(value):
    """'1.5G', '800M', '65536' -> bytes."""
    from grpo_edge.core.devices import parse_size
    return parse_size(value, "online.max_memory")


def rss_bytes():
    """Resident set size of this process now (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def private_bytes():
    """The process's private resident memory now: RssAnon + RssShmem (Linux /proc/self/status), i.e. RSS
    without the pages of mapped files (shared libraries: torch's and CUDA's run to hundreds of MB, are
    shared with other processes and can be dropped and re-read by the kernel). Falls back to rss_bytes()."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return sum(int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssShmem"))
    except (OSError, ValueError, KeyError, IndexError):
        return rss_bytes()


# ---------------------------------------------------------------------------------------------- config
def load_online_config(path=None, overrides=None):
    """Defaults < config file (JSON; YAML when PyYAML imports) < overrides ['section.key=value', ...]."""
    raw = {}
    if path:
        if not os.path.isfile(path):
            raise ConfigError("online config not found: %s" % path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if path.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:
                raise ConfigError("%s is YAML but PyYAML is not installed here: write the config as JSON" % path)
            try:
                raw = validate.yaml_load(text) or {}
            except yaml.YAMLError as e:
                raise ConfigError("%s is not valid YAML (%s)" % (path, str(e).splitlines()[0]))
        else:
            try:
                raw = json.loads(text)
            except ValueError as e:
                raise ConfigError("%s is not valid JSON (%s)" % (path, e))
    if not isinstance(raw, dict):
        raise ConfigError("the online config must be a mapping with sections %s" % ", ".join(SECTIONS))
    cfg = {"online": dict((k, copy.deepcopy(d)) for k, d, _ in ONLINE_KEYS), "training": dict(TRAINING_DEFAULTS),
           "grpo": dict(GRPO_DEFAULTS), "model": dict(MODEL_DEFAULTS)}
    for section, values in raw.items():
        if section == "task":      # accepted (a full training recipe can be reused) but not used online
            continue
        _check_key(section, SECTIONS, "config section")
        if not isinstance(values, dict):
            raise ConfigError("config section '%s' must be a mapping" % section)
        cfg[section].update(values)
    for item in overrides or []:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError("--set expects section.key=value, got %r" % item)
        dotted, value = item.split("=", 1)
        section, key = dotted.strip().split(".", 1)
        if section == "task":
            raise ConfigError("--set %s: online training takes its experience from online.env or online.stream" % dotted)
        _check_key(section, SECTIONS, "config section")
        try:
            cfg[section][key] = json.loads(value)
        except ValueError:
            cfg[section][key] = value
    for key in cfg["online"]:
        _check_key(key, [k for k, _, _ in ONLINE_KEYS], "online key")
    for section, kinds in (("training", validate.TRAINING_KEYS), ("grpo", validate.GRPO_KEYS),
                           ("model", MODEL_KEYS)):
        for key in cfg[section]:
            _check_key(key, sorted(kinds), "%s key" % section)
    return _validate(cfg)


def _check_key(key, valid, what):
    if key not in valid:
        close = difflib.get_close_matches(str(key), list(valid), n=1)
        raise ConfigError("unknown %s %r%s" % (what, key, " (did you mean %r?)" % close[0] if close else ""))


def _check_sections(cfg):
    """training / grpo values: the run config's rules (grpo_edge/core/validate.py); model: a fresh mlp."""
    for section, kinds in (("training", validate.TRAINING_KEYS), ("grpo", validate.GRPO_KEYS)):
        for key, value in cfg[section].items():
            kind = kinds[key]
            if section == "training" and key == "amp" and value == "auto":
                continue
            if section == "training" and key in ("minibatch_size", "grad_accum_steps"):     # 0 = derived
                cfg[section][key] = validate.check_number("%s.%s" % (section, key), value, "int", lo=0)
                continue
            cfg[section][key] = validate.check_key(section, key, value, kind)
    for key, kind in MODEL_KEYS.items():
        if key not in cfg["model"]:
            continue
        where, value = "model.%s" % key, cfg["model"][key]
        if isinstance(kind, tuple):
            validate.check_choice(where, value, kind)
        elif kind == "int":
            cfg["model"][key] = validate.check_number(where, value, "int", lo=1)
        else:
            cfg["model"][key] = validate.check_number(where, value, "float", 0, 1, True, False)


def _validate(cfg):
    o, t, g = cfg["online"], cfg["training"], cfg["grpo"]
    if bool(o["env"]) == bool(o["stream"]):
        raise ConfigError("set exactly one of online.env (an environment) and online.stream (stdin or tcp:PORT)")
    if o["stream"] and o["stream"] != "stdin" and not str(o["stream"]).startswith("tcp:"):
        raise ConfigError("online.stream must be 'stdin' or 'tcp:PORT', got %r" % o["stream"])
    port = str(o["stream"]).split(":", 1)[1] if o["stream"] and o["stream"] != "stdin" else "1"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError("online.stream tcp:PORT needs a port 1-65535, got %r" % o["stream"])
    if o["stream"] and not o["policy"]:
        raise ConfigError("online.stream needs online.policy: the checkpoint the robot runs")
    for key, low in (("max_steps", 1), ("eval_episodes", 1), ("gate_every", 1), ("checkpoint_every", 1),
                     ("max_updates", 0), ("holdout_every", 2), ("buffer_groups", 1), ("threads", 1)):
        if not isinstance(o[key], int) or isinstance(o[key], bool) or o[key] < low:
            raise ConfigError("online.%s must be an integer >= %d, got %r" % (key, low, o[key]))
    if not isinstance(o["env_schedule"], list) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], int) and isinstance(e[1], dict)
            for e in o["env_schedule"]):
        raise ConfigError("online.env_schedule must be a list of [episodes, {param: value}] pairs")
    validate.check_number("online.margin", o["margin"], "float", lo=0)
    if not isinstance(o["env_kwargs"], dict):
        raise ConfigError("online.env_kwargs must be a mapping {key: value}, got %r" % (o["env_kwargs"],))
    validate.check_finite_tree("online.env_kwargs", o["env_kwargs"])
    validate.check_finite_tree("online.env_schedule", o["env_schedule"])
    validate.check_choice("online.bad_records", o["bad_records"], ("drop", "stop"))
    if not isinstance(o["export_onnx"], bool):
        raise ConfigError("online.export_onnx must be true or false, got %r" % (o["export_onnx"],))
    parse_memory(o["max_memory"])
    _check_sections(cfg)
    # Small batches: one group per forward/backward, gradients accumulated over the whole batch.
    t["minibatch_size"] = int(t["minibatch_size"]) or int(g["group_size"])
    t["grad_accum_steps"] = int(t["grad_accum_steps"]) or max(1, int(t["batch_size"]) * int(g["group_size"])
                                                               // t["minibatch_size"])
    return cfg
