"""A rich progress bar for training: step, reward, KL, loss, steps/s and the last evaluation.

When stderr is not a terminal (a log file, a pipe, CI) there is no bar: each update is one whole
plain line, never wrapped or cut, flushed at once. enabled=False (`--quiet`): no bar and no step lines;
notes (warm start, interruptions) still print.
"""
import sys


def _line(text):
    sys.stderr.write(str(text) + "\n")
    sys.stderr.flush()


class TrainProgress:
    def __init__(self, total, enabled=True, title="training"):
        self.total = total
        self.enabled = enabled and sys.stderr.isatty() or enabled == "force"
        self.quiet = not enabled
        self.title = title
        self._progress = None
        self._task = None
        self._console = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            self._console = Console(stderr=True)
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[stats]}"),
                                      console=self._console, transient=False)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.title, total=self.total, stats="")
        elif not self.quiet:
            _line(self.title)
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False

    def note(self, text):
        if self._progress is not None:
            self._progress.console.print(text, markup=False)
        else:
            _line(text)

    def update(self, step, m, last_eval):
        parts = [(k[len("rewards/"):-len("/mean")], v) for k, v in sorted(m.items())
                 if k.startswith("rewards/") and k.endswith("/mean") and v is not None]
        if len(parts) == 1 and abs(parts[0][1] - m.get("reward_mean", 0.0)) < 1e-9:
            each = " (%s)" % parts[0][0] if parts[0][0] != "reward" else ""   # one reward, weight 1: its name
        else:                                       # several, or one weighted: each one's mean
            each = " (%s)" % ", ".join("%s %.3f" % kv for kv in parts[:4]) if parts else ""
        stats = "reward %.3f%s | loss %.3g | kl %.3g | %.1f steps/s" % (
            m.get("reward_mean", 0.0), each, m.get("loss", 0.0), m.get("kl", 0.0), m.get("steps_per_s", 0.0))
        if last_eval is not None:
            stats += " | eval %.3f" % last_eval
        if self._progress is not None:
            self._progress.update(self._task, completed=step, stats=stats)
        elif not self.quiet and (step == self.total or step % max(1, self.total // 20) == 0
                                 or "eval_" in "".join(m)):
            _line("step %d/%d  %s" % (step, self.total, stats))
