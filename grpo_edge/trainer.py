"""GRPOTrainer: the core Trainer plus a run folder, logging, checkpoints, progress bar and plots.

    from grpo_edge import GRPOTrainer
    trainer = GRPOTrainer(config="configs/cartpole.yaml", save_dir="runs/cartpole")
    trainer.train()
    trainer.evaluate()

The run folder holds config.yaml (resolved), metrics.jsonl (one line per step), last.pt, best.pt
(by evaluation metric), curves.png and summary.json.
"""
import json
import os
import signal
import time
from pathlib import Path
from typing import Optional

from grpo_edge.config import Config, load_config
from grpo_edge.core.checkpoint import load_checkpoint, save_checkpoint
from grpo_edge.core.trainer import Trainer
from grpo_edge.errors import CheckpointError, ConfigError
from grpo_edge.report import atomic_write_text


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
        if task is None or isinstance(task, str):
            task = get_task(task or cfg.task["name"], cfg.task, seed=seed)
        if model is None:
            kwargs = {k: v for k, v in cfg.model.items() if k != "arch"}
            kwargs.update(task.model_kwargs())
            model = build_model(cfg.model["arch"], **kwargs)
        self.config_obj = cfg
        self.save_dir = Path(save_dir) if save_dir else None
        self.show_progress = progress
        self.num_parameters = count_parameters(model)
        threads = cfg.training.threads or (1 if self.num_parameters < 1_000_000 else 0)
        if threads and cfg.training.device != "cuda":
            torch.set_num_threads(threads)
        self.history = []
        self._tb = None
        super().__init__(model, task, cfg_dict, device=device)
        if resume:
            self.resume()

    # ------------------------------------------------------------------ run folder
    def _path(self, name):
        return self.save_dir / name if self.save_dir else None

    def save(self, name="last.pt"):
        if self.save_dir:
            save_checkpoint(self._path(name), self.state_dict())

    def resume(self):
        """Continue from save_dir/last.pt exactly (model, optimizer, scheduler, RNG, step)."""
        path = self._path("last.pt")
        if path is None:
            raise ConfigError("--resume needs --save-dir (the run folder holding last.pt)")
        if not path.exists():
            raise CheckpointError("--resume: no checkpoint at %s" % path)
        state = load_checkpoint(path, map_location=self.device)
        if state.get("arch") != self.policy.arch or state.get("task") != self.task.name:
            raise CheckpointError("%s was trained with %s on %s, not %s on %s" % (
                path, state.get("arch"), state.get("task"), self.policy.arch, self.task.name))
        self.load_state_dict(state)
        # keep only the metrics lines of the steps this checkpoint contains
        mpath = self._path("metrics.jsonl")
        if mpath.exists():
            kept = [ln for ln in mpath.read_text().splitlines()
                    if ln.strip() and json.loads(ln).get("step", 0) <= self.step]
            atomic_write_text(mpath, "".join(ln + "\n" for ln in kept))
            self.history = [json.loads(ln) for ln in kept]

    def _log(self, metrics):
        self.history.append(metrics)
        if not self.save_dir:
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

        Returns the summary dict (also written to summary.json). Ctrl-C saves last.pt and re-raises
        KeyboardInterrupt; kill -9 leaves the last atomically written checkpoint intact.
        """
        import yaml
        from grpo_edge.progress import TrainProgress

        t_cfg = self.config_obj.training
        if self.save_dir:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self._path("config.yaml"), yaml.safe_dump(self.cfg, sort_keys=False))
            if t_cfg.tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError:
                    raise ConfigError("training.tensorboard needs the 'tensorboard' extra (pip install tensorboard)")
                self._tb = SummaryWriter(str(self._path("tb")))
        start = time.time()
        progress = TrainProgress(total=t_cfg.steps, enabled=self.show_progress,
                                 title="%s | %s | %s params" % (self.task.name, self.policy.arch,
                                                               "{:,}".format(self.num_parameters)))
        metric_name = self.task.metric_name
        try:
            with progress:
                if t_cfg.warm_start_epochs and not self.warm_started:
                    progress.note("supervised warm start: %d epochs" % t_cfg.warm_start_epochs)
                    before = self.evaluate()
                    self.warm_start(on_epoch=lambda e, l: progress.note("warm start epoch %d loss %.4f" % (e + 1, l)))
                    after = self.evaluate()
                    self.warm_start_eval = {"before": before, "after": after}
                    progress.note("warm start: %s %.3f -> %.3f" % (metric_name, before[metric_name],
                                                                    after[metric_name]))
                    self.save("warm_start.pt")
                while self.step < t_cfg.steps:
                    m = self.train_step()
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
                    m["wall_time"] = time.time() - start
                    if self.step % t_cfg.log_every == 0 or done:
                        self._log(m)
                    if t_cfg.plot_grad_flow_every and self.step % t_cfg.plot_grad_flow_every == 0 and self.save_dir:
                        from grpo_edge.utils import plot_grad_flow
                        plot_grad_flow(self.policy.named_parameters(), self._path("grad_flow_%d.png" % self.step))
                    if self.step % t_cfg.save_every == 0 or done:
                        self.save("last.pt")
                    progress.update(self.step, m, self.last_eval.get(metric_name))
                    if done:
                        break
        except KeyboardInterrupt:
            self.save("last.pt")
            raise
        finally:
            if self._tb is not None:
                self._tb.close()
        return self.finish(time.time() - start)

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
        }
        if getattr(self, "warm_start_eval", None):
            summary["warm_start"] = self.warm_start_eval
        if self.save_dir:
            atomic_write_text(self._path("summary.json"), json.dumps(summary, indent=2))
            from grpo_edge.plots import plot_curves
            plot_curves(self.history, self._path("curves.png"), title="%s / %s" % (self.task.name, self.policy.arch),
                        metric="eval_" + metric_name)
        return summary


def install_sigterm_handler():
    """Treat SIGTERM like Ctrl-C so `kill` (not -9) also saves a checkpoint."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:      # not in the main thread
        pass
    return os.getpid()
