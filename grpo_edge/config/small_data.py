"""Config sections of the small-data features (issue 6): `curriculum`, `augment`, `distill`.

Kept apart from grpo_edge/config/__init__.py (which imports them) so that each file stays readable; the same
rules apply: each field's docstring is its documentation, load_config validates them once.
"""
from dataclasses import dataclass
from typing import Any, Optional

from grpo_edge.errors import ConfigError


@dataclass
class CurriculumConfig:
    """Dynamic curriculum (grpo_edge/data/curriculum.py): text tasks' training items, easy to hard."""
    metric: Optional[str] = None
    """Difficulty: 'perplexity' (of the reference under the policy when GRPO starts), 'length' (characters
    of prompt + reference) or 'pass_rate' (1 - mean reward of `samples` sampled answers); None = off."""
    stages: int = 5
    """Equal-size difficulty bins, visited easiest first."""
    threshold: float = 0.6
    """A stage is mastered when the mean primary reward (e.g. exact_match) of its prompts over the last
    `window` steps reaches this; then the next, harder stage starts."""
    window: int = 3
    """Steps averaged for the mastery test."""
    new_fraction: float = 0.5
    """Share of each batch drawn from the current stage; the rest from the easier ones."""
    max_stage_steps: int = 0
    """Advance a stage after this many steps even if not mastered (0 = never)."""
    samples: int = 4
    """pass_rate: answers sampled per item to estimate its difficulty."""


@dataclass
class AugmentConfig:
    """Latent-space augmentation (grpo_edge/core/models/latent.py): noise on hidden representations."""
    latent_noise: float = 0.0
    """Std of Gaussian noise added to the chosen layers' outputs in training mode, relative to each
    sample's activation RMS (0 = off). Never applied in eval mode, rollouts, evaluation or export."""
    latent_layers: Any = "all"
    """'all', or a list of layer names / indices (micro-gpt blocks.<i>; tiny-transformer encoder.<i>,
    decoder.<i>; lite-resnet stem, layers.<i>; mlp net.<j>)."""


@dataclass
class DistillConfig:
    """Synthetic-data distillation (grpo_edge/data/distill.py) from a larger local teacher."""
    teacher: Optional[str] = None
    """A local grpo-edge checkpoint of the same task and vocabulary (no model hub); None = off."""
    prompts_path: Optional[str] = None
    """Extra unlabeled prompts (UTF-8, one per line) for the teacher to answer."""
    ratio: float = 1.0
    """At most ratio * (real train problems) synthetic pairs are mixed into warm start and GRPO data."""
    candidates: int = 4
    """Answers the teacher samples per prompt."""
    temperature: float = 1.0
    """Teacher sampling temperature."""
    min_reward: float = 1.0
    """Keep answers whose primary task reward (e.g. exact_match) is at least this."""
    min_agreement: float = 0.5
    """Unlabeled prompts: share of the teacher's answers that must agree on the majority answer."""
    labeled: bool = True
    """Also let the teacher answer the labeled train prompts (new answers only count if the reward
    accepts answers other than the reference)."""


SMALL_DATA_CHOICES = {
    ("curriculum", "metric"): ("perplexity", "length", "pass_rate"),
}
# (section, key) -> (low, high, low_inclusive); None = unbounded
SMALL_DATA_RANGES = {
    ("curriculum", "stages"): (1, None, True), ("curriculum", "threshold"): (0, 1, True),
    ("curriculum", "window"): (1, None, True), ("curriculum", "new_fraction"): (0, 1, False),
    ("curriculum", "max_stage_steps"): (0, None, True), ("curriculum", "samples"): (1, None, True),
    ("augment", "latent_noise"): (0, None, True),
    ("distill", "ratio"): (0, None, True), ("distill", "candidates"): (1, None, True),
    ("distill", "temperature"): (0, None, False), ("distill", "min_agreement"): (0, 1, False),
}


def check_small_data(cfg) -> None:
    """The curriculum / augment / distill sections: checks the dataclass types cannot express."""
    layers = cfg.augment.latent_layers
    items = layers if isinstance(layers, list) else [layers]
    if not items or any(isinstance(x, bool) or not isinstance(x, (str, int)) for x in items):
        raise ConfigError("augment.latent_layers must be 'all', a layer name or index, or a list of them; got %r"
                          % (layers,))
    if cfg.distill.prompts_path is not None and cfg.distill.teacher is None:
        raise ConfigError("distill.prompts_path is only read for distillation: set distill.teacher too")
