"""Task registry. Built-in tasks are imported lazily (gymnasium / scikit-learn only when used)."""
import importlib
import json

from grpo_edge.errors import CheckpointError, ConfigError, GrpoEdgeError
from grpo_edge.tasks.user_code import import_user_object

# name -> "module:Class"
TASKS = {
    "cartpole": "grpo_edge.tasks.control:CartPoleTask",
    "acrobot": "grpo_edge.tasks.control:AcrobotTask",
    "digits": "grpo_edge.tasks.digits:DigitsTask",
    "arithmetic": "grpo_edge.tasks.arithmetic:ArithmeticTask",
    "zh-en-numbers": "grpo_edge.tasks.zh_en_numbers:ZhEnNumbersTask",
    "gym": "grpo_edge.tasks.control:GymTask",
    "text": "grpo_edge.tasks.text:TextDataTask",
    "pyfix": "grpo_edge.tasks.pyfix:PyFixTask",
}
GYM_TASK = TASKS["gym"]
DEFAULT_ARCH = {"cartpole": "mlp", "acrobot": "mlp", "digits": "lite-resnet", "arithmetic": "micro-gpt",
                "zh-en-numbers": "tiny-transformer", "gym": "mlp", "text": "micro-gpt",
               "pyfix": "micro-gpt"}


def task_class(name):
    """The Task class for a built-in name, a gymnasium id ('Pendulum-v1') or a user's 'module:Class'."""
    spec = TASKS.get(name, name)
    if ":" not in spec:
        if _is_gym_id(name):
            spec = GYM_TASK
        else:
            from grpo_edge.core.validate import closest
            raise ConfigError("unknown task %r (built-in: %s; a gymnasium id such as Pendulum-v1; or "
                              "'module:Class')%s" % (name, ", ".join(sorted(TASKS)),
                                                     closest(name, TASKS) or _close_gym_ids(name)))
    if spec.startswith("grpo_edge."):
        module, cls = spec.split(":", 1)
        obj = getattr(importlib.import_module(module), cls)
    else:
        obj = import_user_object(name)
    if isinstance(obj, str):                           # 'module:Id', an env id the module registers
        return task_class(GYM_TASK)
    from grpo_edge.tasks.control import is_env_class, is_env_like
    if is_env_class(obj) or is_env_like(obj):          # a plain reset / step class is wrapped (control.gym_adapter)
        return task_class(GYM_TASK)
    if spec.startswith("grpo_edge."):
        return obj
    if not isinstance(obj, type) or not all(hasattr(obj, a) for a in ("rollout", "logprobs", "evaluate")):
        raise ConfigError("task %r: %s is neither a gymnasium Env class nor a grpo-edge Task class "
                          "(rollout, logprobs, evaluate)" % (name, spec.split(":", 1)[1]))
    return obj


def _is_gym_id(name):
    """True when `name` is registered with gymnasium (imported only for names that are not built in)."""
    if not isinstance(name, str) or "-v" not in name:
        return False
    try:
        import gymnasium
    except ImportError:
        return False
    return name in gymnasium.registry


def _close_gym_ids(name):
    if not isinstance(name, str) or "-v" not in name:
        return ""
    try:
        import gymnasium
    except ImportError:
        return " (gymnasium is not installed: pip install -e \".[tasks]\")"
    from grpo_edge.tasks.control import close_gym_ids
    close = close_gym_ids(gymnasium, name)
    return (" (did you mean %s?)" % ", ".join(close)) if close else ""


def task_defaults(name):
    """The task's config keys and their defaults (dict), or None when the task declares none."""
    d = getattr(task_class(name), "defaults", None)
    return dict(d) if d is not None else None


def default_arch(name):
    return DEFAULT_ARCH.get(name) or getattr(task_class(name), "default_arch", "mlp")


def get_task(name, cfg=None, seed=0):
    """Build a task from its name and its config section (a dict; 'name' may be in it). `task.kwargs` go to
    the user's class: an Env class's constructor (with env_kwargs), or a Task class's as keyword arguments."""
    cfg = dict(cfg or {})
    cfg.pop("name", None)
    kwargs = cfg.pop("kwargs", None) or {}
    if not isinstance(kwargs, dict):
        raise ConfigError("task.kwargs must be a mapping {key: value}, got %r" % (kwargs,))
    cls = task_class(name)
    defaults = getattr(cls, "defaults", None)
    if defaults is not None:
        cfg = dict(defaults, **cfg)
    from grpo_edge.tasks.control import ControlTask
    is_env = issubclass(cls, ControlTask)
    if TASKS.get(name, name) != GYM_TASK and not cfg.get("env_id") and (
            _is_gym_id(name) or (":" in name and cls is task_class(GYM_TASK))):
        cfg["env_id"] = name                       # task.name: Pendulum-v1, mymod:GridWorld, mymod:Grid-v0
    if is_env:
        cfg["env_kwargs"] = dict(cfg.get("env_kwargs") or {}, **kwargs)
        return cls(cfg, seed=seed)
    try:
        return cls(cfg, seed=seed, **kwargs)
    except TypeError as e:
        if not kwargs or "argument" not in str(e):
            raise
        raise ConfigError("task.kwargs for %s: %s" % (name, str(e).splitlines()[0]))
    except GrpoEdgeError:
        raise
    except Exception as e:
        if cls.__module__.startswith("grpo_edge."):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""   # the user's class: its error, one line
        raise ConfigError("task %s could not be built: %s%s" % (name, type(e).__name__, (": " + first[:200]) if first
                                                                else ""))


def _check_importable(spec):
    module, qualname = spec.split(":", 1)
    if module == "__main__" or "<locals>" in qualname:
        raise CheckpointError("the checkpoint's task class %s was defined %s, which another process cannot "
                              "import: move it into a module (my_tasks.py) and train again"
                              % (qualname.split(".")[-1], "in a script (__main__)" if module == "__main__"
                                 else "inside a function"))


def task_slug(state: dict) -> str:
    """A checkpoint's task as a name for files, reports and C symbols: a control task's environment
    ('Pendulum-v1' -> 'pendulum_v1', also under task.env_id with another task name), else the task name
    made a C identifier ('zh-en-numbers' -> 'zh_en_numbers')."""
    meta = state.get("task_meta") if isinstance(state.get("task_meta"), dict) else {}
    if isinstance(meta.get("slug"), str) and meta["slug"]:
        return meta["slug"]
    from grpo_edge.tasks.control import env_slug
    return env_slug(state.get("task") or "model")


def task_from_state(state: dict, seed: int = 0):
    """Rebuild the task a checkpoint was trained on (name from state["task"], config from state["config"])."""
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    task_cfg = config.get("task") if isinstance(config.get("task"), dict) else {}
    name = state.get("task_class") or state.get("task") or task_cfg.get("name")
    if not name or not isinstance(name, str):
        raise CheckpointError("checkpoint names no task: cannot rebuild it")
    if name.startswith(ONLINE_PREFIX) and not state.get("task_class"):
        return _online_task(state, name[len(ONLINE_PREFIX):], seed)
    if state.get("task_class"):
        _check_importable(state["task_class"])
    allowed = getattr(task_class(name), "archs", None) if name in TASKS else None
    if allowed and state.get("arch") not in allowed:
        raise CheckpointError("checkpoint's architecture %s does not fit task %s (it takes %s)"
                              % (state.get("arch"), name, ", ".join(allowed)))
    cfg = dict(task_cfg)
    try:
        restore = getattr(task_class(name), "restore_cfg", None)   # what the checkpoint fixes (a vocabulary)
        if restore is not None:
            cfg.update(restore(state.get("task_meta") if isinstance(state.get("task_meta"), dict) else {}))
        return get_task(name, cfg, seed=seed)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError("cannot rebuild task %r from the checkpoint (%s)" % (name, msg[:300]))


ONLINE_PREFIX = "online:"       # the online trainer's served.pt / state.pt: task "online:<env or stream>"


def _online_task(state, source, seed):
    """The task of a policy the online trainer served (grpo_edge/online): its environment as a control task,
    with online.env_kwargs and the env_schedule changes in effect when it was saved (when the env's
    constructor takes them; else the env as constructed, and `task.note` says so). A policy trained from a
    record stream has no environment to rebuild: one line saying what to do instead."""
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    online = config.get("online") if isinstance(config.get("online"), dict) else {}
    meta = state.get("task_meta") if isinstance(state.get("task_meta"), dict) else {}
    if source == "stdin" or source.startswith("tcp:"):
        raise CheckpointError("this policy was trained online from a record stream (%s), which no command can "
                              "replay: evaluate it on the robot; deploy it with --calibration STATES.npz (states the "
                              "robot recorded, one row per observation)" % source)
    kwargs = dict(online.get("env_kwargs") or {})
    cfg = {"env_kwargs": kwargs, "max_steps": int(meta.get("max_steps") or online.get("max_steps") or 500)}
    dynamics = meta.get("dynamics") if isinstance(meta.get("dynamics"), dict) else {}
    try:
        if dynamics:
            try:
                return get_task(source, dict(cfg, env_kwargs=dict(kwargs, **dynamics)), seed=seed)
            except ConfigError:          # the env's constructor does not take them: the env as constructed
                task = get_task(source, cfg, seed=seed)
                task.note = ("%s is rebuilt as constructed: its constructor does not take the env_schedule changes "
                             "the policy last served (%s)" % (source, json.dumps(dynamics)))
                return task
        return get_task(source, cfg, seed=seed)
    except GrpoEdgeError as e:
        raise CheckpointError("cannot rebuild the online policy's environment %s (%s)" % (source, str(e)[:300]))
