"""`--resume` with a config that differs from the checkpoint's: apply what can change, refuse the rest.

    changes = config_changes(saved_config, new_config, "runs/x/last.pt")   # ConfigError on a refused key
    apply_optimizer_settings(trainer)                                       # after trainer.load_state_dict

Applied (and reported, one line each): run control (steps, evaluation, saving, logging, device, threads),
the learning rate and its schedule, Adam's settings, gradient clipping and the loss knobs of the GRPO
objective (clip range, entropy, temperature...). Refused, naming the key: anything that changes what the
saved weights, optimizer state or RNG streams mean -- the model, the task and its data, the algorithm,
the batch / group / minibatch sizes, the KL reference, the seed, mixed precision, the small-data sections.
"""
from grpo_edge.errors import ConfigError

# (section, key) that may change on resume; every other difference is refused.
APPLIED = {
    "training": {"steps", "lr", "lr_scaling", "base_batch_size", "lr_schedule", "warmup_steps", "adam_beta1",
                 "adam_beta2", "adam_eps", "weight_decay", "grad_norm_clip", "eval_every", "eval_n", "save_every",
                 "target_metric", "warm_start_epochs", "warm_start_lr", "warm_start_schedule", "gradient_checkpointing", "device", "threads", "amp_dtype",
                 "max_memory", "micro_batch_mb",
                 "log_every", "tensorboard", "plot_grad_flow_every"},
    "grpo": {"clip_eps", "clip_eps_high", "loss_type", "importance_level", "scale_rewards", "advantage", "gamma",
             "kl_estimator", "entropy_coef", "temperature", "mask_truncated", "filter_zero_std", "grad_penalty_lambda",
             "target_grad_norm", "gae_lambda", "vf_coef"},
    "task": {"eval_episodes", "eval_size"},
}


def config_changes(saved, new, path=""):
    """[(dotted key, old, new)] of the applied differences; ConfigError on the first refused one."""
    changes = []
    for section in sorted(set(saved) | set(new)):
        a, b = saved.get(section) or {}, new.get(section) or {}
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        for key in sorted(set(a) | set(b), key=str):
            old, cur = a.get(key), b.get(key)
            if old == cur or (key not in a and section == "training"):   # a key newer than the checkpoint
                continue
            dotted = "%s.%s" % (section, key)
            if key not in APPLIED.get(section, ()):
                raise ConfigError("--resume: %s was %r in %s, now %r; it cannot change in a resumed run (undo the "
                                  "change, or train into a new --save-dir)" % (dotted, old, path or "the checkpoint",
                                                                              cur))
            changes.append((dotted, old, cur))
    return changes


def apply_optimizer_settings(trainer):
    """After load_state_dict: the optimizer and scheduler take the new lr / schedule / Adam settings
    (load_state_dict restored the old ones), at the resumed position of the new schedule."""
    import math
    from grpo_edge.core.trainer import lr_lambda
    t = trainer.t
    scale = 1.0
    if t.get("lr_scaling", "sqrt") == "sqrt":
        scale = math.sqrt(float(t["batch_size"]) / float(t.get("base_batch_size", 32)))
    trainer.lr = float(t["lr"]) * scale
    steps_total = int(t["steps"]) * max(1, trainer._optimizer_steps_per_update())
    f = lr_lambda(t.get("lr_schedule", "constant"), int(t.get("warmup_steps", 0)), steps_total)
    sched = trainer.scheduler
    sched.lr_lambdas = [f for _ in trainer.optimizer.param_groups]
    sched.base_lrs = [trainer.lr for _ in trainer.optimizer.param_groups]
    betas = (float(t.get("adam_beta1", 0.9)), float(t.get("adam_beta2", 0.99)))
    for group in trainer.optimizer.param_groups:
        group["initial_lr"] = trainer.lr
        group["lr"] = trainer.lr * f(sched.last_epoch)
        group["betas"] = betas
        group["eps"] = float(t.get("adam_eps", 1e-8))
        group["weight_decay"] = float(t.get("weight_decay", 0.0))
    sched._last_lr = [g["lr"] for g in trainer.optimizer.param_groups]
