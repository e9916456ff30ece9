"""`grpo-edge train`, `grpo-edge eval`, `grpo-edge tasks`."""
import json
from pathlib import Path
from typing import List, Optional

import typer

from grpo_edge.errors import ConfigError, GrpoEdgeError


def train(
    config: Optional[str] = typer.Option(None, "--config", "-c", help="YAML recipe (a file, or a built-in: cartpole.yaml, bandit.yaml, ...). Default: the task's own recipe, else the one for its kind (control: cartpole, bandit: bandit, text: arithmetic)."),
    set_: List[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    data_path: Optional[str] = typer.Option(None, "--data-path", "--data_path", help="Your own text data: JSONL, CSV or TSV with a prompt column and a completion or answer column (task text, the default with this option; zh-en-numbers takes src/tgt pairs). docs/own_task.md."),
    save_dir: Optional[str] = typer.Option(None, "--save-dir", "--save_dir", help="Run folder (default runs/<task>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from <save-dir>/last.pt exactly (without --config: as <save-dir>/config.yaml says)."),
    init_from: Optional[str] = typer.Option(None, "--init-from", "--init_from", help="Start from another run's policy (e.g. runs/pyfix/warm_start.pt): its weights and warm start, this run's config, step 0 and a fresh optimizer."),
    force: bool = typer.Option(False, "--force", help="Start over in a --save-dir that holds another run: deletes that run's own files (last.pt, best.pt, metrics.jsonl, ...), nothing else."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (CPU runs are reproducible)."),
    device: Optional[str] = typer.Option(None, "--device", help="auto (default: CUDA for a model of 50k+ parameters when torch sees a GPU, else the CPU; the choice is printed), cpu or cuda."),
    amp: bool = typer.Option(False, "--amp", help="Mixed precision: bf16 autocast (CUDA with bf16, and the CPU), else fp16 + loss scaling (training.amp_dtype)."),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help="Memory budget, e.g. 4G for a 4 GB card (training.max_memory): refused up front if the model's training state cannot fit; caps the CUDA allocator."),
    curriculum: Optional[str] = typer.Option(None, "--curriculum", help="Curriculum difficulty metric: perplexity, length or pass_rate (curriculum.metric)."),
    latent_noise: Optional[float] = typer.Option(None, "--latent-noise", help="Training-only noise on hidden layers, relative std (augment.latent_noise)."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="Local teacher checkpoint for synthetic-data distillation (distill.teacher)."),
    mono_path: Optional[str] = typer.Option(None, "--mono-path", "--mono_path", help="Target-language text for back-translation (zh-en-numbers: task.augment + task.mono_path)."),
    online: bool = typer.Option(False, "--online", help="Online training on a device (see docs/online.md)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Train a policy with GRPO (or PPO, grpo.algo=ppo) on a built-in or your own task."""
    overrides = list(set_)
    literals = {}          # command-line paths and numbers: taken as given, never parsed as YAML
    if data_path is not None:
        if not Path(data_path).exists():
            raise ConfigError("--data-path %s does not exist (your data: a JSONL / CSV / TSV file, or a folder with "
                              "train and test files; the built-in tasks make their own data without --data-path)"
                              % data_path)
        literals["task.data_path"] = data_path
        if config is None and not any(o.startswith("task.name=") for o in overrides):
            overrides.append("task.name=text")          # your data, no task named: the text task
    if seed is not None:
        literals["training.seed"] = seed
    if device is not None:
        overrides.append("training.device=%s" % device)
    if amp:
        overrides.append("training.amp=true")
    if max_memory is not None:
        literals["training.max_memory"] = max_memory
    if curriculum is not None:
        overrides.append("curriculum.metric=%s" % curriculum)
    if latent_noise is not None:
        literals["augment.latent_noise"] = latent_noise
    if teacher is not None:
        literals["distill.teacher"] = teacher
    if mono_path is not None:
        if not Path(mono_path).exists():
            raise ConfigError("--mono-path %s does not exist" % mono_path)
        overrides.append("task.augment=true")
        literals["task.mono_path"] = mono_path
    if online:
        from grpo_edge.online.runner import run_online_cli
        return run_online_cli(config, overrides + ["%s=%s" % (k, json.dumps(v)) for k, v in literals.items()],
                              save_dir)
    from grpo_edge.training_run import GRPOTrainer, install_sigterm_handler
    if resume and config is None and save_dir is not None and (Path(save_dir) / "config.yaml").is_file():
        config = str(Path(save_dir) / "config.yaml")     # --resume continues the run as it was configured
    cfg, recipe_why = load_train_config(config, overrides, literals)
    run_dir = Path(save_dir or Path("runs") / cfg.task["name"])
    if not resume:
        check_run_folder(run_dir, force)
    install_sigterm_handler()
    existed, trainer = run_dir.exists(), None
    try:
        trainer = _new_trainer(GRPOTrainer, cfg, run_dir, resume, init_from, quiet)
        _echo_start(trainer, recipe_why)
        if resume and trainer.step >= trainer.config_obj.training.steps:
            _say_nothing_to_do(trainer, run_dir)
            return
        summary = trainer.train()
    except GrpoEdgeError:
        if not resume:
            remove_failed_start(run_dir, existed)
        raise
    except KeyboardInterrupt:
        _say_interrupted(trainer, run_dir)
        raise typer.Exit(130)
    from grpo_edge.core.distributed import is_main
    if not is_main():                   # under torchrun every rank ran the same command: rank 0 speaks for all
        return
    _say_done(trainer, summary, run_dir)


def _new_trainer(trainer_class, cfg, run_dir, resume, init_from, quiet):
    """The run's trainer: resumed from run_dir/last.pt, or started from --init-from's policy, or new."""
    if init_from and resume:
        raise ConfigError("--init-from starts a new run and --resume continues one: give one of them")
    trainer = trainer_class(config=cfg, save_dir=run_dir, resume=resume, progress=not quiet)
    if init_from:
        trainer.init_from(init_from)
        typer.echo("init from %s (%s)" % (init_from, "warm-started" if trainer.warm_started else "not warm-started"),
                   err=True)
    return trainer


def _say_done(trainer, summary, run_dir):
    """The last line: the final score, the steps (and why the run stopped early), the time, the folder."""
    metric = summary["metric"]
    early = " (%s)" % trainer.stop_reason if trainer.stop_reason else ""
    typer.echo("done: %s %s = %.4g after %d steps%s, %.1f s; run folder %s"
               % (getattr(trainer.task, "display_name", summary["task"]), metric, summary["final_" + metric],
                  summary["steps"], early, summary["wall_seconds"], run_dir))


# what `train` writes into a run folder: another run's files are never mixed with a new run's. A folder
# holds a run once one of RUN_MARKS is there (config.yaml alone: a start that failed before its first step).
RUN_FILES = ("config.yaml", "metrics.jsonl", "last.pt", "best.pt", "warm_start.pt", "summary.json", "curves.svg")
RUN_MARKS = ("metrics.jsonl", "last.pt", "best.pt", "warm_start.pt", "summary.json")


def load_train_config(config, overrides, literals):
    """(the run's config, the line naming the recipe chosen and why, or None): --config's recipe, or without
    one the task's own, else its family's or its kind's (config.choose_recipe)."""
    from grpo_edge.config import choose_recipe, load_config, parse_overrides
    if config is not None:
        return load_config(config, overrides=overrides, literals=literals), None
    task_name = parse_overrides(overrides).get("task", {}).get("name")
    recipe, why = choose_recipe(task_name if isinstance(task_name, str) else None)
    return load_config(None, overrides=overrides, literals=literals, data=recipe), why


def _say_interrupted(trainer, run_dir):
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)         # a further Ctrl-C cannot cut this message short
    last = run_dir / "last.pt"
    if trainer is not None and trainer.interrupted_at is not None:
        typer.echo("interrupted: saved %s at step %d (continue with --resume)" % (last, trainer.interrupted_at),
                   err=True)
    elif last.exists():
        typer.echo("interrupted: nothing new saved; %s holds the last completed save (continue with --resume)"
                   % last, err=True)
    else:
        typer.echo("interrupted: nothing saved yet (last.pt is written every training.save_every steps)", err=True)


def _echo_start(trainer, recipe_why=None):
    from grpo_edge.core.distributed import is_main
    if not is_main():
        return
    if recipe_why:                      # which recipe and why (no --config), once the run can start
        typer.echo(recipe_why, err=True)
    typer.echo("device: %s (%s)" % (trainer.device, trainer.device_reason), err=True)
    for note in trainer.notes:
        typer.echo("note: %s" % note, err=True)
    trainer.notes_shown = len(trainer.notes)
    for key, old, new in getattr(trainer, "resume_changes", None) or []:
        typer.echo("resume: %s %r -> %r (applied from step %d)" % (key, old, new, trainer.step + 1), err=True)


def _say_nothing_to_do(trainer, run_dir):
    """A resumed run that already did all its steps: said, nothing trained, no file of the run touched."""
    from grpo_edge.core.distributed import is_main
    if is_main():
        steps = trainer.config_obj.training.steps
        typer.echo("nothing to train: %s already did %d of %d steps (to train on: --resume --set training.steps=N "
                   "with N above %d); its files are unchanged" % (run_dir, trainer.step, steps, trainer.step))


def remove_failed_start(run_dir: Path, existed: bool) -> None:
    """A run that failed before it saved anything leaves nothing behind: its config.yaml (and the folder, when
    this run made it and it is empty). A run that saved a checkpoint or metrics keeps them."""
    import os
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:      # under torchrun the ranks share the folder: leave it
        return
    if not run_dir.is_dir() or any((run_dir / n).exists() for n in RUN_MARKS):
        return
    for name in ("config.yaml", "curves.svg"):
        if (run_dir / name).exists():
            (run_dir / name).unlink()
    if not existed and not any(run_dir.iterdir()):
        run_dir.rmdir()


def check_run_folder(run_dir: Path, force: bool) -> None:
    """A new run needs a folder without another run's files: refuse in one line, or with --force delete
    exactly those files (and the run's grad_flow_*.png), nothing else."""
    if not run_dir.is_dir():
        return
    found = [n for n in RUN_FILES if (run_dir / n).exists()]
    if not any(n in RUN_MARKS for n in found):
        return
    if not force:
        raise ConfigError("%s holds another run (%s): continue it with --resume, start over with --force (deletes "
                          "only that run's files), or choose another --save-dir" % (run_dir, ", ".join(found)))
    for path in [run_dir / n for n in found] + sorted(run_dir.glob("grad_flow_*.png")):
        path.unlink()


def eval_(
    checkpoint: str = typer.Argument(..., help="A grpo-edge checkpoint (last.pt / best.pt)."),
    n: int = typer.Option(0, "--n", min=0, help="Episodes / examples (0 = the task's default)."),
    split: str = typer.Option("test", "--split", help="test or train."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    show: int = typer.Option(0, "--show", min=0, help="Also print the first N examples: prompt / answer / "
                             "reference for text, the return and length of each episode for control."),
):
    """Evaluate a checkpoint on its task (greedy); --show N prints N examples of what the model does."""
    from grpo_edge.core.checkpoint import check_fits_task, load_policy
    from grpo_edge.tasks import task_from_state
    if n < 0:
        raise ConfigError("--n must be >= 0 (0 = the task's default), got %d" % n)
    if split not in ("test", "train"):
        raise ConfigError("--split must be test or train, got %r" % split)
    model, state = load_policy(checkpoint)
    seed = (state.get("config") or {}).get("training", {}).get("seed", 0)
    task = task_from_state(state, seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else 0)
    check_fits_task(model, task, checkpoint)
    if getattr(task, "note", None):
        typer.echo("note: %s" % task.note, err=True)
    res = task.evaluate(model, split, n)
    examples = task.examples(model, split, show) if show else None
    if show and examples is None:
        typer.echo("note: task %s shows no examples (a Task of your own may implement examples())" % task.name,
                   err=True)
    if json_out:
        typer.echo(json.dumps(res if examples is None else dict(res, examples=examples)))
        return
    typer.echo("%s on %s (%s): %s" % (state["arch"], getattr(task, "display_name", task.name), split,
                                      ", ".join("%s=%.4g" % (k, v) for k, v in res.items())))
    for row in examples or []:
        typer.echo("  " + _example_line(row))


def _example_line(row) -> str:
    """One example as `key: value` pairs; text shown with repr() so spaces and newlines are visible."""
    def show(v):
        if isinstance(v, float):
            return "%.4g" % v
        if isinstance(v, str):
            return repr(v)
        return str(v)
    return " | ".join("%s: %s" % (k, show(v)) for k, v in row.items())


def tasks(
    json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON (for scripts)."),
):
    """List the built-in tasks, their model and metric."""
    from grpo_edge.cli.listing import rows2json, rows2text
    from grpo_edge.config import builtin_recipes
    from grpo_edge.tasks import DEFAULT_ARCH, TASKS, task_class
    recipes = builtin_recipes()
    header = ("task", "kind", "model", "metric", "recipe (--config)", "description")
    rows = []
    for name in TASKS:
        try:
            cls = task_class(name)
            kind, metric, doc = cls.kind, cls.metric_name, (cls.__doc__ or "").strip().splitlines()[0]
        except GrpoEdgeError as e:
            kind, metric, doc = "?", "?", "unavailable: %s" % e
        recipe = next((r for r in recipes if r.startswith(name.replace("-", "_"))), "")
        if name == "gym":                 # an env by its id: its own recipe, else its family's (config/families.py)
            recipe = "its family's"
        rows.append((name, kind, DEFAULT_ARCH.get(name, ""), metric, recipe, doc))
    typer.echo(rows2json(header, rows) if json_out else rows2text(header, rows))


TRAIN_HELP = ("Train a policy with GRPO (or PPO, grpo.algo=ppo) on a built-in or your own task.\n\n"
              "The task is --set task.name=NAME: a built-in task (grpo-edge tasks), a gymnasium id (Pendulum-v1), "
              "your gymnasium Env class or grpo-edge Task class as module:Class, or an id your module registers "
              "as module:Id (imported from the current folder); its arguments as --set 'task.kwargs={\"size\": 8}'. "
              "Your text data: --data-path FILE (task text), rewards as --set 'task.rewards={\"my_rewards:fn\": 1.0}' "
              "in TRL's form fn(prompts, completions, **columns). docs/own_task.md says what a Task implements, "
              "the data format and the reward signature.")


def register(app):
    app.command("train", help=TRAIN_HELP)(train)
    app.command("eval")(eval_)
    app.command("tasks")(tasks)
