"""The default of every training and grpo setting, and the names the enumerated ones may take: the one
source of these values (Python 3.6-valid, no imports).

grpo_edge.config's dataclasses take their defaults from here and carry each field's documentation; the
core Trainer fills in what a config dict leaves out from here (the online trainer passes partial dicts,
with its small-batch overrides from grpo_edge/online/config.py); core/validate.py checks values against
CHOICES; core/losses.py and core/advantages.py use the same tuples.
"""

TRAINING = {
    "steps": 200,
    "batch_size": 32,
    "lr": 3e-4,
    "lr_scaling": "sqrt",
    "base_batch_size": 32,
    "lr_schedule": "constant",
    "warmup_steps": 0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.99,
    "adam_eps": 1e-8,
    "weight_decay": 0.0,
    "grad_norm_clip": 1.0,
    "grad_accum_steps": 1,
    "minibatch_size": 0,
    "eval_every": 20,
    "eval_n": 0,
    "save_every": 20,
    "target_metric": None,
    "warm_start_epochs": 0,
    "warm_start_lr": 1e-3,
    "warm_start_schedule": "constant",
    "amp": False,
    "amp_dtype": "auto",
    "gradient_checkpointing": 0,
    "micro_batch_mb": None,          # None: 128 on the CPU, sized from the free memory on CUDA (trainer)
    "max_memory": None,
    "device": "auto",
    "seed": 0,
    "threads": 0,
    "log_every": 1,
    "tensorboard": False,
    "plot_grad_flow_every": 0,
}

GRPO = {
    "algo": "grpo",
    "group_size": 8,
    "num_iterations": 1,
    "clip_eps": 0.2,
    "clip_eps_high": None,
    "loss_type": "grpo",
    "importance_level": "token",
    "scale_rewards": "group",
    "advantage": "auto",
    "gamma": 0.99,
    "beta": 0.0,
    "kl_estimator": "k3",
    "entropy_coef": 0.0,
    "temperature": 1.0,
    "mask_truncated": False,
    "filter_zero_std": False,
    "grad_penalty_lambda": 0.0,
    "target_grad_norm": 0.0,
    "gae_lambda": 0.95,
    "vf_coef": 0.5,
    "critic_hidden": 64,
}

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
KL_ESTIMATORS = ("k1", "k2", "k3")
IMPORTANCE_LEVELS = ("token", "sequence")
REWARD_SCALES = ("group", "batch", "none")
ADVANTAGES = ("auto", "sequence", "reward_to_go")

# (section, key) -> the values a setting may take
CHOICES = {
    ("training", "lr_scaling"): ("sqrt", "none"),
    ("training", "lr_schedule"): ("constant", "linear", "cosine"),
    ("training", "warm_start_schedule"): ("constant", "linear", "cosine"),
    ("training", "device"): ("auto", "cpu", "cuda"),
    ("training", "amp_dtype"): ("auto", "float16", "bfloat16"),
    ("grpo", "algo"): ("grpo", "ppo"),
    ("grpo", "loss_type"): LOSS_TYPES,
    ("grpo", "importance_level"): IMPORTANCE_LEVELS,
    ("grpo", "scale_rewards"): REWARD_SCALES,
    ("grpo", "advantage"): ADVANTAGES,
    ("grpo", "kl_estimator"): KL_ESTIMATORS,
}

SECTIONS = {"training": TRAINING, "grpo": GRPO}


def complete(section, cfg):
    """`cfg` (a dict of one section, possibly partial) with every missing key at its default."""
    out = dict(SECTIONS[section])
    out.update(cfg or {})
    return out
