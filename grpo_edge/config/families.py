"""The recipe an environment trains with when `train` is given no --config, and the line that says why.

A task with a recipe of its own (configs/<recipe>.yaml whose task.name it is) uses it. A gymnasium env
without one uses its family's recipe, the family read from where the env's class lives (its registered entry
point: gymnasium.envs.classic_control, .box2d or .mujoco; MuJoCo's inverted pendulums balance, its other
robots move), and its `target_metric` is the env's own `spec.reward_threshold`, or none when the spec has
none (a family recipe never carries another env's target). Any other control task (your own Env class)
trains with the classic-control recipe, bandit and text tasks with theirs (KIND_RECIPES).
"""
from collections import namedtuple
from typing import Optional

Family = namedtuple("Family", "recipe marker about")

# first match wins: (its recipe, the start of the env's entry point, what the family is)
FAMILIES = (
    Family("mujoco_balance.yaml", "gymnasium.envs.mujoco.inverted", "a MuJoCo balance task"),
    Family("mujoco_locomotion.yaml", "gymnasium.envs.mujoco.", "a MuJoCo locomotion robot"),
    Family("box2d.yaml", "gymnasium.envs.box2d.", "a Box2D environment"),
    Family("classic_control.yaml", "gymnasium.envs.classic_control.",
           "a classic-control environment"),
)
CLASSIC = FAMILIES[-1]

FAMILY_RECIPES = tuple(f.recipe for f in FAMILIES)    # never a task's "own" recipe, though each names one task

# the recipe for a kind of task without a recipe or family of its own
KIND_RECIPES = {"control": CLASSIC.recipe, "bandit": "bandit.yaml", "sequence": "arithmetic.yaml"}
KIND_NAMES = {"control": "a control task", "bandit": "a bandit task", "sequence": "a text task"}


def gym_spec(task_name):
    """gymnasium's EnvSpec for a registered id ('Hopper-v5', 'mygrid:GridWorld-v0' once imported), or None."""
    if not isinstance(task_name, str):
        return None
    env_id = task_name.split(":", 1)[1] if ":" in task_name else task_name
    try:
        from gymnasium.envs.registration import registry
    except ImportError:
        return None
    return registry.get(env_id)


def env_family(task_name) -> Optional[Family]:
    """The family of a registered gymnasium env by its entry point; None for anything else."""
    spec = gym_spec(task_name)
    entry = spec.entry_point if spec is not None else None
    if not isinstance(entry, str):
        return None
    for family in FAMILIES:
        if entry.startswith(family.marker):
            return family
    return None


def reward_threshold(task_name) -> Optional[float]:
    """The env's own spec.reward_threshold (the return gymnasium calls solved), or None."""
    spec = gym_spec(task_name)
    value = getattr(spec, "reward_threshold", None)
    return float(value) if value is not None else None


def _target(task_name, threshold):
    if threshold is not None:
        return "training.target_metric %g from %s's spec.reward_threshold" % (threshold, task_name)
    return "no training.target_metric (%s has no spec.reward_threshold)" % task_name


def family_why(task_name, family, threshold):
    """What `train` prints about a family recipe, after 'recipe: configs/<file>, '."""
    spec = gym_spec(task_name)
    where = spec.entry_point.rsplit(":", 1)[0]
    return "%s is %s (%s); %s" % (task_name, family.about, where, _target(task_name, threshold))


def kind_why(task_name, kind, threshold):
    """What `train` prints about the recipe for a task's kind, after 'recipe: configs/<file>, '."""
    what = KIND_NAMES.get(kind, "a %s task" % kind)
    if kind != "control":
        return "%s is %s (the recipe for its kind)" % (task_name, what)
    return ("%s is %s of no known family (not gymnasium's classic control, Box2D or MuJoCo): the classic-control "
            "recipe; %s" % (task_name, what, _target(task_name, threshold)))
