"""The end-of-run curves as SVG (grpo_edge/plots.py): well-formed, one panel per present series, values
placed monotonically, NaN/inf skipped, degenerate series drawn, text escaped, atomic 0644 file, and no
matplotlib import on the way."""
import json
import os
import re
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET

from grpo_edge.plots import _compact, _ticks, curves2svg, plot_curves
from grpo_edge.report import readable_mode

NS = {"s": "http://www.w3.org/2000/svg"}


def _history(n, **series):
    """n metric lines, step 1..n; series: key -> function of i (or a list)."""
    out = []
    for i in range(n):
        m = {"step": i + 1}
        for k, f in series.items():
            v = f[i] if isinstance(f, list) else f(i)
            if v is not None:
                m[k] = v
        out.append(m)
    return out


def _panels(svg_text):
    root = ET.fromstring(svg_text)                   # raises on malformed XML
    return {g.get("data-key"): g for g in root.iter("{%s}g" % NS["s"]) if g.get("class") == "panel"}


def _path_points(panel):
    """[(x, y), ...] of the series path, all segments in order."""
    d = panel.find("s:path", NS).get("d")
    nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    return list(zip(nums[0::2], nums[1::2]))


def test_one_panel_per_present_series_with_all_points():
    h = _history(12, reward_mean=lambda i: 10.0 * i, loss=lambda i: 1.0 / (i + 1), grad_norm=lambda i: 0.5)
    h[3]["eval_return"] = 40.0
    h[7]["eval_return"] = 90.0
    panels = _panels(curves2svg(h, "t", metric="eval_return"))
    assert list(panels) == ["reward_mean", "eval_return", "loss", "grad_norm"]
    for key, n in (("reward_mean", 12), ("eval_return", 2), ("loss", 12), ("grad_norm", 12)):
        assert int(panels[key].get("data-points")) == n
        assert len(_path_points(panels[key])) == n
        assert len(panels[key].findall("s:circle", NS)) == n           # fewer than 30 points: dots too
    # no loss / grad_norm in history: no such panels; a metric absent from history: none either
    assert list(_panels(curves2svg(_history(3, reward_mean=lambda i: i), metric="eval_acc"))) == ["reward_mean"]


def test_larger_values_higher_on_the_page_and_steps_left_to_right():
    ys = [3.0, -1.0, 7.5, 0.2, 7.4, 100.0, -50.0]
    panel = _panels(curves2svg(_history(len(ys), loss=ys)))["loss"]
    pts = _path_points(panel)
    assert [x for x, _ in pts] == sorted(x for x, _ in pts) and len({x for x, _ in pts}) == len(pts)
    by_value = [sy for _, sy in sorted(zip(ys, (sy for _, sy in pts)))]
    assert by_value == sorted(by_value, reverse=True)        # SVG y grows downwards


def test_many_points_no_markers():
    panel = _panels(curves2svg(_history(200, loss=lambda i: (i % 17) * 0.1)))["loss"]
    assert len(_path_points(panel)) == 200 and panel.findall("s:circle", NS) == []


def test_nan_and_inf_skipped():
    ys = [1.0, 1.5, float("nan"), 2.0, float("inf"), 3.0, 3.5, float("-inf"), None, "x", 4.0]
    panel = _panels(curves2svg(_history(len(ys), loss=ys)))["loss"]
    assert panel.get("data-points") == "6" and len(_path_points(panel)) == 6
    assert panel.find("s:path", NS).get("d").count("M") == 4     # the line breaks where a value is missing
    text = curves2svg(_history(3, loss=[float("nan")] * 3))        # nothing finite: an empty panel, no crash
    assert _panels(text)["loss"].get("data-points") == "0" and "nan" not in text.lower().replace("no finite", "")


def test_single_point_and_constant_series():
    for h in (_history(1, loss=[0.7]), _history(5, loss=lambda i: 2.5), _history(4, loss=lambda i: 0.0),
              _history(3, loss=lambda i: 1e300)):
        text = curves2svg(h)
        assert "nan" not in text.lower() and "inf" not in text.lower()
        pts = _path_points(_panels(text)["loss"])
        assert len(pts) == len(h) and len({y for _, y in pts}) == 1     # drawn, on one horizontal line


def test_title_and_labels_escaped():
    text = curves2svg(_history(2, loss=[1, 2], **{'a<b>&"c': [1, 2]}), title='run <&> "x"', metric='a<b>&"c')
    root = ET.fromstring(text)
    assert any(t.text == 'run <&> "x"' for t in root.iter("{%s}text" % NS["s"]))
    assert 'a<b>&"c' in _panels(text)


def test_ticks_and_compact_numbers():
    step, ticks = _ticks(0.0, 1.0)
    assert step == 0.2 and ticks[0] == 0.0 and abs(ticks[-1] - 1.0) < 1e-12
    assert _compact(12345.0) == "12.35k" and _compact(2.5e6) == "2.5M" and _compact(1.5e-5) == "1.5e-05"
    assert _compact(0.0) == "0" and _compact(0.25) == "0.25" and _compact(-3e13) == "-3e+13"
    assert _compact(999999.0) == "1M" and _compact(9999.7) == "10k" and _compact(-999.97) == "-1000"


def test_file_atomic_0644_and_nothing_to_plot(tmp_path):
    path = tmp_path / "curves.svg"
    assert plot_curves(_history(3, reward_mean=[1, 2, 3]), path, title="x") == str(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == readable_mode() == 0o644 & ~_umask()
    assert [p.name for p in tmp_path.iterdir()] == ["curves.svg"]               # no temp file left
    assert plot_curves([], tmp_path / "empty.svg") is None and not (tmp_path / "empty.svg").exists()
    assert plot_curves(_history(2, entropy=[1, 2]), tmp_path / "none.svg") is None


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_no_matplotlib_import(tmp_path):
    """Importing grpo_edge.plots and writing the curves leaves matplotlib unimported (fresh interpreter)."""
    hist = tmp_path / "metrics.jsonl"
    hist.write_text("\n".join(json.dumps(m) for m in _history(5, reward_mean=lambda i: i, loss=lambda i: 1.0)))
    code = ("import json, sys\nimport grpo_edge.plots as p\n"
            "h = [json.loads(x) for x in open(sys.argv[1])]\n"
            "assert p.plot_curves(h, sys.argv[2], title='t', metric='eval_return')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n")
    r = subprocess.run([sys.executable, "-c", code, str(hist), str(tmp_path / "c.svg")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    ET.parse(str(tmp_path / "c.svg"))


def test_eval_panel_starts_at_the_warm_start_and_keeps_a_rate_on_0_to_1():
    """issue 31: after a warm start to 0.93 the eval panel began at the first GRPO evaluation, and its axis
    zoomed to 0.97-0.99, so a rise looked like a climb from nothing (or a decline). Now step 0 is the warm
    start's score and a rate spans 0 to 1."""
    h = _history(20, reward_mean=lambda i: 0.9)
    for i, v in ((9, 0.97), (19, 0.98)):
        h[i]["eval_exact_match"] = v
    svg = curves2svg(h, metric="eval_exact_match", start=0.93)
    panel = _panels(svg)["eval_exact_match"]
    pts = _path_points(panel)
    assert int(panel.get("data-points")) == 3 and pts[0][0] < pts[1][0] < pts[2][0]     # step 0 first
    assert pts[0][1] > pts[1][1] > pts[2][1]                     # 0.93 < 0.97 < 0.98: higher on the page
    y_ticks = [t.text for t in panel.findall("s:text", NS) if t.get("text-anchor") == "end"]
    assert y_ticks[0] == "0" and y_ticks[-1] == "1.0"            # the axis spans 0..1
    assert "after the warm start" in svg
    from grpo_edge.plots import BOTTOM, PANEL_H, TOP            # the rise 0.93 -> 0.98: a small part of the height
    assert abs(pts[0][1] - pts[2][1]) < 0.1 * (PANEL_H - BOTTOM - TOP)
