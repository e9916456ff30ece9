"""Training-curve plots (matplotlib, Agg backend: works without a display)."""
import os
import tempfile


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure_atomic(fig, path):
    path = str(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        from grpo_edge.report import readable_mode
        os.chmod(tmp, readable_mode())            # mkstemp makes 0600 files
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _figure(width, height):
    """A bare Agg figure: matplotlib.figure without pyplot (importing pyplot and its backend machinery
    is about half of the plot's cost at the end of a short run)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def plot_curves(history, path, title="", metric=None):
    """reward, evaluation metric, loss / KL and grad norm against step, one panel each."""
    if not history:
        return None
    steps = [m["step"] for m in history]
    panels = [("reward_mean", "rollout reward"), (metric, metric or ""), ("loss", "loss"), ("grad_norm", "grad norm")]
    panels = [(k, lbl) for k, lbl in panels if k and any(k in m for m in history)]
    fig = _figure(4.2 * len(panels), 3.2)
    # fixed margins instead of bbox_inches="tight" (which draws the figure twice)
    fig.subplots_adjust(left=0.35 / len(panels), right=1 - 0.1 / len(panels), bottom=0.16, top=0.82, wspace=0.3)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (key, label) in zip(axes, panels):
        xs = [s for s, m in zip(steps, history) if key in m]
        ys = [m[key] for m in history if key in m]
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3)
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    path = str(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return path
