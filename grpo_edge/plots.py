"""Plots. The end-of-run training curves are a hand-written SVG (standard library only: importing matplotlib
and drawing the PNG cost 0.6 s of a 4.2 s 10-step CartPole command, benchmarks/curves_time.py); the debugging
plots (grad flow, bench tables) keep matplotlib with the Agg backend (works without a display), imported
only when they draw."""
import math
import os
import tempfile

PANEL_W, PANEL_H = 420, 330                  # one panel, in SVG pixels
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 62, 38    # plot-area margins inside a panel
COLOR = "#1f77b4"
MARKERS_BELOW = 30                           # points drawn as dots when a series has fewer than this


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    return _plt()


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


def _esc(text):
    """Text for an SVG element or attribute value."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _compact(v):
    """A number in at most ~6 characters: 0.0123, 812.5, 12.35k, 3.2M, 1.5e-05."""
    a = float("%.4g" % abs(v))                  # rounded first: 999999 is "1M", not "1000k"
    if a == 0:
        return "0"
    if 1e-3 <= a < 1e4:
        return "%.4g" % v
    if 1e4 <= a < 1e12:
        div, suffix = next((d, s) for d, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if a >= d)
        return "%.4g%s" % (v / div, suffix)
    mantissa, exp = ("%.2e" % v).split("e")
    return mantissa.rstrip("0").rstrip(".") + "e" + exp


def _tick_label(v, step):
    """Round tick values with the decimals their spacing needs (0.25 -> 0.2, 0.4 ...), else _compact."""
    if abs(v) < step * 1e-9:
        return "0"                                # not "-0.0" from float round-off
    decimals = max(0, -math.floor(math.log10(step)))
    if decimals <= 4 and abs(v) < 1e4:
        return "%.*f" % (decimals, v)
    return _compact(v)


def _limits(values, from_zero=False):
    """Axis range: the data's, widened 5% each side; a single value gets a range around it. from_zero (the
    evaluation metric): a non-negative series starts at 0, one within [0, 1] (a rate) spans [0, 1], so that
    0.97 -> 0.99 does not fill the panel like a rise from nothing."""
    lo, hi = min(values), max(values)
    if from_zero and lo >= 0:
        lo, hi = 0.0, (1.0 if hi <= 1.0 else hi)
    if hi == lo:
        pad = abs(lo) * 0.05 or 0.5
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def _ticks(lo, hi, n=5):
    """(step, ticks): multiples of 1, 2 or 5 x 10^k inside [lo, hi], about n of them."""
    raw = (hi - lo) / n
    if not (math.isfinite(raw) and raw > 0):
        return None, [lo, hi]
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return step, [i * step for i in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _segments(history, key):
    """[[(step, value), ...], ...]: the finite points of one series, split where a value is NaN/inf."""
    segs, cur = [], []
    for i, m in enumerate(history):
        if key not in m:
            continue
        x, y = m.get("step", i + 1), m[key]
        if _finite(x) and _finite(y):
            cur.append((x, y))
        elif cur:
            segs.append(cur)
            cur = []
    return segs + [cur] if cur else segs


def _axes(x0, y0, x1, y1, xlim, ylim):
    """Frame, light grid and tick labels of one plot area (SVG pixels x0..x1, y0..y1)."""
    out = ['<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>'
           % (x0, y0, x1 - x0, y1 - y0)]
    step, ticks = _ticks(*xlim)
    for t in ticks:
        sx = x0 + (t - xlim[0]) / (xlim[1] - xlim[0]) * (x1 - x0)
        label = _tick_label(t, step) if step else _compact(t)
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="grid"/>' % (sx, y0, sx, y1))
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>' % (sx, y1 + 14, _esc(label)))
    step, ticks = _ticks(*ylim)
    for t in ticks:
        sy = y1 - (t - ylim[0]) / (ylim[1] - ylim[0]) * (y1 - y0)
        label = _tick_label(t, step) if step else _compact(t)
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="grid"/>' % (x0, sy, x1, sy))
        out.append('<text x="%.1f" y="%.1f" text-anchor="end">%s</text>' % (x0 - 4, sy + 4, _esc(label)))
    return out


def _panel(ox, key, label, segs, from_zero=False):
    """One panel's SVG elements, left edge at ox: title, min/max, axes, the series as a path (+ dots)."""
    x0, y0, x1, y1 = ox + LEFT, TOP, ox + PANEL_W - RIGHT, PANEL_H - BOTTOM
    points = [p for s in segs for p in s]
    out = ['<g class="panel" data-key="%s" data-points="%d">' % (_esc(key), len(points)),
           '<text x="%.1f" y="34" text-anchor="middle" class="label">%s</text>' % ((x0 + x1) / 2, _esc(label)),
           '<text x="%.1f" y="%.1f" text-anchor="middle">step</text>' % ((x0 + x1) / 2, PANEL_H - 6)]
    if not points:
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle">no finite values</text>'
                   % ((x0 + x1) / 2, (y0 + y1) / 2))
        return out + ["</g>"]
    ys = [y for _, y in points]
    out.append('<text x="%.1f" y="50" text-anchor="middle">min %s, max %s</text>'
               % ((x0 + x1) / 2, _esc(_compact(min(ys))), _esc(_compact(max(ys)))))
    xlim, ylim = _limits([x for x, _ in points]), _limits(ys, from_zero)
    out += _axes(x0, y0, x1, y1, xlim, ylim)

    def xy(p):
        return (x0 + (p[0] - xlim[0]) / (xlim[1] - xlim[0]) * (x1 - x0),
                y1 - (p[1] - ylim[0]) / (ylim[1] - ylim[0]) * (y1 - y0))
    d = " ".join("M" + " L".join("%.1f %.1f" % xy(p) for p in s) for s in segs)
    out.append('<path d="%s" class="line"/>' % d)
    if len(points) < MARKERS_BELOW:
        out += ['<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (xy(p) + (COLOR,)) for p in points]
    return out + ["</g>"]


def curves2svg(history, title="", metric=None, start=None):
    """SVG text: reward, evaluation metric, loss and grad norm against step, one panel each (only the series
    present in history); None when there is nothing to plot. start: the metric's value at step 0 (the score
    after a warm start, where GRPO began), drawn as the first point of its panel."""
    metric_label = (metric or "") + (" (step 0: after the warm start)" if start is not None else "")
    panels = [("reward_mean", "rollout reward"), (metric, metric_label), ("loss", "loss"), ("grad_norm", "grad norm")]
    panels = [(k, lbl) for k, lbl in panels if k and any(k in m for m in history or ())]
    if not panels:
        return None
    w = PANEL_W * len(panels)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="11">' % (w, PANEL_H, w, PANEL_H),
           '<style>.grid{stroke:#000;stroke-opacity:.12}.label{font-size:12px}'
           '.line{fill:none;stroke:%s;stroke-width:1.5}</style>' % COLOR,
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%.1f" y="16" text-anchor="middle" font-size="14">%s</text>' % (w / 2, _esc(title))]
    for i, (key, label) in enumerate(panels):
        segs = _segments(history, key)
        if key == metric and _finite(start):
            segs = [[(0, start)] + (segs[0] if segs else [])] + segs[1:]
        out += _panel(i * PANEL_W, key, label, segs, from_zero=key == metric)
    return "\n".join(out + ["</svg>", ""])


def plot_curves(history, path, title="", metric=None, start=None):
    """Write curves2svg(...) to path (atomically, mode 0644 less umask); returns path, or None if nothing to plot."""
    svg = curves2svg(history, title, metric, start)
    if svg is None:
        return None
    from grpo_edge.report import atomic_write_text
    atomic_write_text(path, svg)
    return str(path)
