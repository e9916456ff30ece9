"""GRPOTrainer: the core Trainer plus a run folder, logging, checkpoints, progress bar and plots.

    from grpo_edge import GRPOTrainer
    trainer = GRPOTrainer(config="configs/cartpole.yaml", save_dir="runs/cartpole")
    trainer.train()
    trainer.evaluate()

The run folder holds config.yaml (resolved), metrics.jsonl (one line per step), last.pt, best.pt
(by evaluation metric), curves.svg and summary.json.
"""
import json
import os
import signal
import time
from pathlib import Path
from typing import Optional

from grpo_edge.config import Config, load_config
from grpo_edge.core import devices, distributed
from grpo_edge.core.checkpoint import load_checkpoint, save_checkpoint
from grpo_edge.core.devices import resolve_device
from grpo_edge.core.trainer import Trainer
from grpo_edge.errors import CheckpointError, ConfigError, OutOfMemoryError
from grpo_edge import sizes
from grpo_edge.report import atomic_write_text


# steps in a row with no reward spread in any group before `train` warns (once per run)
ZERO_SPREAD_STEPS = 5


class NoSignalWatch(object):
    """Says (once) when GRPO has had no learning signal for ZERO_SPREAD_STEPS steps running: every group's
    samples got one reward, and either no step has had a spread yet (a reward the policy cannot vary) or the
    reward is below the best seen (a collapse). A policy that learned and now always earns its best reward
    has converged: no warning."""

    def __init__(self):
        self.run, self.best, self.had_spread, self.warned = 0, -float("inf"), False, False

    def update(self, metrics) -> bool:
        reward, flat = metrics["reward_mean"], metrics.get("frac_zero_std", 0.0) >= 1.0
        stuck = flat and (not self.had_spread or reward < self.best - 1e-6 * (1.0 + abs(self.best)))
        self.had_spread = self.had_spread or not flat
        self.best = max(self.best, reward)
        self.run = self.run + 1 if stuck else 0
        if self.run >= ZERO_SPREAD_STEPS and not self.warned:
            self.warned = True
            return True
        return False


def _check_model_fits(model, task):
    """A model passed in must be one the task takes (task.archs) with the task's sizes: one line, not an error
    deep in torch at the first step."""
    from grpo_edge.core.checkpoint import check_fits_task
    from grpo_edge.errors import CheckpointError
    arch, allowed = getattr(model, "arch", None), getattr(task, "archs", None)
    if allowed and arch not in allowed:
        from grpo_edge.tasks import DEFAULT_ARCH
        fits = sorted(name for name, a in DEFAULT_ARCH.items() if a == arch and name not in ("gym", "text"))
        raise ConfigError("the %s model does not fit task %s, which takes %s%s" % (
            arch or type(model).__name__, task.name, ", ".join(allowed),
            ("; pass task=%r (or another task for a %s)" % (fits[0], arch)) if fits else ""))
    try:
        check_fits_task(model, task, "the model")
    except CheckpointError as e:
        raise ConfigError(str(e).replace(": it was trained on another task", ""))


def _record_what_runs(cfg, model, task):
    """The run's config as it runs: the model passed in (its arch and sizes) and the task's name, so that
    config.yaml, checkpoints and --resume describe this run, not the defaults it replaced."""
    if hasattr(model, "config"):            # the task sets its sizes (vocab_size, obs_dim, ...): not config keys
        fixed = set(task.model_kwargs()) if hasattr(task, "model_kwargs") else set()
        cfg.model = dict(((k, v) for k, v in model.config().items() if k not in fixed and v is not None),
                         arch=model.arch)
    if isinstance(cfg.task, dict) and getattr(task, "name", None):
        cfg.task["name"] = task.name
    return cfg.to_dict()


class GRPOTrainer(Trainer):
    """GRPO on a task, with a run folder.

    model:  a grpo_edge model, or None to build the config's `model` section for the task.
    task:   a Task, a task name, or None for the config's `task.name`.
    config: a Config, a nested dict, or a path to a YAML recipe.
    grad_penalty_lambda: the seed document's keyword; overrides grpo.grad_penalty_lambda.
    """

    def __init__(self, model=None, task=None, config=None, grad_penalty_lambda: Optional[float] = None,
                 save_dir=None, device=None, resume: bool = False, progress: bool = True, overrides=None):
        import torch
        from grpo_edge.core.models import build_model, count_parameters
        from grpo_edge.tasks import get_task

        if isinstance(config, Config):
            cfg = config
        elif isinstance(config, dict):
            cfg = load_config(data=config, overrides=overrides)
        else:
            cfg = load_config(config, overrides=overrides)
        if grad_penalty_lambda is not None:
            cfg.grpo.grad_penalty_lambda = float(grad_penalty_lambda)
        if device is not None:
            cfg.training.device = device
        cfg_dict = cfg.to_dict()
        seed = cfg.training.seed
        torch.manual_seed(seed)
        # Under torchrun, rank r samples from its own task streams (grpo_edge/core/distributed.py).
        self.rank = distributed.init_from_env(resolve_device(device or cfg.training.device).type == "cuda")[0]
        if task is None or isinstance(task, str):           # a task's start-up checks may fail on one rank's data
            name = task or cfg.task["name"]
            task = distributed.on_every_rank(
                lambda: get_task(name, cfg.task, seed=distributed.shard_seed(seed, self.rank)))
        if model is None:
            kwargs = {k: v for k, v in cfg.model.items() if k != "arch"}
            kwargs.update(task.model_kwargs())
            sizes.check_before_build(cfg, task, kwargs, resolve_device(device or cfg.training.device))
            try:
                model = build_model(cfg.model["arch"], **kwargs)
            except (TypeError, ValueError) as e:
                raise ConfigError("model: %s cannot be built for task %s (%s)"
                                  % (cfg.model["arch"], task.name, str(e).splitlines()[0] if str(e) else e))
        else:
            _check_model_fits(model, task)
            cfg_dict = _record_what_runs(cfg, model, task)
        if hasattr(task, "check_model"):
            task.check_model(model)                 # e.g. a text model's max_len against the task's sequences
        self.config_obj = cfg
        self.save_dir = Path(save_dir) if save_dir else None
        self.show_progress = progress and self.rank == 0
        self.num_parameters = count_parameters(model)
        threads = cfg.training.threads or (1 if self.num_parameters < 1_000_000 else 0)
        if threads and cfg.training.device != "cuda":
            torch.set_num_threads(threads)
        self.history = []
        self.notes_shown = 0          # notes (Trainer.notes) already printed: the CLI prints them at the start
        self._tb = None
        self.curriculum = None
        self.latent_noise = None
        self.distill_stats = None
        self._grad_snapshot = None
        super().__init__(model, task, cfg_dict, device=device)
        self._small_data_from_config(cfg)
        if resume:
            self.resume()

    # ------------------------------------------------------------------ small-data features (issue 6)
    def _small_data_from_config(self, cfg):
        d, a, c = cfg.distill, cfg.augment, cfg.curriculum
        if d.teacher is not None:
            from grpo_edge.data.distill import read_prompts
            prompts = read_prompts(d.prompts_path, self.task) if d.prompts_path else None
            self.distill_from(d.teacher, prompts=prompts, ratio=d.ratio, candidates=d.candidates,
                              temperature=d.temperature, min_reward=d.min_reward, min_agreement=d.min_agreement,
                              labeled=d.labeled)
        if a.latent_noise > 0:
            self.enable_latent_noise(a.latent_noise, a.latent_layers)
        if c.metric is not None:
            self.enable_curriculum(c.metric, c.stages, c.threshold, c.window, c.new_fraction, c.max_stage_steps,
                                   c.samples)

    def enable_curriculum(self, difficulty_metric="perplexity", stages=5, threshold=0.6, window=3,
                          new_fraction=0.5, max_stage_steps=0, samples=4):
        """Sample GRPO prompts easy to hard (grpo_edge/data/curriculum.py); the stage is logged as
        curriculum_stage. Items are scored when GRPO starts (after the warm start)."""
        from dataclasses import asdict
        from grpo_edge.data.curriculum import Curriculum
        if not hasattr(self.task, "train_problems") or not hasattr(self.task, "sampler"):
            raise ConfigError("curriculum needs a text task that exposes its training items (arithmetic, "
                              "zh-en-numbers); %s does not" % self.task.name)
        self.curriculum = Curriculum(difficulty_metric, stages, threshold, window, new_fraction, max_stage_steps,
                                     samples)
        self.task.sampler = self.curriculum
        cc = self.config_obj.curriculum
        cc.metric, cc.stages, cc.threshold, cc.window = difficulty_metric, stages, threshold, window
        cc.new_fraction, cc.max_stage_steps, cc.samples = new_fraction, max_stage_steps, samples
        self.cfg["curriculum"] = asdict(cc)
        return self.curriculum

    def enable_latent_noise(self, std=0.1, layers="all"):
        """Gaussian noise (std relative to each sample's activation RMS) on hidden layers, training mode only."""
        from dataclasses import asdict
        from grpo_edge.core.models.latent import add_latent_noise
        if self.latent_noise is not None:
            self.latent_noise.remove()
        try:
            self.latent_noise = add_latent_noise(self.policy, float(std), layers)
        except ValueError as e:
            raise ConfigError("augment.latent_layers: %s" % e)
        self.config_obj.augment.latent_noise, self.config_obj.augment.latent_layers = float(std), layers
        self.cfg["augment"] = asdict(self.config_obj.augment)
        return self.latent_noise

    def distill_from(self, teacher, prompts=None, ratio=1.0, candidates=4, temperature=1.0, min_reward=1.0,
                     min_agreement=0.5, labeled=True):
        """Mix reward-filtered answers of a local teacher (checkpoint path, model or callable) into the
        task's train problems (warm start and GRPO). Returns the filter's counts (also in summary.json)."""
        from grpo_edge.data.distill import distill, mix_into
        pairs, stats = distill(self.task, teacher, prompts=prompts, ratio=ratio, candidates=candidates,
                               temperature=temperature, min_reward=min_reward, min_agreement=min_agreement,
                               seed=self.config_obj.training.seed, labeled=labeled)
        mix_into(self.task, pairs)
        self.distill_stats = stats
        return stats

    def train_step(self):
        if self.curriculum is not None and not self.curriculum.ready:
            self.curriculum.fit(self.task, self.policy, self.generator)
        m = super().train_step()
        if self.curriculum is not None:
            m.update(self.curriculum.metrics())
        return m

    def _optimizer_step(self):
        # A copy of the gradients before this step, for plot_grad_flow_every.
        every = self.config_obj.training.plot_grad_flow_every
        if every and self.save_dir and (self.step + 1) % every == 0:
            import torch
            scale = float(self.scaler.get_scale()) if self.scaler is not None else 1.0
            snap = []
            for name, p in self.policy.named_parameters():
                if p.grad is not None:
                    t = torch.zeros_like(p, requires_grad=True)
                    t.grad = p.grad.detach() / scale
                    snap.append((name, t))
            self._grad_snapshot = snap
        return super()._optimizer_step()

    def state_dict(self):
        state = super().state_dict()
        if self.curriculum is not None and self.curriculum.ready:
            state["curriculum"] = self.curriculum.state_dict()
        # what the summary of a resumed run needs from the part before: the warm start's scores, the time so far
        state["run"] = {"warm_start_eval": getattr(self, "warm_start_eval", None), "wall_seconds": self.wall_seconds()}
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        if self.curriculum is not None and "curriculum" in state:
            self.curriculum.load_state_dict(state["curriculum"])
        run = state.get("run") if isinstance(state.get("run"), dict) else {}
        if run.get("warm_start_eval"):
            self.warm_start_eval = run["warm_start_eval"]
        self._wall_before = float(run.get("wall_seconds") or 0.0)

    def wall_seconds(self):
        """Seconds of this run so far: the parts before a resume, plus the current train() call."""
        current = time.time() - self._train_start if getattr(self, "_train_start", None) else 0.0
        return getattr(self, "_wall_before", 0.0) + current

    # ------------------------------------------------------------------ run folder
    def _path(self, name):
        return self.save_dir / name if self.save_dir else None

    def save(self, name="last.pt"):
        if self.save_dir:
            state = self.state_dict()          # a collective under torchrun: every rank calls it
            if self.rank == 0:                 # one writer
                save_checkpoint(self._path(name), state)

    def init_from(self, path):
        """Start this run from another run's policy (its warm_start.pt, best.pt, ...): the weights, whether it
        was warm-started and the warm start's scores; nothing else (step 0, a fresh optimizer, this run's
        config and seed). Its architecture, model sizes, task and tokenizer must be this run's."""
        state = load_checkpoint(path, map_location="cpu")
        ours = {"arch": self.policy.arch, "task": self.task.name, "model_config": self.policy.config(),
                "tokenizer": self.task.checkpoint_meta().get("tokenizer")}
        theirs = {"arch": state.get("arch"), "task": state.get("task"), "model_config": state.get("model_config"),
                  "tokenizer": (state.get("task_meta") or {}).get("tokenizer")}
        for key in ours:
            if theirs[key] != ours[key]:
                raise CheckpointError("--init-from %s: its %s differs from this run's (%s); train with the same "
                                      "model and task settings" % (path, key.replace("_", " "),
                                                                   _differences(theirs[key], ours[key])))
        self.policy.load_state_dict(state["model"])
        if self.ref_policy is not None:           # the KL anchor is the policy we start from
            self.ref_policy.load_state_dict(state["model"])
        self.warm_started = bool(state.get("warm_started"))
        if (state.get("run") or {}).get("warm_start_eval"):
            self.warm_start_eval = state["run"]["warm_start_eval"]

    def resume(self):
        """Continue from save_dir/last.pt exactly (model, optimizer, scheduler, RNG, step).

        A config that differs from the checkpoint's: learning rate, schedule, step count and other
        run-control keys are applied (listed in self.resume_changes); architecture, algorithm, sizes, task
        and data keys are refused with a ConfigError naming the key."""
        path = self._path("last.pt")
        if path is None:
            raise ConfigError("--resume needs --save-dir (the run folder holding last.pt)")
        if not path.exists():
            raise CheckpointError("--resume: no checkpoint at %s" % path)
        # read onto the CPU: load_state_dict moves weights and optimizer state to the training device, and
        # RNG states must stay CPU tensors (a run saved on CUDA resumes on CUDA or on the CPU)
        state = load_checkpoint(path, map_location="cpu")
        if state.get("arch") != self.policy.arch or state.get("task") != self.task.name:
            raise CheckpointError("%s was trained with %s on %s, not %s on %s" % (
                path, state.get("arch"), state.get("task"), self.policy.arch, self.task.name))
        from grpo_edge.resume import apply_optimizer_settings, config_changes
        self.resume_changes = config_changes(state.get("config") or {}, self.cfg, path)
        self.load_state_dict(state)
        steps = int(self.config_obj.training.steps)
        if self.step > steps:               # config.yaml and summary.json would disagree on what the run did
            raise ConfigError("--resume: %s already did %d steps; training.steps=%d would go backwards (set "
                              "training.steps above %d to train on, or train into a new --save-dir)"
                              % (path.parent, self.step, steps, self.step))
        if self.resume_changes:
            apply_optimizer_settings(self)
        # keep only the metrics lines of the steps this checkpoint contains (a line cut by a power
        # failure or kill is dropped)
        mpath = self._path("metrics.jsonl")
        if mpath.exists():
            kept = []
            for ln in mpath.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(ln)
                except ValueError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("step", 0), int) and rec.get("step", 0) <= self.step:
                    kept.append(rec)
            if self.rank == 0:
                atomic_write_text(mpath, "".join(json.dumps(r) + "\n" for r in kept))
            self.history = kept

    def _log(self, metrics):
        self.history.append(metrics)
        if not self.save_dir or self.rank != 0:
            return
        with open(self._path("metrics.jsonl"), "a") as f:
            f.write(json.dumps(metrics) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, metrics["step"])

    # ------------------------------------------------------------------ the loop
    def train(self):
        """Warm start (text tasks), then GRPO steps with periodic evaluation and checkpoints.

        Returns the summary dict (also written to summary.json). Ctrl-C (or SIGTERM) during the GRPO steps
        lets the current step finish, saves last.pt with the state after it (weights, optimizer and RNG
        streams of the same step: --resume continues as if never stopped) and raises KeyboardInterrupt
        (self.interrupted_at = that step). A second Ctrl-C, or one during the warm start, stops at once
        and saves nothing new. kill -9 leaves the last atomically written checkpoint intact.
        """
        from grpo_edge.progress import TrainProgress

        t_cfg = self.config_obj.training
        self._open_run_folder()
        self._train_start = time.time()
        progress = TrainProgress(total=t_cfg.steps, enabled=self.show_progress,
                                 title="%s | %s | %s params" % (getattr(self.task, "display_name", self.task.name),
                                                               self.policy.arch,
                                                               "{:,}".format(self.num_parameters)))
        metric_name = self.task.metric_name
        self.interrupted_at = None
        self.stop_reason = None           # why the loop ended before training.steps (summary.json "stopped")
        self._stop_asked = False
        self._in_steps = False
        old_handlers = self._install_stop_handlers()
        try:
            with progress:
                self._say_at_start(progress)
                if t_cfg.warm_start_epochs and not self.warm_started and self.warm_start_applies:
                    self._warm_start_between_evals(progress, metric_name)
                self._in_steps = True
                signal = NoSignalWatch()
                while self.step < t_cfg.steps:
                    m = self._train_step_within_memory()
                    if signal.update(m) and self.rank == 0:
                        self._warn_no_signal()
                    done = self.step >= t_cfg.steps
                    if (t_cfg.eval_every and self.step % t_cfg.eval_every == 0) or done:
                        ev = self.evaluate()
                        m["eval_" + metric_name] = ev[metric_name]
                        if self.is_better(ev[metric_name]):
                            self.best_metric = ev[metric_name]
                            self.save("best.pt")
                        if t_cfg.target_metric is not None and ev[metric_name] >= t_cfg.target_metric:
                            done = True
                            m["reached_target"] = True
                            if self.step < t_cfg.steps:
                                self.stop_reason = (
                                    "stopped early at step %d of %d: eval %s %.4g reached training.target_metric %g"
                                    % (self.step, t_cfg.steps, metric_name, ev[metric_name], t_cfg.target_metric))
                    m["wall_time"] = self.wall_seconds()
                    if self.step % t_cfg.log_every == 0 or done:
                        self._log(m)
                    if self._grad_snapshot is not None:
                        from grpo_edge.utils import plot_grad_flow
                        if self.rank == 0:
                            plot_grad_flow(self._grad_snapshot, self._path("grad_flow_%d.png" % self.step))
                        self._grad_snapshot = None
                    if self.step % t_cfg.save_every == 0 or done:
                        self.save("last.pt")
                    progress.update(self.step, m, self.last_eval.get(metric_name))
                    if done:
                        break
                    if self._stop_asked:                 # Ctrl-C during this step: it is complete now
                        self.save("last.pt")
                        self.interrupted_at = self.step
                        raise KeyboardInterrupt
        except KeyboardInterrupt:
            if self.world_size > 1 and self.interrupted_at is None:
                self.save("last.pt")              # torchrun: every rank stops where it is (collective save)
            raise
        finally:
            self._in_steps = False
            self._restore_stop_handlers(old_handlers)
            if self._tb is not None:
                self._tb.close()
        wall = self._wall_before = self.wall_seconds()
        self._train_start = None
        return self.finish(wall)

    def _warn_no_signal(self):
        import sys
        hint = ("a larger grpo.group_size, a higher grpo.temperature or grpo.entropy_coef, a shaped reward, or "
                "grpo.algo=ppo (its critic learns from per-step rewards)" if self.task.kind == "control" else
                "a larger grpo.group_size, a higher grpo.temperature, a supervised warm start "
                "(training.warm_start_epochs) or partial-credit rewards")
        sys.stderr.write("warning: every group has had one reward for all its samples for %d steps running "
                         "(frac_zero_std 1.0): GRPO has no learning signal; try %s\n" % (ZERO_SPREAD_STEPS, hint))

    def _train_step_within_memory(self):
        """train_step, with an allocator's out-of-memory error turned into one line that says what to change."""
        try:
            return self.train_step()
        except Exception as e:  # only an allocator's out-of-memory error is translated
            if not devices.is_out_of_memory(e):
                raise
        import gc
        gc.collect()
        if self.device.type == "cuda":
            import torch
            torch.cuda.empty_cache()
        within = (" within training.max_memory %s" % self.config_obj.training.max_memory
                  if self.memory_budget else "")
        raise OutOfMemoryError(
            "step %d ran out of %s memory%s: lower training.batch_size, grpo.group_size or training.micro_batch_mb, "
            "or set training.gradient_checkpointing; last.pt holds the last saved step (continue with --resume)"
            % (self.step + 1, self.device.type.upper() if self.device.type == "cuda" else "host", within))

    def _open_run_folder(self):
        """Rank 0 writes config.yaml into the save dir (and opens TensorBoard when asked)."""
        import yaml
        if not (self.save_dir and self.rank == 0):
            return
        self.save_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self._path("config.yaml"), yaml.safe_dump(self.cfg, sort_keys=False))
        if self.config_obj.training.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError("training.tensorboard needs the 'tensorboard' extra (pip install tensorboard)")
            self._tb = SummaryWriter(str(self._path("tb")))

    def _on_stop_signal(self, signum, frame):
        if self._in_steps and not self._stop_asked and self.world_size == 1:
            self._stop_asked = True
            import sys
            sys.stderr.write("\nstopping after step %d (saving it); press Ctrl-C again to stop now without saving\n"
                             % (self.step + 1))
            return
        raise KeyboardInterrupt

    def _say_at_start(self, progress):
        """The notes the CLI has not printed yet, and where a resumed run goes on from."""
        for note in self.notes[self.notes_shown:]:
            progress.note("note: %s" % note)
        self.notes_shown = len(self.notes)
        if self.step > 0:
            progress.note("resuming from step %d of %d (%s, %.1f s of training before)" % (
                self.step, self.config_obj.training.steps, self._path("last.pt") or "the loaded state",
                getattr(self, "_wall_before", 0.0)))

    def _warm_start_between_evals(self, progress, metric_name):
        """The supervised warm start, evaluated before and after (summary.json, curves.svg's step 0)."""
        progress.note("supervised warm start: %d epochs" % self.config_obj.training.warm_start_epochs)
        before = self.evaluate()
        self.warm_start(on_epoch=lambda e, l: progress.note("warm start epoch %d loss %.4f" % (e + 1, l)))
        after = self.evaluate()
        self.warm_start_eval = {"before": before, "after": after}
        progress.note("warm start: %s %.3f -> %.3f" % (metric_name, before[metric_name], after[metric_name]))
        self.save("warm_start.pt")

    def _install_stop_handlers(self):
        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old[sig] = signal.signal(sig, self._on_stop_signal)
            except ValueError:          # not the main thread: Python's own handling stays
                pass
        return old

    def _restore_stop_handlers(self, old):
        for sig, handler in old.items():
            signal.signal(sig, handler)

    def finish(self, wall):
        metric_name = self.task.metric_name
        final = self.last_eval if self.last_eval.get("n") else self.evaluate()
        summary = {
            "task": self.task.name, "arch": self.policy.arch, "parameters": self.num_parameters,
            "metric": metric_name, "final_" + metric_name: final.get(metric_name),
            "best_" + metric_name: self.best_metric, "eval": final, "steps": self.step,
            "env_steps" if self.task.kind == "control" else "samples":
                self.env_steps if self.task.kind == "control" else self.samples,
            "wall_seconds": round(wall, 2), "seed": self.config_obj.training.seed,
            "device": str(self.device), "device_reason": self.device_reason,
            "stopped": getattr(self, "stop_reason", None) or "after all %d steps" % self.config_obj.training.steps,
        }
        summary.update((k, round(v, 1)) for k, v in devices.peak_memory(self.device).items())
        if getattr(self, "warm_start_eval", None):
            summary["warm_start"] = self.warm_start_eval
        if self.curriculum is not None and self.curriculum.ready:
            summary["curriculum"] = {"metric": self.curriculum.metric, "stage": min(self.curriculum.stage + 1,
                                     self.curriculum.stages), "mastered_at_steps": self.curriculum.advanced_at}
        if self.distill_stats is not None:
            summary["distill"] = self.distill_stats
        if self.save_dir and self.rank == 0:
            atomic_write_text(self._path("summary.json"), json.dumps(summary, indent=2))
            from grpo_edge.plots import plot_curves
            after = ((getattr(self, "warm_start_eval", None) or {}).get("after") or {}).get(metric_name)
            plot_curves(self.history, self._path("curves.svg"), title="%s / %s" % (self.task.name, self.policy.arch),
                        metric="eval_" + metric_name, start=after)
        return summary


def _short(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _differences(theirs, ours):
    """'d_model 128 vs 48, n_layer 3 vs 1' for two dicts; the two values (shortened) otherwise."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        keys = [k for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k)]
        return ", ".join("%s %s vs %s" % (k, _short(theirs.get(k), 30), _short(ours.get(k), 30)) for k in keys)
    return "%s vs %s" % (_short(theirs), _short(ours))


def install_sigterm_handler():
    """Treat SIGTERM like Ctrl-C so `kill` (not -9) also saves a checkpoint."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:      # not in the main thread
        pass
    return os.getpid()
