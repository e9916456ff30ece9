"""Run configuration: schema, defaults, validation and `load_config` (defaults < YAML < --set).

A config has four sections, in the seed document's shape:

    model:    {arch: tiny-transformer, d_model: 128, nhead: 4, num_layers: 4}
    training: {batch_size: 32, grad_norm_clip: 0.8}
    grpo:     {group_size: 8, clip_eps: 0.2, loss_type: grpo}
    task:     {name: zh-en-numbers}

`model` keys are the chosen architecture's constructor arguments (minus those the task supplies, such
as obs_dim or vocab_size); `task` keys are the task's own (see `grpo-edge tasks`). `training` and
`grpo` are the dataclasses below: each field's docstring is its documentation.
"""
import difflib
import inspect
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Optional

from grpo_edge.config.small_data import (SMALL_DATA_CHOICES, SMALL_DATA_RANGES, AugmentConfig, CurriculumConfig,
                                         DistillConfig, check_small_data)
from grpo_edge.core import validate
from grpo_edge.core.defaults import GRPO, TRAINING
from grpo_edge.errors import ConfigError


@dataclass
class TrainingConfig:
    steps: int = TRAINING["steps"]
    """Number of rollout batches (each followed by num_iterations optimisation passes)."""
    batch_size: int = TRAINING["batch_size"]
    """Prompts / start states / images per rollout batch; each gets group_size samples."""
    lr: float = TRAINING["lr"]
    """Base learning rate, for base_batch_size (scaled by lr_scaling)."""
    lr_scaling: str = TRAINING["lr_scaling"]
    """'sqrt': lr * sqrt(batch_size / base_batch_size) (the seed's tuning note); 'none': lr as given."""
    base_batch_size: int = TRAINING["base_batch_size"]
    """Batch size at which `lr` applies unscaled."""
    lr_schedule: str = TRAINING["lr_schedule"]
    """'constant', 'linear' (decay to 0) or 'cosine', after warmup_steps of linear warm-up."""
    warmup_steps: int = TRAINING["warmup_steps"]
    """Linear learning-rate warm-up, in optimizer steps."""
    adam_beta1: float = TRAINING["adam_beta1"]
    """Adam beta1."""
    adam_beta2: float = TRAINING["adam_beta2"]
    """Adam beta2: 0.99 rather than 0.999 is steadier at small batch sizes (the seed's tuning note)."""
    adam_eps: float = TRAINING["adam_eps"]
    """Adam epsilon."""
    weight_decay: float = TRAINING["weight_decay"]
    """Decoupled weight decay (AdamW) when > 0."""
    grad_norm_clip: float = TRAINING["grad_norm_clip"]
    """Clip the global gradient norm to this value; 0 disables clipping."""
    grad_accum_steps: int = TRAINING["grad_accum_steps"]
    """Optimizer step every N minibatches (a larger effective batch without more memory)."""
    minibatch_size: int = TRAINING["minibatch_size"]
    """Samples per forward/backward pass; 0 = the whole rollout batch (batch_size * group_size)."""
    eval_every: int = TRAINING["eval_every"]
    """Evaluate every N steps (and at the end); 0 = only at the end."""
    eval_n: int = TRAINING["eval_n"]
    """Evaluation episodes / examples; 0 = the task's default."""
    save_every: int = TRAINING["save_every"]
    """Write last.pt every N steps (and at the end)."""
    target_metric: Optional[float] = TRAINING["target_metric"]
    """Stop early once the evaluation metric reaches this value (e.g. 475 for CartPole-v1); the run's last line
    and summary.json's "stopped" say so. Without --config, a gymnasium env's family recipe sets it to the env's
    spec.reward_threshold (none when the spec has none)."""
    warm_start_epochs: int = TRAINING["warm_start_epochs"]
    """Text tasks: supervised epochs on reference answers before GRPO."""
    warm_start_lr: float = TRAINING["warm_start_lr"]
    """Learning rate of the supervised warm start."""
    warm_start_schedule: str = TRAINING["warm_start_schedule"]
    """The warm start's learning rate over its epochs: 'constant', 'linear' (decay to 0) or 'cosine'."""
    amp: bool = TRAINING["amp"]
    """Mixed precision (autocast of the update's forward passes; weights and Adam stay fp32)."""
    amp_dtype: str = TRAINING["amp_dtype"]
    """AMP's half type on CUDA: 'bfloat16' (no loss scaling), 'float16' (with loss scaling), or 'auto':
    bfloat16 where the GPU has it (compute capability 8.0+), else float16. The CPU always uses bfloat16."""
    gradient_checkpointing: int = TRAINING["gradient_checkpointing"]
    """Checkpoint every N-th block of transformer models (0 = off): less memory, more compute."""
    micro_batch_mb: Optional[int] = TRAINING["micro_batch_mb"]
    """Activation memory budget of one forward/backward, MB: each minibatch is split into micro-batches
    sized from the sequence length and model width (same single optimizer update, same gradient);
    0 = no split. null (default): 128 on the CPU; on CUDA half of what the weights, gradients and Adam
    moments leave of training.max_memory, or of the GPU's free memory (fewer, larger passes: a step there
    is bound by kernel launches). With max_memory set, a number here is a cap. See
    grpo_edge/core/microbatch.py and grpo_edge/core/devices.py."""
    max_memory: Optional[str] = TRAINING["max_memory"]
    """A memory budget for the run, e.g. '4G' for a 4 GB card: refused up front when the weights, gradients and
    Adam moments alone do not fit; otherwise the activation budget (micro_batch_mb) is sized to what they
    leave, and on CUDA torch's allocator is capped at it (a step over it stops with a one-line error).
    null = no budget. See grpo_edge/core/devices.py."""
    device: str = TRAINING["device"]
    """'auto' (CUDA when torch sees a GPU and the model has 50k+ parameters, else the CPU; the choice and
    its reason are printed), 'cpu' or 'cuda'. See grpo_edge/core/devices.py."""
    seed: int = TRAINING["seed"]
    """Seeds torch, numpy, Python and the task; CPU runs are reproducible."""
    threads: int = TRAINING["threads"]
    """CPU threads for torch; 0 = auto: 1 for models under 1M parameters (per-op overhead dominates and
    extra threads only spin; measured 10-40x slower on a loaded 2-core machine), else torch's default."""
    log_every: int = TRAINING["log_every"]
    """Write a metrics.jsonl line every N steps."""
    tensorboard: bool = TRAINING["tensorboard"]
    """Also log to TensorBoard (needs the 'tensorboard' extra)."""
    plot_grad_flow_every: int = TRAINING["plot_grad_flow_every"]
    """Write grad_flow_<step>.png (per-layer gradient norms) every N steps; 0 = never."""


@dataclass
class GRPOConfig:
    algo: str = GRPO["algo"]
    """'grpo' (critic-free, group-relative advantages) or 'ppo' (critic + GAE, for comparison)."""
    group_size: int = GRPO["group_size"]
    """G: samples (completions / episodes / labels) drawn per prompt or start state."""
    num_iterations: int = GRPO["num_iterations"]
    """mu: optimisation passes over each rollout batch (>1 makes the clipped ratio matter)."""
    clip_eps: float = GRPO["clip_eps"]
    """Lower (and by default upper) clip range of the importance ratio."""
    clip_eps_high: Optional[float] = GRPO["clip_eps_high"]
    """Upper clip range (DAPO clip-higher uses 0.28); None = clip_eps."""
    loss_type: str = GRPO["loss_type"]
    """Token aggregation: 'grpo', 'bnpo', 'dapo' or 'dr_grpo' (see grpo_edge/core/losses.py)."""
    importance_level: str = GRPO["importance_level"]
    """'token' ratio, or 'sequence' (GSPO: one geometric-mean ratio per sequence)."""
    scale_rewards: str = GRPO["scale_rewards"]
    """Advantage scaling: 'group' std, 'batch' std, or 'none' (Dr. GRPO)."""
    advantage: str = GRPO["advantage"]
    """'sequence' (whole-sample reward), 'reward_to_go' (control: per-step, group-relative), 'auto'."""
    gamma: float = GRPO["gamma"]
    """Discount for reward_to_go advantages and PPO's GAE."""
    beta: float = GRPO["beta"]
    """KL coefficient towards the frozen reference (initial) policy; 0 = no reference model kept."""
    kl_estimator: str = GRPO["kl_estimator"]
    """'k1', 'k2' or 'k3' (unbiased, non-negative; the default)."""
    entropy_coef: float = GRPO["entropy_coef"]
    """Entropy bonus coefficient."""
    temperature: float = GRPO["temperature"]
    """Sampling temperature for rollouts."""
    mask_truncated: bool = GRPO["mask_truncated"]
    """Exclude samples cut by the length / time limit from the loss."""
    filter_zero_std: bool = GRPO["filter_zero_std"]
    """Drop groups whose rewards are all equal (their advantage is 0; DAPO's dynamic sampling)."""
    grad_penalty_lambda: float = GRPO["grad_penalty_lambda"]
    """Gradient regularization lambda * (||g|| - target_grad_norm)^2 (opt-in; see docs/algorithm.md)."""
    target_grad_norm: float = GRPO["target_grad_norm"]
    """Target norm in the gradient penalty."""
    gae_lambda: float = GRPO["gae_lambda"]
    """PPO: GAE lambda."""
    vf_coef: float = GRPO["vf_coef"]
    """PPO: value-loss coefficient."""
    critic_hidden: int = GRPO["critic_hidden"]
    """PPO: hidden width of the control critic."""


SECTIONS = ("model", "training", "grpo", "task", "curriculum", "augment", "distill")
# (section, key) -> allowed values / (low, high, low_inclusive[, high_inclusive]): grpo_edge/core/validate.py
CHOICES = dict(validate.CHOICES)
RANGES = dict(validate.RANGES)
CHOICES.update(SMALL_DATA_CHOICES)
RANGES.update(SMALL_DATA_RANGES)
# Names readers of the seed document (or of other frameworks) type, mapped to ours.
MODEL_ALIASES = {"micro-gpt": {"nhead": "n_head", "num_layers": "n_layer"}}
TRAINING_ALIASES = {"grad_clip": "grad_norm_clip", "gradient_accumulation_steps": "grad_accum_steps"}
GRPO_ALIASES = {"num_generations": "group_size", "epsilon": "clip_eps", "epsilon_high": "clip_eps_high",
                "grad_penalty": "grad_penalty_lambda"}
# Model constructor arguments that the task supplies, never the user.
TASK_SUPPLIED = {"obs_dim", "n_actions", "vocab_size", "in_channels", "n_classes", "image_size", "out_dim"}


@dataclass
class Config:
    model: Dict[str, Any] = field(default_factory=dict)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    task: Dict[str, Any] = field(default_factory=dict)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)

    def to_dict(self) -> dict:
        return {"model": dict(self.model), "training": asdict(self.training), "grpo": asdict(self.grpo),
                "task": dict(self.task), "curriculum": asdict(self.curriculum), "augment": asdict(self.augment),
                "distill": asdict(self.distill)}


def _closest(key, valid):
    m = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return (" (did you mean '%s'?)" % m[0]) if m else ""


def _coerce(section, key, value, typ):
    """Check / convert one value against a dataclass field type; raise ConfigError naming the key."""
    optional = typ in (Optional[float], Optional[int], Optional[str])
    base = {Optional[float]: float, Optional[int]: int, Optional[str]: str}.get(typ, typ)
    kind = {bool: "bool", int: "int", float: "float", str: "str"}.get(base)
    if section == "training" and validate.TRAINING_KEYS.get(key, "").startswith("size"):
        kind = "size"           # '4G', '800M' or a number of bytes
    if kind is None:            # Any: checked by the section's own function
        return value
    return validate.check_key(section, key, value, kind + ("?" if optional else ""), ranges=RANGES, choices=CHOICES)


def _build_section(section, cls, values, aliases):
    valid = {f.name: f.type for f in fields(cls)}
    kwargs = {}
    for key, value in (values or {}).items():
        key = aliases.get(key, key)
        if key not in valid:
            raise ConfigError("unknown key %s.%s%s" % (section, key, _closest(key, valid)))
        kwargs[key] = _coerce(section, key, value, valid[key])
    return cls(**kwargs)


# Model constructor arguments that take one of a few strings, per architecture.
MODEL_CHOICES = {"mlp": {"activation": ("tanh", "relu")}, "micro-gpt": {"positions": ("learned", "rope")}}
# Pairs of model sizes that must divide: (arch, d_model key, heads key).
HEAD_KEYS = {"micro-gpt": ("d_model", "n_head"), "tiny-transformer": ("d_model", "nhead")}


def _check_model_value(arch, key, value, default):
    where = "model.%s" % key
    if isinstance(default, bool):
        return validate.check_bool(where, value)
    if isinstance(default, int):
        return validate.check_number(where, value, "int", lo=1)
    if isinstance(default, float):
        if key.endswith("dropout"):
            return validate.check_number(where, value, "float", 0, 1, True, False)
        if key.startswith("log_"):                  # a logarithm (log_std_init): any finite value
            return validate.check_number(where, value, "float")
        return validate.check_number(where, value, "float", lo=0)
    if isinstance(default, str):
        choices = MODEL_CHOICES.get(arch, {}).get(key)
        if choices:
            return validate.check_choice(where, value, choices)
        if not isinstance(value, str):
            raise ConfigError("%s must be a string, got %r" % (where, value))
        return value
    if isinstance(default, (tuple, list)):
        if not isinstance(value, (list, tuple)) or not value:
            raise ConfigError("%s must be a non-empty list of integers >= 1, got %r" % (where, value))
        return [validate.check_number("%s[%d]" % (where, i), v, "int", lo=1) for i, v in enumerate(value)]
    return validate.check_finite_tree(where, value)


def _check_model(model: dict) -> dict:
    from grpo_edge.core.models import ARCHS
    model = dict(model or {})
    arch = model.get("arch")
    if arch is None:
        raise ConfigError("model.arch is missing (one of %s)" % ", ".join(sorted(ARCHS)))
    if not isinstance(arch, str) or arch not in ARCHS:
        raise ConfigError("model.arch must be one of %s, got %r%s"
                          % (", ".join(sorted(ARCHS)), arch, _closest(str(arch), ARCHS)))
    params = inspect.signature(ARCHS[arch].__init__).parameters
    valid = {k: p.default for k, p in params.items() if k != "self" and k not in TASK_SUPPLIED}
    out = {"arch": arch}
    for key, value in model.items():
        if key == "arch":
            continue
        key = MODEL_ALIASES.get(arch, {}).get(key, key)
        if key in TASK_SUPPLIED:
            raise ConfigError("model.%s is set by the task, not the config" % key)
        if key not in valid:
            raise ConfigError("unknown key model.%s for arch %s%s" % (key, arch, _closest(str(key), valid)))
        out[key] = _check_model_value(arch, key, value, valid[key])
    if arch in HEAD_KEYS:
        dk, hk = HEAD_KEYS[arch]
        d, h = out.get(dk, valid[dk]), out.get(hk, valid[hk])
        if d % h:
            raise ConfigError("model.%s (%d) must be a multiple of model.%s (%d)" % (dk, d, hk, h))
    if arch == "lite-resnet":
        ch, bl = out.get("channels", valid["channels"]), out.get("blocks", valid["blocks"])
        if len(ch) != len(bl):
            raise ConfigError("model.channels %s and model.blocks %s must have the same length"
                              % (list(ch), list(bl)))
    return out


def _check_task_value(name, key, value, default, ranges, types=None):
    """A task key against the type of its default (or Task.types for keys whose default is None) and the
    task's declared range (Task.ranges)."""
    where = "task.%s" % key
    validate.check_finite_tree(where, value)
    typ = (types or {}).get(key)
    if value is not None and default is None and typ is not None:
        ok = isinstance(value, typ) and not (isinstance(value, bool) and typ is not bool)
        if not ok:
            raise ConfigError("%s must be %s, got %r" % (where, "a string" if typ is str else
                                                         "an integer" if typ is int else typ.__name__, value))
    if value is None or default is None:
        pass
    elif isinstance(default, bool):
        value = validate.check_bool(where, value)
    elif isinstance(default, (int, float)):
        kind = "int" if isinstance(default, int) else "float"
        value = validate.check_number(where, value, kind)
    elif isinstance(default, dict) and not isinstance(value, dict):
        raise ConfigError("%s must be a mapping {key: value}, got %r" % (where, value))
    elif isinstance(default, (list, tuple)) and not isinstance(value, (list, tuple, str)):
        raise ConfigError("%s must be a list, got %r" % (where, value))
    elif isinstance(default, str) and not isinstance(value, str):
        raise ConfigError("%s must be a string, got %r" % (where, value))
    rng = ranges.get(key)
    if rng is not None and value is not None:
        lo, hi, lo_incl = rng[:3]
        value = validate.check_number(where, value, "int" if isinstance(value, int) else "float", lo, hi, lo_incl,
                                      rng[3] if len(rng) > 3 else True)
    return value


def _check_task(task: dict) -> dict:
    from grpo_edge.tasks import TASKS, task_class, task_defaults
    task = dict(task or {})
    name = task.get("name")
    if name is None:
        raise ConfigError("task.name is missing (one of %s)" % ", ".join(sorted(TASKS)))
    if not isinstance(name, str):
        raise ConfigError("task.name must be one of %s, a gymnasium id or 'module:Class', got %r"
                          % (", ".join(sorted(TASKS)), name))
    if name not in TASKS and ":" not in name:
        task_class(name)          # a gymnasium id, or one line: unknown, with the closest names
    if task.get("kwargs") is not None and not isinstance(task["kwargs"], dict):
        raise ConfigError("task.kwargs must be a mapping {key: value} (keyword arguments for %s), got %r"
                          % (name, task["kwargs"]))
    defaults = task_defaults(name)
    if defaults is not None:
        ranges = getattr(task_class(name), "ranges", {}) or {}
        types = getattr(task_class(name), "types", {}) or {}
        for key in list(task):
            if key in ("name", "kwargs"):
                continue
            if key == "data_path" and key not in defaults:
                raise ConfigError("task %s makes its own problems and reads no data file (--data-path / task.data_path): "
                                  "your own text trains with task text (--data-path FILE without --config or "
                                  "task.name), translation pairs with zh-en-numbers" % name)
            if key not in defaults:
                raise ConfigError("unknown key task.%s for task %s%s" % (key, name, _closest(str(key), defaults)))
            task[key] = _check_task_value(name, key, task[key], defaults[key], ranges, types)
    return task


def _check_arch_fits_task(arch: str, task_name: str) -> None:
    """Task classes may declare `archs`, the architectures their inputs and outputs fit."""
    from grpo_edge.tasks import task_class
    allowed = getattr(task_class(task_name), "archs", None)
    if allowed and arch not in allowed:
        raise ConfigError("model.arch %s does not fit task %s; it takes %s" % (arch, task_name, ", ".join(allowed)))


def _check_combinations(cfg: Config) -> None:
    g, t = cfg.grpo, cfg.training
    if g.clip_eps_high is not None and g.clip_eps_high < g.clip_eps:
        raise ConfigError("grpo.clip_eps_high (%g) is below grpo.clip_eps (%g): clip-higher must widen the "
                          "upper range" % (g.clip_eps_high, g.clip_eps))
    samples = t.batch_size * g.group_size
    if t.minibatch_size and samples % t.minibatch_size:
        raise ConfigError("training.minibatch_size (%d) must divide batch_size * group_size (%d * %d = %d)"
                          % (t.minibatch_size, t.batch_size, g.group_size, samples))
    if t.minibatch_size and t.minibatch_size % g.group_size:
        raise ConfigError("training.minibatch_size (%d) must be a multiple of grpo.group_size (%d) so whole "
                          "groups stay together" % (t.minibatch_size, g.group_size))
    if g.algo == "ppo" and g.grad_penalty_lambda > 0:
        raise ConfigError("grpo.grad_penalty_lambda applies to algo grpo only (PPO mode has a critic loss)")
    if g.loss_type == "dr_grpo" and g.scale_rewards == "group":
        pass  # allowed, but Dr. GRPO recommends scale_rewards: none (documented, not rewritten)


def parse_overrides(pairs) -> Dict[str, Dict[str, Any]]:
    """['training.lr=1e-3', 'grpo.group_size=4'] -> nested dict, values parsed as YAML scalars."""
    import yaml
    out: Dict[str, Dict[str, Any]] = {}
    for item in pairs or []:
        if "=" not in item:
            raise ConfigError("--set expects section.key=value, got %r" % item)
        dotted, raw = item.split("=", 1)
        parts = dotted.strip().split(".")
        if len(parts) != 2 or parts[0] not in SECTIONS:
            raise ConfigError("--set key must be <section>.<key> with section one of %s, got %r"
                              % (", ".join(SECTIONS), dotted))
        try:
            value = validate.yaml_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        out.setdefault(parts[0], {})[parts[1]] = value
    return out


def resolve_config_path(path) -> Path:
    """Find a config file: as given, under configs/, or the seed's `config/NAME.yaml` spelling."""
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        raise ConfigError("--config %s is a folder, not a config file (a .yaml recipe such as configs/cartpole.yaml)"
                          % path)
    here = Path(__file__).resolve().parent.parent      # the grpo_edge package folder
    candidates = [Path("configs") / p.name, here.parent / "configs" / p.name, here / "configs" / p.name]
    if p.suffix == "":
        candidates += [c.with_suffix(".yaml") for c in candidates]
    for c in candidates:
        if c.is_file():
            return c
    raise ConfigError("config file not found: %s (built-in recipes: %s)" % (path, ", ".join(builtin_recipes())))


def default_recipe(task_name=None) -> dict:
    """The config `train` starts from without --config (a dict, before overrides): choose_recipe's."""
    return choose_recipe(task_name)[0]


def choose_recipe(task_name=None):
    """(recipe dict, the one line saying which recipe and why) for `train` without --config.

    The built-in recipe whose task.name is `task_name` (configs/pendulum.yaml for Pendulum-v1); else, for a
    gymnasium env, its family's recipe (config/families.py: classic control, Box2D, MuJoCo balance or
    locomotion) with training.target_metric from the env's spec.reward_threshold (none without one); else
    the recipe for the task's kind (families.KIND_RECIPES). A borrowed recipe's task keys are dropped and its
    model becomes the task's default architecture when that differs. cartpole's recipe when no task is named."""
    from grpo_edge.config import families
    recipes = {}
    for name in builtin_recipes():
        raw = validate.yaml_load(resolve_config_path(name).read_text(encoding="utf-8")) or {}
        recipes[name] = raw
        own = name not in families.FAMILY_RECIPES and (raw.get("task") or {}).get("name") == task_name
        if task_name is not None and own:
            return raw, "recipe: configs/%s, %s's own" % (name, task_name)
    if task_name is None:
        return recipes["cartpole.yaml"], "recipe: configs/cartpole.yaml, the default task's (cartpole)"
    from grpo_edge.tasks import default_arch, task_class
    kind = getattr(task_class(task_name), "kind", "control")     # imports a user's module (registering its ids)
    family = families.env_family(task_name) if kind == "control" else None
    threshold = families.reward_threshold(task_name) if kind == "control" else None
    if family is not None:
        name, why = family.recipe, families.family_why(task_name, family, threshold)
    else:
        name = families.KIND_RECIPES.get(kind, families.CLASSIC.recipe)
        why = families.kind_why(task_name, kind, threshold)
    why = "recipe: configs/%s, %s" % (name, why)
    raw = dict(recipes[name])
    raw["task"] = {"name": task_name}
    if kind == "control":
        training = {k: v for k, v in (raw.get("training") or {}).items() if k != "target_metric"}
        if threshold is not None:
            training["target_metric"] = threshold
        raw["training"] = training
    arch = default_arch(task_name)
    if (raw.get("model") or {}).get("arch") != arch:
        raw["model"] = {"arch": arch}
    return raw, why


def builtin_recipes():
    here = Path(__file__).resolve().parent.parent      # the grpo_edge package folder
    for d in (here.parent / "configs", here / "configs"):
        if d.is_dir():
            return sorted(p.name for p in d.glob("*.yaml"))
    return []


def load_config(path=None, overrides=None, data: Optional[dict] = None, literals: Optional[dict] = None) -> Config:
    """Resolve a config: defaults < YAML file (or `data`) < overrides (list of 'section.key=value') < literals.

    literals: {'section.key': value} taken as given, never parsed as YAML (paths from the command line:
    `--data-path "data/pairs #2.tsv"` stays that path)."""
    import yaml
    raw: Dict[str, Any] = {}
    if path is not None:
        p = resolve_config_path(path)
        try:
            text = p.read_text(encoding="utf-8")
            raw = validate.yaml_load(text) or {}
            if not raw:
                raise ConfigError("config file %s is empty: a recipe holds sections %s (see configs/)"
                                  % (p, ", ".join(SECTIONS)))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = (" line %d" % (mark.line + 1)) if mark is not None else ""
            raise ConfigError("%s%s is not valid YAML: %s" % (p, where, getattr(e, "problem", e)))
        except UnicodeDecodeError:
            raise ConfigError("%s is not UTF-8 text" % p)
    if data:
        raw = _merge(raw, data)
    if not isinstance(raw, dict):
        raise ConfigError("the config must be a mapping with sections %s" % ", ".join(SECTIONS))
    for section in raw:
        if section not in SECTIONS:
            raise ConfigError("unknown config section '%s'%s (sections: %s)"
                              % (section, _closest(str(section), SECTIONS), ", ".join(SECTIONS)))
        if raw[section] is not None and not isinstance(raw[section], dict):
            raise ConfigError("config section '%s' must be a mapping" % section)
    over = parse_overrides(overrides)
    arch = (over.get("model") or {}).get("arch")
    if arch is not None and (raw.get("model") or {}).get("arch") not in (None, arch):
        raw = dict(raw, model={})    # another architecture: the recipe's model keys belonged to its own
    raw = _merge(raw, over)
    for dotted, value in (literals or {}).items():
        section, key = dotted.split(".", 1)
        raw = _merge(raw, {section: {key: value}})
    task = _check_task(raw.get("task") or {"name": "cartpole"})
    model = raw.get("model") or {}
    if "arch" not in model:
        from grpo_edge.tasks import default_arch
        model = dict(model, arch=default_arch(task["name"]))
    model = _check_model(model)
    _check_arch_fits_task(model["arch"], task["name"])
    cfg = Config(
        model=model,
        training=_build_section("training", TrainingConfig, raw.get("training"), TRAINING_ALIASES),
        grpo=_build_section("grpo", GRPOConfig, raw.get("grpo"), GRPO_ALIASES),
        task=task,
        curriculum=_build_section("curriculum", CurriculumConfig, raw.get("curriculum"), {"difficulty_metric": "metric"}),
        augment=_build_section("augment", AugmentConfig, raw.get("augment"), {}),
        distill=_build_section("distill", DistillConfig, raw.get("distill"), {}),
    )
    _check_combinations(cfg)
    check_small_data(cfg)
    return cfg


# mappings that a later layer (YAML over defaults, --set over YAML) replaces whole instead of merging into:
# your rewards replace the recipe's (add one to them with task.reward), your kwargs are the call's kwargs
REPLACED = {("task", "rewards"), ("task", "env_kwargs"), ("task", "kwargs")}


def _merge(a: dict, b: dict, path=()) -> dict:
    out = dict(a)
    for k, v in (b or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and path + (k,) not in REPLACED:
            out[k] = _merge(out[k], v, path + (k,))
        else:
            out[k] = v
    return out
