"""One quality gate for every deploy (issue 38): the artifact is measured against the fp32 model on held-out
inputs, and a deploy whose artifact falls below the threshold exits non-zero.

    g = gate.decide("decision agreement", 0.715, 0.99, n=1000, on="task states (seed 4242)",
                    tried=[{"form": "int8", "value": 0.715}, {"form": "16x8", "error": "..."}])
    report.gate = g            # the console's gate line, the top of report.md and README.md
    gate.enforce(report)       # after the folder is written: GateError (exit 3) when it failed

What is measured (each target computes it; this module judges and words it):
- a discrete policy or a classifier: decision agreement, the share of inputs whose argmax equals fp32's;
- a continuous policy: action agreement, the share of inputs whose every action is within 1% of its range of
  fp32's action; with its task, also the return retention (below);
- a user's ONNX model: argmax agreement when its output has several columns per sample, else output
  agreement (within 1% of the fp32 output's range).
The threshold is --min-agreement (default 0.99; --min-retention for the return). A figure below it names
itself, the threshold, each form tried and why it failed, and the flag that accepts it anyway.
"""
from grpo_edge.errors import GrpoEdgeError, TargetError

MIN_AGREEMENT = 0.99
MIN_RETENTION = 0.99
NOISE_Z = 2                 # a return shortfall within 2 standard errors of the mean difference is noise
MIN_HELD_OUT = 100          # fewer held-out inputs cannot tell 0.99 from 1.0 (one flip is 1%)
FLAGS = {"agreement": "--min-agreement", "retention": "--min-retention"}


class GateError(GrpoEdgeError):
    """The deploy's artifact is below its quality gate (the folder is written, for inspection); .report is
    the deploy's report."""
    exit_code = 3

    def __init__(self, line, report=None):
        super().__init__(line)
        self.report = report


def check_threshold(name: str, value) -> float:
    """A threshold option as a float in [0, 1], else one line naming it."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GrpoEdgeError("%s must be a number in 0..1, got %r" % (name, value))
    if not 0.0 <= v <= 1.0:
        raise GrpoEdgeError("%s must be in 0..1, got %g" % (name, v))
    return v


def hold_out(n: int, threshold: float, source) -> tuple:
    """Which of n calibration inputs calibrate and which are held out to measure the gate on -> (calibrate
    indices, held-out indices), both sorted: max(MIN_HELD_OUT, n // 5) held out, a seeded draw. Fewer than
    2 * MIN_HELD_OUT inputs is one line naming the set, unless the gate is 0 (then all calibrate and the
    figure is measured on them: held-out is None)."""
    import numpy as np
    if n < 2 * MIN_HELD_OUT:
        if threshold <= 0:
            return np.arange(n), None
        raise TargetError("calibration set %s has %d inputs: the quality gate holds %d of them out to measure the "
                          "model on and calibrates on the rest, so it needs at least %d (give more, or "
                          "--min-agreement 0 to deploy unmeasured)" % (source, n, MIN_HELD_OUT, 2 * MIN_HELD_OUT))
    order = np.random.default_rng(0).permutation(n)
    k = max(MIN_HELD_OUT, n // 5)
    return np.sort(order[k:]), np.sort(order[:k])


def with_held_out(n: int) -> int:
    """How many inputs to draw from a task so that (at least) n of them calibrate after hold_out."""
    m = max(n + MIN_HELD_OUT, 2 * MIN_HELD_OUT)
    while m - max(MIN_HELD_OUT, m // 5) < n:
        m += 1
    return m


def return_retention(metric: float, fp32: float, higher_is_better: bool = True) -> float:
    """How much of the fp32 return the artifact keeps: 1 - shortfall / |fp32| (1.0 when it does as well or
    better). A ratio of returns misleads when they are negative (Pendulum: -160 / -150 > 1)."""
    short = (fp32 - metric) if higher_is_better else (metric - fp32)
    if short <= 0:
        return 1.0
    return max(0.0, 1.0 - short / abs(fp32)) if fp32 != 0 else 0.0


def retention_noise(fp32, integer, z: float = NOISE_Z):
    """What the return retention cannot resolve: z standard errors of the difference of two mean returns
    ({"mean", "std", "n"} each, per-episode std), relative to |fp32 mean|; None without a spread."""
    import math
    if not fp32 or not integer or fp32.get("std") is None or integer.get("std") is None or not fp32.get("n"):
        return None
    if fp32["mean"] == 0:
        return None
    se = math.sqrt(fp32["std"] ** 2 / fp32["n"] + integer["std"] ** 2 / max(integer["n"] or fp32["n"], 1))
    return z * se / abs(fp32["mean"])


def decide(figure: str, value, threshold: float, n: int, on: str, tried=None, chosen: str = "",
           retention=None, min_retention: float = MIN_RETENTION, noise=None) -> dict:
    """The gate of one deploy, as data: the figure, its threshold, what it was measured on, the forms tried,
    passed or not, and the one line that says so. noise (retention_noise): a return shortfall within it is
    the episodes' spread, not a loss; the retention threshold is then min_retention less the noise."""
    fails = []
    if value is not None and value < threshold:
        fails.append(("agreement", "%s %.4f < %g" % (figure, value, threshold)))
    floor = min_retention if noise is None else min(min_retention, 1.0 - noise)
    if retention is not None and retention < floor:
        fails.append(("retention", "return retention %.4f < %.4g" % (retention, floor)
                      + (" (%g less %d standard errors of the episodes' returns)" % (min_retention, NOISE_Z)
                         if floor < min_retention else "")))
    g = {"figure": figure, "value": value, "threshold": threshold, "n": n, "measured_on": on,
         "chosen": chosen, "tried": list(tried or []), "retention": retention,
         "min_retention": min_retention if retention is not None else None, "retention_noise": noise,
         "passed": not fails, "flags": [FLAGS[k] for k, _ in fails]}
    g["line"] = _line(g, [t for _, t in fails])
    g["banner"] = banner(g)
    return g


def _line(g, fails) -> str:
    what = "%s %s" % (g["figure"], "%.4f" % g["value"] if g["value"] is not None else "not measured")
    if g["retention"] is not None:
        what += ", return retention %.4f" % g["retention"]
        if g.get("retention_noise") is not None:
            what += " (+-%.4f: %d standard errors of the episodes' returns)" % (g["retention_noise"], NOISE_Z)
    on = "on %d %s" % (g["n"], g["measured_on"]) if g["n"] else "on no " + g["measured_on"]
    if g["value"] is None and not fails:
        return "not measured (%s)" % on
    if not fails:
        return "%s (%s) >= %g: passed%s" % (what, on, g["threshold"], " (%s)" % g["chosen"] if g["chosen"] else "")
    tried = "; ".join(_tried(t) for t in g["tried"]) or "nothing else to try"
    accept = " and ".join("%s %s" % (f, _floor(g, f)) for f in g["flags"])
    return ("below the quality gate: %s (%s); tried: %s; to deploy it anyway: %s"
            % (", ".join(fails), on, tried, accept))


def _floor(g, flag) -> str:
    """The threshold that would accept this artifact (rounded down to 2 decimals)."""
    import math
    v = g["value"] if flag == "--min-agreement" else g["retention"]
    return "%.2f" % (math.floor(v * 100) / 100.0)


def _tried(t) -> str:
    if "note" in t:
        return "%s %s" % (t["form"], t["note"])
    if "error" in t:
        import re
        lines = [ln.strip() for ln in t["error"].splitlines() if ln.strip()]
        why = "; ".join(lines[1:]) if len(lines) > 1 else lines[0] if lines else "?"
        why = re.sub(r"^\d+ ops? cannot be compiled for the ESP32[^:]*: ", "", re.sub(r" \(it compiles [^)]*\)", "", why))
        return "%s failed (%s)" % (t["form"], why[:200])
    return "%s %.4f" % (t["form"], t["value"]) if t.get("value") is not None else "%s (not measured)" % t["form"]


def banner(g) -> str:
    """The paragraph that opens report.md and README.md when the gate failed ('' when it passed)."""
    if g is None or g["passed"]:
        return ""
    return ("> **Not deployable as it is.** This artifact is %s. `grpo-edge deploy` "
            "exited with code %d; the folder is written for inspection only.\n" % (g["line"], GateError.exit_code))


def enforce(report) -> None:
    """After the folder is written: a failed gate is a GateError (exit 3) carrying its one line."""
    g = getattr(report, "gate", None)
    if g is not None and not g["passed"]:
        raise GateError(g["line"], report)
