"""The GRPO trainer core: rollout -> group-relative advantages -> clipped loss -> optimizer step.

Python 3.6 / torch 1.10 safe, imports torch and numpy only, so the same file trains on a Jetson Nano.
Logging, progress bars, run folders and plots live outside the core (grpo_edge/training_run.py).

One step, for a batch of B prompts / start states and G samples each (N = B * G):

    rollout  = task.rollout(policy, B, G)                    # inference mode, old_logp (N, T)
    adv      = group_advantages(rollout.rewards, G)          # (N,)   or (N, T) reward-to-go for control
    for _ in range(num_iterations):                          # mu passes over the batch
        for mb in minibatches(N):
            logp, ent = task.logprobs(policy, mb)            # (n, T) with grad
            loss = policy_loss(logp, old_logp, adv, mask)    # clipped ratio, optional KL, entropy
                 + grad_penalty_lambda * (||dloss/dtheta|| - target)^2   (opt-in)
            backward; every grad_accum_steps: clip grad norm, Adam step
"""
import copy
import math
import time

import numpy as np
import torch

from grpo_edge.core import adam
from grpo_edge.core import defaults
from grpo_edge.core import devices
from grpo_edge.core import advantages as adv_lib
from grpo_edge.core import distributed
from grpo_edge.core import finite
from grpo_edge.core import losses
from grpo_edge.core import microbatch
from grpo_edge.core.checkpoint import rng_state, set_rng_state
from grpo_edge.core.devices import resolve_device  # noqa: F401  (re-exported: older imports)
from grpo_edge.core.models._layers import double_backward
from grpo_edge.errors import ConfigError


def lr_lambda(schedule, warmup, total):
    def f(step):
        if warmup and step < warmup:
            return float(step + 1) / float(warmup)
        if schedule == "constant":
            return 1.0
        progress = min(1.0, float(step - warmup) / float(max(1, total - warmup)))
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * progress))      # cosine
    return f


def mode_free(model):
    """True when model.train() and model.eval() compute the same thing: only torch.nn / grpo-edge layers,
    no dropout with p > 0, no batch or instance norm, no hooks (latent noise), no gradient checkpointing.
    The trainer then skips switching modes twice per step (a walk over every module each time)."""
    nn = torch.nn
    for m in model.modules():
        if m._forward_hooks or m._forward_pre_hooks or getattr(m, "checkpoint_interval", 0):
            return False
        if isinstance(m, nn.modules.dropout._DropoutNd):
            if m.p > 0:
                return False
            continue
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
            return False
        mod = type(m).__module__
        if not (mod.startswith("torch.nn.") or mod.startswith("grpo_edge.core.models")):
            return False
    return True


class MLPCritic(torch.nn.Module):
    """PPO's value function for vector observations: obs (B, obs_dim) -> value (B, 1)."""

    def __init__(self, obs_dim, hidden=64):
        super(MLPCritic, self).__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(obs_dim, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)


class Trainer(distributed.ShardedTrainerMixin):
    """GRPO (or PPO, for comparison) on one task.

    model: a policy from grpo_edge.core.models; task: a grpo_edge.tasks Task;
    config: the resolved config as a nested dict with sections model / training / grpo / task.
    Under torchrun (WORLD_SIZE > 1) it trains data-parallel, see grpo_edge/core/distributed.py; rank r's
    task should then be built with seed distributed.shard_seed(seed, r), as GRPOTrainer does.
    """

    def __init__(self, model, task, config, device=None):
        self.cfg = config
        # every key present: what the config leaves out takes its default from core/defaults.py
        self.t = defaults.complete("training", config["training"])
        self.g = defaults.complete("grpo", config["grpo"])
        self.task = task
        n_params = sum(p.numel() for p in model.parameters())
        self.device, self.device_reason = devices.choose_device(device or self.t["device"], n_params)
        self.rank, self.world_size = distributed.init_from_env(self.device.type == "cuda")
        self.device = distributed.local_device(self.device)
        self._check_sharding(self.world_size)
        self.rollout_shards = []      # extra in-process shards (add_rollout_shards)
        self.policy = model.to(self.device)
        self.step = 0
        self.best_metric = None
        self.last_eval = {}
        self.warm_started = False
        self.env_steps = 0
        self.samples = 0
        torch.manual_seed(int(self.t["seed"]))
        np.random.seed(int(self.t["seed"]))
        # on the training device: the models sample their tokens there (grpo_edge/core/devices.py)
        self.generator = devices.make_generator(self.device, self.t["seed"])
        self.notes = []         # one-line notes for the user (a resumed run whose stream restarted, ...)
        if self.t["gradient_checkpointing"] and getattr(model, "supports_gradient_checkpointing", False):
            model.set_gradient_checkpointing(int(self.t["gradient_checkpointing"]))
        elif self.t["gradient_checkpointing"]:
            self.notes.append("training.gradient_checkpointing=%d does not apply to the %s model (it recomputes "
                              "transformer blocks: micro-gpt, tiny-transformer); off"
                              % (int(self.t["gradient_checkpointing"]), getattr(model, "arch", "?")))

        scale = 1.0
        if self.t["lr_scaling"] == "sqrt":
            scale = math.sqrt(float(self.t["batch_size"]) / float(self.t["base_batch_size"]))
        self.lr = float(self.t["lr"]) * scale
        self.amp = bool(self.t["amp"])
        self.amp_dtype = devices.amp_dtype(self.device, self.t["amp_dtype"]) if self.amp else None
        self.scaler = None                      # float16 on CUDA only: bfloat16 needs no loss scaling
        if self.amp and self.device.type == "cuda" and self.amp_dtype == torch.float16:
            self.scaler = devices.grad_scaler()
        self.critic = None
        params = list(self.policy.parameters())
        if self.g["algo"] == "ppo":
            self.critic = self._build_critic().to(self.device)
            params = params + list(self.critic.parameters())
        self.optimizer = self._adam(params, self.lr)
        self._note_settings_that_cannot_apply()
        steps_total = int(self.t["steps"]) * max(1, self._optimizer_steps_per_update())
        self.scheduler = adam.LambdaSchedule(
            self.optimizer, lr_lambda(self.t["lr_schedule"], int(self.t["warmup_steps"]),
                                      steps_total))
        self.ref_policy = None
        if float(self.g["beta"]) > 0.0:
            self.ref_policy = copy.deepcopy(self.policy).eval()
            for p in self.ref_policy.parameters():
                p.requires_grad_(False)
        self.memory_budget = None
        self.t["micro_batch_mb"] = self._activation_budget_mb()
        if self.world_size > 1:
            # Same parameters everywhere; rank r > 0 samples from its own streams (rank 0 keeps the seed).
            distributed.broadcast_parameters(self.policy)
            if self.critic is not None:
                distributed.broadcast_parameters(self.critic)
            if self.rank > 0:
                self._seed_streams(distributed.shard_seed(self.t["seed"], self.rank))

    # ------------------------------------------------------------------ set-up helpers
    def _adam(self, params, lr):
        betas = (float(self.t["adam_beta1"]), float(self.t["adam_beta2"]))
        wd = float(self.t["weight_decay"])
        eps = float(self.t["adam_eps"])
        if self.scaler is not None:     # GradScaler drives torch.optim's
            if wd > 0:
                return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
            return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)
        # multi-tensor Adam without torch.optim: no torch._dynamo import (seconds of start-up)
        return adam.Adam(params, lr=lr, betas=betas, eps=eps, weight_decay=wd, decoupled=wd > 0)

    def _activation_budget_mb(self):
        """training.micro_batch_mb as resolved for this device and training.max_memory.

        max_memory set: refuse a model whose training state does not fit, cap the CUDA allocator at the
        budget, and give the activations half of what the state leaves (micro_batch_mb, if set, caps it).
        Else a set micro_batch_mb is used as it is; unset, it is 128 MB on the CPU and, on CUDA, half of
        what the state leaves of the GPU's free memory: a GPU step is bound by kernel launches, so fewer,
        larger micro-batches are faster (an 85M micro-gpt: 18 passes, 0.48 s a step at 128 MB; 1 pass, 0.11 s)."""
        configured = self.t["micro_batch_mb"]
        state = devices.training_state_bytes([self.policy, self.critic], [self.ref_policy])
        if self.t["max_memory"]:
            self.memory_budget = devices.parse_size(self.t["max_memory"], "training.max_memory")
            if self.device.type == "cuda":
                devices.cap_cuda_memory(self.device, self.memory_budget)
            cap = configured if configured is not None else (0 if self.device.type == "cuda"
                                                              else devices.CPU_MICRO_BATCH_MB)
            return devices.micro_batch_budget_mb(self.memory_budget, state, cap)
        if configured is not None:
            return int(configured)
        if self.device.type != "cuda":
            return devices.CPU_MICRO_BATCH_MB
        free = devices.cuda_free_bytes(self.device)
        return devices.micro_batch_budget_mb(free, state, 0, "the GPU's free memory")

    def _build_critic(self):
        if self.task.kind == "control":
            return MLPCritic(self.task.model_kwargs()["obs_dim"], int(self.g["critic_hidden"]))
        # Other tasks: a copy of the policy's architecture with a scalar head.
        from grpo_edge.core.models import build_model
        kw = dict(self.policy.config())
        kw["out_dim"] = 1
        return build_model(self.policy.arch, **kw)

    def _samples_per_update(self):
        return int(self.t["batch_size"]) * int(self.g["group_size"])

    def _minibatch(self):
        """Samples per minibatch over all ranks (each rank takes its 1 / world_size of it)."""
        mb = int(self.t["minibatch_size"])
        return mb if mb > 0 else self._samples_per_update()

    def _note_settings_that_cannot_apply(self):
        """A setting this run cannot apply is a note (printed at the start), never silently ignored."""
        accum = int(self.t["grad_accum_steps"])
        passes = int(self.g["num_iterations"]) * max(1, self._samples_per_update() // self._minibatch())
        if accum > passes:
            self.notes.append("training.grad_accum_steps=%d, but an update makes %d minibatch pass%s (%d samples, "
                              "training.minibatch_size %s, grpo.num_iterations %d): gradients are accumulated over "
                              "%d; set training.minibatch_size to split the batch"
                              % (accum, passes, "" if passes == 1 else "es", self._samples_per_update(),
                                 self.t["minibatch_size"] or "0 = the whole batch", int(self.g["num_iterations"]),
                                 passes))
        batches = getattr(self.task, "warm_start_batches", None)      # optional: the online tasks have none
        self.warm_start_applies = batches is not None and batches(int(self.t["batch_size"]), self.generator) is not None
        if int(self.t["warm_start_epochs"]) > 0 and not self.warm_start_applies:
            self.notes.append("training.warm_start_epochs=%d does not apply: task %s has no reference answers to "
                              "learn from (a supervised warm start is for text tasks); no warm start"
                              % (int(self.t["warm_start_epochs"]), getattr(self.task, "name", "?")))

    def _optimizer_steps_per_update(self):
        n_mb = max(1, self._samples_per_update() // self._minibatch())
        return int(self.g["num_iterations"]) * max(1, n_mb // int(self.t["grad_accum_steps"]))

    def _autocast(self):
        if not self.amp:
            return _NullContext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # ------------------------------------------------------------------ advantages
    def compute_advantages(self, ro):
        """Fill ro.advantages ((N,) or (N, T)) and, in PPO mode, ro.returns / ro.values."""
        g = self.g
        G = ro.group_size
        if g["algo"] == "ppo":
            if not hasattr(self.task, "values"):
                raise ValueError("PPO mode needs a task with values(); %s has none" % self.task.name)
            with torch.no_grad():
                values = self.task.values(self.critic, ro).float()
            step_rewards = ro.step_rewards
            if step_rewards is None:          # one reward at the last real step of each sample
                step_rewards = torch.zeros_like(ro.mask)
                last = (ro.mask.sum(1).long() - 1).clamp(min=0)
                step_rewards[torch.arange(len(ro)), last] = ro.rewards
            adv, ret = adv_lib.gae(step_rewards, values, ro.mask, float(g["gamma"]),
                                   float(g["gae_lambda"]))
            n_tok = ro.mask.sum().clamp(min=1.0)
            mean = (adv * ro.mask).sum() / n_tok
            std = (((adv - mean) ** 2) * ro.mask).sum().div(n_tok).sqrt()
            ro.advantages = (adv - mean) / (std + 1e-8) * ro.mask
            ro.returns, ro.values = ret, values
            return
        mode = g["advantage"]
        if mode == "auto":
            mode = "reward_to_go" if ro.step_rewards is not None else "sequence"
        if mode == "reward_to_go" and ro.step_rewards is None and ro.mask.shape[1] == 1:
            mode = "sequence"                 # one action per sample (a bandit): its reward-to-go is its reward
        if mode == "reward_to_go":
            if ro.step_rewards is None:
                raise ConfigError("grpo.advantage 'reward_to_go' needs per-step rewards; task %s gives one "
                                  "reward per sample (use grpo.advantage=sequence)" % self.task.name)
            ro.advantages = adv_lib.reward_to_go_advantages(ro.step_rewards, ro.mask, G, float(g["gamma"]),
                                                            g["scale_rewards"])
        else:
            ro.advantages = adv_lib.group_advantages(ro.rewards, G, g["scale_rewards"])

    # ------------------------------------------------------------------ one step
    def train_step(self):
        """One rollout batch and its updates. Returns a dict of metrics (floats)."""
        t0 = time.time()
        G = int(self.g["group_size"])
        self._policy_mode(False)  # sample without dropout: old_logp then matches the deterministic policy
        ro = self._rollout_all_ranks(G)
        t_rollout = time.time() - t0
        metrics = {"reward_mean": float(ro.rewards.mean()), "reward_std": float(ro.rewards.std())}
        for name, v in ro.reward_parts.items():          # as TRL logs them; NaN marks "does not apply"
            v = v.float()
            v = v[~torch.isnan(v)]
            metrics["rewards/%s/mean" % name] = float(v.mean()) if len(v) else None
            metrics["rewards/%s/std" % name] = float(v.std()) if len(v) > 1 else 0.0
        metrics["frac_zero_std"] = adv_lib.frac_zero_std(ro.rewards, G)
        self.compute_advantages(ro)

        keep = torch.arange(len(ro), device=ro.rewards.device)
        if self.g["filter_zero_std"] and self.g["algo"] == "grpo":
            keep = adv_lib.nonzero_std_groups(ro.rewards, G)
        loss_mask = ro.mask.clone()
        if self.g["mask_truncated"]:
            loss_mask = loss_mask * (~ro.truncated).float().unsqueeze(1)
        ro.mask_loss = loss_mask
        if self.ref_policy is not None:
            with torch.no_grad():
                ro.ref_logp, _ = self.task.logprobs(self.ref_policy, ro)

        stats = self._update(ro, keep) if len(keep) > 0 else {"skipped": 1.0}
        finite.check_stats(stats, self.step + 1)
        self._update_obs_stats(ro)
        metrics.update(stats)
        dt = time.time() - t0
        metrics.update({
            "step_time": dt, "rollout_time": t_rollout, "steps_per_s": 1.0 / max(dt, 1e-9),
            "samples_per_s": len(ro) / max(dt, 1e-9), "lr": self.scheduler.get_last_lr()[0],
            "completion_len": float(ro.mask.sum(1).mean()),
            "num_env_steps": ro.num_env_steps, "num_samples": len(ro),
        })
        metrics.update(devices.peak_memory(self.device))
        metrics = distributed.reduce_metrics(metrics)      # all ranks' view; unchanged in one process
        self.step += 1
        self.env_steps += int(metrics.pop("num_env_steps"))
        self.samples += int(metrics.pop("num_samples"))
        metrics.update({"step": self.step, "env_steps": self.env_steps, "samples": self.samples})
        return metrics

    def _update_obs_stats(self, ro):
        """A policy with obs_norm adds this rollout's states (the steps inside episodes) to its statistics
        after the update, so a rollout and its update use the same ones; every rank adds every rank's."""
        policy = self.policy
        if not getattr(policy, "obs_norm", False) or "obs" not in ro.inputs:
            return
        obs = ro.inputs["obs"]                                         # (N, T, obs_dim)
        moments = policy.obs_moments(obs[ro.mask > 0] if obs.dim() == 3 else obs)
        if distributed.world()[1] > 1:
            moments = sum(m.to(moments.device) for m in distributed.all_gather(moments.cpu()))
        policy.add_obs_moments(moments)

    def _rollout_all_ranks(self, group_size):
        """The rollout, checked finite; when it fails on any rank (a bad reward, a non-finite value) every
        rank raises the same one-line error: a rank that stopped alone would leave the others waiting in
        the gradient all-reduce (torchrun ends them; other launchers may not)."""
        def rollout():
            ro = self._rollout(group_size)
            ro.to(self.device)
            finite.check_rollout(ro, self.step + 1)
            return ro
        return distributed.on_every_rank(rollout)

    def _update(self, ro, keep):
        g, t = self.g, self.t
        self._policy_mode(True)
        mb_size = min(self._minibatch() // self.world_size, len(keep))
        accum = int(t["grad_accum_steps"])
        lam = float(g["grad_penalty_lambda"])
        num_tokens_total = float(ro.mask_loss[keep].sum())
        max_len = ro.mask.shape[1]
        agg = {}
        n_mb = 0
        # micro-batches bound a minibatch's activation memory (grpo_edge/core/microbatch.py); the
        # gradient penalty differentiates the whole minibatch's gradient norm, so it is not split
        micro = 0 if lam > 0.0 else microbatch.micro_batch_size(self.policy, ro, t["micro_batch_mb"])
        for _ in range(int(g["num_iterations"])):
            order = self._epoch_order(keep, mb_size)
            for start in range(0, len(order), mb_size):
                if n_mb % accum == 0:       # a new accumulation window; the last one's gradients stay after the
                    self.optimizer.zero_grad()     # update, for a look at them (plot_grad_flow after train())
                st = self._minibatch_backward(ro, order[start:start + mb_size], keep, accum, lam, max_len,
                                              num_tokens_total, micro)
                n_mb += 1
                for k, v in st.items():
                    agg[k] = agg.get(k, 0.0) + v
                if n_mb % accum == 0:
                    agg["grad_norm"] = agg.get("grad_norm", 0.0) + self._optimizer_step()
        if n_mb % accum != 0:                     # leftover accumulated gradient
            agg["grad_norm"] = agg.get("grad_norm", 0.0) + self._optimizer_step()
        n_opt = max(1, int(math.ceil(n_mb / float(accum))))
        passes = agg.pop("passes", 0.0)
        out = dict((k, v / (n_opt if k == "grad_norm" else max(1, n_mb))) for k, v in agg.items())
        out["optimizer_steps"] = float(n_opt)
        out["passes"] = float(passes)             # forward/backward passes (micro-batches) in this update
        return out

    def _policy_mode(self, training):
        """policy.train(training), skipped for models where the mode changes nothing (mode_free, checked
        on the first step: after gradient checkpointing and latent-noise hooks are set up)."""
        if getattr(self, "_mode_free", None) is None:
            self._mode_free = mode_free(self.policy)
        if not self._mode_free:
            self.policy.train(training)

    def _minibatch_backward(self, ro, idx, keep, accum, lam, max_len, num_tokens_total, micro):
        """Backward of one minibatch's loss, in micro-batches of `micro` samples (0 = whole); returns its
        stats. The micro-batch losses are weighted (microbatch.weights) so their gradients add up to the
        whole minibatch's."""
        g = self.g
        parts = microbatch.split(torch.arange(len(idx), device=idx.device), micro)
        w_policy = microbatch.weights(parts, ro.mask_loss[idx], g["loss_type"], True)
        w_value = microbatch.weights(parts, ro.mask_loss[idx], "tokens")
        # dapo: normalise by the tokens of one pass over the batch, independent of minibatching
        tokens_total = num_tokens_total * len(idx) / max(1, len(keep))
        out = {"passes": float(len(parts))}
        for part, wp, wv in zip(parts, w_policy, w_value):
            # the penalty differentiates a gradient: attention takes its twice-differentiable path, in the
            # forward and in any recomputation (gradient checkpointing) during the backward passes
            with double_backward(lam > 0.0):
                st, loss = self._part_loss(ro.select(idx[part]), wp, wv, lam, max_len, tokens_total)
                scaled = loss / accum
                if self.scaler is not None:
                    self.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
            share = len(part) / float(len(idx))
            for k, v in st.items():
                out[k] = out.get(k, 0.0) + share * v
            out["loss"] = out.get("loss", 0.0) + float(loss.detach())
        return out

    def _part_loss(self, mb, wp, wv, lam, max_len, tokens_total):
        """(stats, loss) of one micro-batch: the weighted policy loss, the critic's (PPO), the penalty."""
        g = self.g
        with self._autocast():
            logp, ent = self.task.logprobs(self.policy, mb)
        logp, ent = logp.float(), ent.float()
        mask = mb.mask_loss
        loss, st = losses.policy_loss(
            logp, mb.old_logp, mb.advantages, mask, loss_type=g["loss_type"],
            clip_eps=float(g["clip_eps"]), clip_eps_high=g["clip_eps_high"],
            importance_level=g["importance_level"],
            ref_logp=getattr(mb, "ref_logp", None), beta=float(g["beta"]),
            kl_estimator=g["kl_estimator"], entropy=ent,
            entropy_coef=float(g["entropy_coef"]), max_len=max_len, num_tokens_total=tokens_total)
        loss = wp * loss
        if self.critic is not None:
            values = self.task.values(self.critic, mb).float()
            vl = losses.value_loss(values, mb.returns, mask)
            loss = loss + wv * float(g["vf_coef"]) * vl
            st["value_loss"] = float(vl.detach())
        if lam > 0.0:                                  # one part only (micro is 0), wp == 1
            pen, gnorm_pre = losses.gradient_penalty(loss, self.policy.parameters(), lam,
                                                     float(g["target_grad_norm"]))
            loss = loss + pen
            st["grad_penalty"] = float(pen.detach())
            st["policy_grad_norm"] = gnorm_pre
        return st, loss

    def _optimizer_step(self):
        clip = float(self.t["grad_norm_clip"])
        params = [p for grp in self.optimizer.param_groups for p in grp["params"] if p.grad is not None]
        distributed.average_gradients(params)      # no-op in one process
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = adam.clip_grad_norm(params, clip)
        if self.scaler is None and not math.isfinite(float(norm)):    # (AMP's scaler skips such steps itself)
            self.optimizer.zero_grad()
            finite.check_grad_norm(norm, self.step + 1)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        finite.check_parameters(params, self.step + 1)
        self.scheduler.step()
        return float(norm)

    # ------------------------------------------------------------------ supervised warm start
    def warm_start(self, epochs=None, lr=None, on_epoch=None):
        """Text tasks: supervised epochs on the reference answers before GRPO. Returns per-epoch losses."""
        epochs = int(self.t["warm_start_epochs"] if epochs is None else epochs)
        if epochs <= 0 or self.warm_started or not self.warm_start_applies:
            return []
        opt = self._adam(self.policy.parameters(), float(lr or self.t["warm_start_lr"]))
        schedule = None
        out = []
        self.policy.train()
        for epoch in range(epochs):
            total, n = 0.0, 0
            batches = list(self.task.warm_start_batches(int(self.t["batch_size"]), self.generator))
            if schedule is None:       # the lr over all the warm start's steps (warm_start_schedule)
                schedule = adam.LambdaSchedule(opt, lr_lambda(self.t["warm_start_schedule"], 0,
                                                              epochs * len(batches)))
            for batch in batches:
                with self._autocast():
                    loss = self.task.supervised_loss(self.policy, batch)
                if not math.isfinite(float(loss.detach())):
                    finite.check_stats({"loss": float(loss.detach())}, 0)
                opt.zero_grad()
                loss.float().backward()
                clip = float(self.t["grad_norm_clip"])
                if clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.policy.parameters(), clip)
                opt.step()
                schedule.step()
                total += float(loss.detach())
                n += 1
            out.append(total / max(1, n))
            if on_epoch is not None:
                on_epoch(epoch, out[-1])
        self.warm_started = True
        if self.ref_policy is not None:          # the KL anchor is the warm-started policy
            self.ref_policy.load_state_dict(self.policy.state_dict())
        return out

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, n=0):
        n = n or int(self.t["eval_n"])
        if self.world_size > 1:
            # Rank 0 evaluates, the others take its result: every rank then makes the same best / early
            # stopping decisions (a collective: call it on all ranks).
            res = self.task.evaluate(self.policy, "test", n) if self.rank == 0 else None
            res = distributed.broadcast_object(res)
        else:
            res = self.task.evaluate(self.policy, "test", n)
        self.last_eval = res
        return res

    def is_better(self, metric):
        if self.best_metric is None:
            return True
        if getattr(self.task, "higher_is_better", True):
            return metric > self.best_metric
        return metric < self.best_metric

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self):
        """Everything needed to rebuild the policy alone (deploy) or to resume exactly (training).

        Under torchrun it gathers every rank's RNG streams (shard_states), so call it on all ranks."""
        state = {
            "arch": self.policy.arch, "model_config": self.policy.config(), "task": self.task.name,
            "task_meta": self.task.checkpoint_meta(), "config": self.cfg,
            "model": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "step": self.step, "env_steps": self.env_steps,
            "samples": self.samples, "warm_started": self.warm_started,
            "best_metric": self.best_metric, "metrics": dict((k, v) for k, v in self.last_eval.items()
                                                             if isinstance(v, (int, float))),
            "rng": rng_state(), "task_state": self.task.get_state(),
        }
        state["generator"], state["generator_device"] = devices.generator_state(self.generator)
        cls = type(self.task)
        if not cls.__module__.startswith("grpo_edge."):      # a user's Task class: where to import it from
            state["task_class"] = "%s:%s" % (cls.__module__, cls.__qualname__)
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
        if self.ref_policy is not None:
            state["ref_model"] = self.ref_policy.state_dict()
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        shards = self._shard_states()
        if shards is not None:
            state["shard_states"] = shards
        return state

    def load_state_dict(self, state):
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.env_steps = int(state.get("env_steps", 0))
        self.samples = int(state.get("samples", 0))
        self.warm_started = bool(state.get("warm_started", False))
        self.best_metric = state.get("best_metric")
        set_rng_state(state["rng"])
        note = devices.set_generator_state(self.generator, state["generator"], state.get("generator_device"))
        if note:
            self.notes.append(note)
        self.task.set_state(state.get("task_state", {}))
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
        if self.ref_policy is not None and "ref_model" in state:
            self.ref_policy.load_state_dict(state["ref_model"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        if state.get("shard_states"):
            self._load_shard_states(state["shard_states"])


class _NullContext(object):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
