"""Markdown for benchmarks/small_data.py's results: the "Small-data features (issue 6)" section of docs/results.md.

The section sits between two HTML comment markers, so other sections of the file are left as they are.
"""
import statistics


def _mean_sd(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _fmt(m, sd, pct=False, digits=3):
    if m is None:
        return "n/a"
    if pct:
        return "%.1f%% +- %.1f" % (100 * m, 100 * sd)
    return "%.*f +- %.*f" % (digits, m, digits, sd)


def _verdict(off, on, higher_is_better=True):
    """'helps' / 'hurts' when every seed moves the same way and the mean change exceeds the seeds' spread."""
    diffs = [(b - a) * (1 if higher_is_better else -1) for a, b in zip(off, on) if a is not None and b is not None]
    if not diffs:
        return "no result"
    m = statistics.mean(diffs)
    sd = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
    if all(d > 0 for d in diffs) and m > sd:
        return "helps"
    if all(d < 0 for d in diffs) and -m > sd:
        return "hurts"
    return "no clear effect"


def _by(runs, key, value):
    return [r for r in runs if r[key] == value]


def curriculum_md(res, summary):
    runs, target, steps = res["runs"], res["target"], res["steps"]
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    seeds = sorted(set(r["seed"] for r in runs))
    lines = ["### Curriculum (arithmetic): GRPO steps to exact match >= %.2f" % target, "",
             "| arm | " + " | ".join("seed %d" % s for s in seeds) + " | reached | mean steps (reached) | final exact match "
             "| groups without signal |",
             "|---|" + "---|" * len(seeds) + "---|---|---|---|"]
    off = [r["steps_to_target"] for r in _by(runs, "arm", "off")]
    for arm in arms:
        rs = sorted(_by(runs, "arm", arm), key=lambda r: r["seed"])
        hits = [r["steps_to_target"] for r in rs]
        reached = [h for h in hits if h is not None]
        m, sd = _mean_sd([r["final"] for r in rs])
        zs = [r["frac_zero_std"] for r in rs if "frac_zero_std" in r]
        lines.append("| %s | %s | %d/%d | %s | %s | %s |" % (
            arm, " | ".join(str(h) if h is not None else ">%d" % steps for h in hits), len(reached), len(hits),
            "%.0f" % statistics.mean(reached) if reached else "n/a", _fmt(m, sd),
            "%.0f%%" % (100 * statistics.mean(zs)) if zs else "n/a"))
        if arm != "off":
            # a run that never reached the target counts as steps + 10 (censored) in the comparison
            cen = lambda xs: [x if x is not None else steps + 10 for x in xs]  # noqa: E731
            o, n = statistics.mean(cen(off)), statistics.mean(cen(hits))
            summary.append(("Curriculum (%s)" % arm, "arithmetic", "GRPO steps to %.2f exact match" % target,
                            "%.0f" % o, "%.0f" % n, "%+.0f%% speed" % (100 * (o / n - 1)), "+22% convergence speed",
                            _verdict(cen(off), cen(hits), higher_is_better=False)))
    lines += ["", "In the summary table a run that never reached the target counts as %d steps." % (steps + 10)]
    mastered = ["%s seed %d: %s" % (r["arm"], r["seed"], r["mastered_at"]) for r in runs if r.get("mastered_at")]
    lines += ["", "Steps at which each stage was mastered: " + "; ".join(mastered) + "." if mastered else ""]
    return lines


def latent_md(res, summary):
    runs = res["runs"]
    noises = sorted(set(r["noise"] for r in runs))
    lines = ["### Latent noise (digits, small train split): held-out accuracy after %d steps" % res["steps"], "",
             "| latent_noise | test accuracy (final) | best during training | train accuracy | gap |", "|---|---|---|---|---|"]
    off = [r["final"] for r in sorted(_by(runs, "noise", 0.0), key=lambda r: r["seed"])]
    for n in noises:
        rs = sorted(_by(runs, "noise", n), key=lambda r: r["seed"])
        fm, fsd = _mean_sd([r["final"] for r in rs])
        bm, bsd = _mean_sd([r["best"] for r in rs])
        tm, tsd = _mean_sd([r["train_acc"] for r in rs])
        lines.append("| %g | %s | %s | %s | %.1f pts |" % (n, _fmt(fm, fsd, True), _fmt(bm, bsd, True),
                                                         _fmt(tm, tsd, True), 100 * (tm - fm)))
        if n > 0:
            on = [r["final"] for r in rs]
            summary.append(("Latent noise %g" % n, "digits", "held-out accuracy", _fmt(*_mean_sd(off), pct=True),
                            _fmt(*_mean_sd(on), pct=True), "%+.1f pts" % (100 * (statistics.mean(on) - statistics.mean(off))),
                            "+15% generalization", _verdict(off, on)))
    return lines


def distill_md(res, summary):
    runs = res["runs"]
    teachers = ", ".join("%s %.1f%% (%d epochs, %.0f s)" % (n, 100 * t["exact_match"], t["epochs"], t["train_s"])
                         for n, t in res["teachers"].items())
    lines = ["### Synthetic-data distillation (arithmetic, %d labeled problems)" % res["labeled"], "",
             "Teachers' own held-out exact match: %s." % teachers, "",
             "| arm | seed | train items | epochs | synthetic labels correct | exact match after warm start | after GRPO |",
             "|---|---|---|---|---|---|---|"]
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    for arm in arms:
        for r in sorted(_by(runs, "arm", arm), key=lambda r: r["seed"]):
            acc = r.get("synthetic_label_accuracy")
            lines.append("| %s | %d | %d | %d | %s | %.1f%% | %.1f%% |" % (
                arm, r["seed"], r["items"], r["epochs"], "-" if acc is None else "%.1f%%" % (100 * acc),
                100 * r["after_warm_start"], 100 * r["final"]))
    off = [r["final"] for r in sorted(_by(runs, "arm", "off"), key=lambda r: r["seed"])]
    for arm in arms[1:]:
        on = [r["final"] for r in sorted(_by(runs, "arm", arm), key=lambda r: r["seed"])]
        summary.append(("Distillation (%s, ratio %g)" % (arm, res["ratio"]), "arithmetic", "held-out exact match",
                        _fmt(*_mean_sd(off), pct=True), _fmt(*_mean_sd(on), pct=True),
                        "%+.1f pts" % (100 * (statistics.mean(on) - statistics.mean(off))), "+18% accuracy",
                        _verdict(off, on)))
    return lines


def backtrans_md(res, summary):
    runs = res["runs"]
    lines = ["### Back-translation (zh-en-numbers, 300 real pairs)", "",
             "| arm | seed | synthetic pairs | epochs | exact match | chrF | reverse model + data (s) |", "|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["arm"] != "off", r["seed"])):
        lines.append("| %s | %d | %d | %d | %.1f%% | %.3f | %.0f |" % (r["arm"], r["seed"], r["synthetic"], r["epochs"],
                                                                     100 * r["exact_match"], r["chrf"], r["bt_s"]))
    for metric, name in (("exact_match", "held-out exact match"), ("chrf", "held-out chrF")):
        off = [r[metric] for r in sorted(_by(runs, "arm", "off"), key=lambda r: r["seed"])]
        on = [r[metric] for r in sorted(_by(runs, "arm", "on"), key=lambda r: r["seed"])]
        pct = metric == "exact_match"
        summary.append(("Back-translation", "zh-en-numbers", name, _fmt(*_mean_sd(off), pct=pct),
                        _fmt(*_mean_sd(on), pct=pct), ("%+.1f pts" % (100 * (statistics.mean(on) - statistics.mean(off))))
                        if pct else "%+.3f" % (statistics.mean(on) - statistics.mean(off)), "(none given)", _verdict(off, on)))
    return lines


def memory_md(res, summary, extra=None):
    rows = res["rows"]
    base = rows[0]
    keep = ("gradient checkpointing, interval 2", "AMP (bf16 autocast on CPU)", "checkpointing 2 + AMP")
    lines = ["### Memory and step time (micro-gpt GRPO, batch 32 x G 8, 64 generated tokens)", "",
             "| config | peak RSS above step start (MB) | vs baseline | process peak RSS (MB) | step s | rollout s | update s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %.0f | %+.0f%% | %.0f | %.1f | %.1f | %.1f |" % (
            r["config"], r["peak_above_start_mb"], 100 * (r["peak_above_start_mb"] / base["peak_above_start_mb"] - 1),
            r["peak_rss_mb"], r["step_s"], r["rollout_s"], r["update_s"]))
    for r in (extra or {}).get("rows", []):
        lines.append("| %s | %.0f | | %.0f | %.1f | %.1f | %.1f |" % (
            r["config"], r["peak_above_start_mb"], r["peak_rss_mb"], r["step_s"], r["rollout_s"], r["update_s"]))
    for r in [r for r in rows[1:] if r["config"] in keep]:
        summary.append((r["config"], "micro-gpt GRPO", "peak memory of a step / step time",
                        "%.0f MB / %.1f s" % (base["peak_above_start_mb"], base["step_s"]),
                        "%.0f MB / %.1f s" % (r["peak_above_start_mb"], r["step_s"]),
                        "%+.0f%% / %+.0f%%" % (100 * (r["peak_above_start_mb"] / base["peak_above_start_mb"] - 1),
                                              100 * (r["step_s"] / base["step_s"] - 1)),
                        "< 8 GB; 4 GB with checkpointing + AMP + shorter sequences", "-"))
    return lines


def _verdicts(summary, prefix):
    return sorted(set(row[-1] for row in summary if row[0].startswith(prefix)))


def notes(results, summary):
    """The 'what this means / defaults' bullets, worded from the measured verdicts."""
    out = ["What this means, and the defaults:", ""]
    if "curriculum" in results:
        runs = results["curriculum"]["runs"]
        zs = dict((arm, statistics.mean(r["frac_zero_std"] for r in _by(runs, "arm", arm)))
                  for arm in dict.fromkeys(r["arm"] for r in runs) if all("frac_zero_std" in r for r in runs))
        why = ""
        if zs and all(v >= zs["off"] for k, v in zs.items() if k != "off"):
            why = (" GRPO learns only from groups whose samples disagree; easy-first sampling raises the share of "
                   "groups without signal (%s), so each batch teaches less." %
                   ", ".join("%s %.0f%%" % (k, 100 * v) for k, v in zs.items()))
        out.append("- Curriculum: %s here (verdicts: %s). Off by default (`curriculum.metric: null`).%s"
                   % ("no speed-up" if "helps" not in _verdicts(summary, "Curriculum") else "mixed",
                      ", ".join(_verdicts(summary, "Curriculum")), why))
    if "latent" in results:
        v = _verdicts(summary, "Latent")
        runs = results["latent"]["runs"]
        diff = 100 * (statistics.mean(r["final"] for r in runs if r["noise"] > 0)
                      - statistics.mean(r["final"] for r in runs if r["noise"] == 0))
        out.append("- Latent noise: %s on digits' small split (%d seeds), %+.1f points of held-out accuracy where the "
                   "seed document claims +15%%. Off by default (`augment.latent_noise: 0`): measured on one task only; "
                   "try 0.1 on small image datasets and compare held-out accuracy."
                   % ("/".join(v), len(set(r["seed"] for r in runs)), diff))
    if "distill" in results:
        t = results["distill"]["teachers"]
        out.append("- Distillation: the synthetic labels are as right as the teacher (%s correct), and the student "
                   "already learns ~75-80%% from 200 labeled problems, so teachers no better than that add label "
                   "noise (verdicts: %s). It needs a teacher clearly better than the student; off by default (no "
                   "teacher)." % (", ".join("%s %.0f%%" % (n, 100 * x["exact_match"]) for n, x in t.items()),
                                  ", ".join(_verdicts(summary, "Distillation"))))
    if "backtrans" in results:
        out.append("- Back-translation: %s. Off by default (it needs `mono_path`)." % ", ".join(_verdicts(summary, "Back")))
    if "memory" in results:
        rows = dict((r["config"], r) for r in results["memory"]["rows"])
        b = rows["fp32 (baseline)"]
        pct = lambda k: 100 * (1 - rows[k]["peak_above_start_mb"] / b["peak_above_start_mb"])  # noqa: E731
        out.append("- Memory: checkpointing every 2nd block cut a step's activation memory by %.0f%% (every block: "
                   "%.0f%%), minibatches of 64 with 4-step accumulation by %.0f%%, half the length by %.0f%%, at a "
                   "small or no time cost. AMP here is bf16 autocast on a CPU without bf16 units: %.0f%% less memory "
                   "but %.1fx the step time, so keep `--amp` for CUDA (fp16 + loss scaling), where it was not "
                   "measured (no GPU here). All stay off by default: these models fit easily, and the seed's "
                   "8 GB / 4 GB GPU figures cannot be checked on this machine." % (
                       pct("gradient checkpointing, interval 2"), pct("gradient checkpointing, interval 1"),
                       pct("minibatch 64 x 4 accumulation"), pct("length 32 instead of 64"),
                       pct("AMP (bf16 autocast on CPU)"), rows["AMP (bf16 autocast on CPU)"]["step_s"] / b["step_s"]))
    return out + [""]


def write_report(results, setup, doc, start, end, machine):
    summary = []
    parts = []
    for name, fn in (("curriculum", curriculum_md), ("latent", latent_md), ("distill", distill_md),
                     ("backtrans", backtrans_md), ("memory", memory_md)):
        if name in results:
            out = fn(results[name], summary, results.get("memory_seed")) if name == "memory" else fn(results[name], summary)
            parts += out + ["", "Setup: " + setup[name] + ".", ""]
    head = ["## Small-data features (issue 6)", "",
            "Measured on %s, no GPU, on a machine shared with other jobs (times are upper bounds). "
            "Command: `.venv/bin/python benchmarks/small_data.py` (results in benchmarks/results/small_data.json). "
            "Mean +- standard deviation over seeds; 'verdict' is 'helps' / 'hurts' only when every seed moves the "
            "same way and the mean change exceeds the spread of the per-seed changes." % machine, "",
            "| feature | task | metric | off | on | change | seed document's claim | verdict |",
            "|---|---|---|---|---|---|---|---|"]
    head += ["| %s |" % " | ".join(row) for row in summary] + [""] + notes(results, summary)
    body = "\n".join([start] + head + [""] + parts + [end]) + "\n"
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Results\n\n"
    if start in text and end in text:
        text = text[:text.index(start)] + body.rstrip("\n") + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + body
    doc.write_text(text, encoding="utf-8")
