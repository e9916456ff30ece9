"""One report structure, written as JSON and Markdown, used by every target and by `grpo-edge bench`.

Every number in a report is a Figure that says how it was obtained:
``measured-host`` (on the machine that ran deploy), ``measured-device`` (on the real device) or
``estimated`` (a model of the device; ``source`` names the model and where its inputs come from).
"""
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

HOW = ("measured-host", "measured-device", "estimated", "exact")


@dataclass
class Figure:
    value: Any
    unit: str = ""
    how: str = "measured-host"
    source: str = ""

    def __post_init__(self):
        if self.how not in HOW:
            raise ValueError("Figure.how must be one of %s, got %r" % (HOW, self.how))
        if self.how == "estimated" and not self.source:
            raise ValueError("an estimated figure needs a source (model and where its inputs come from)")

    def text(self) -> str:
        v = self.value
        if isinstance(v, float):
            v = "%.4g" % v
        label = {"measured-host": "measured on host", "measured-device": "measured on device",
                 "estimated": "ESTIMATE", "exact": "exact"}[self.how]
        return "%s %s (%s)" % (v, self.unit, label) if self.unit else "%s (%s)" % (v, label)


# The figures a console summary shows first, when a report has them (every target's most telling ones);
# {target} is the report's target (an ESP32 text deploy's answer-time ESTIMATE for the chip asked for).
KEY_FIGURES = ("host_bit_exact", "rv32_bit_exact", "decision_agreement_fp32", "task_metric_integer",
               "int8_metric_retention", "completions_identical_to_fp32", "sim_fp32_max_abs_diff", "flash_bytes",
               "ram_bytes", "arena_bytes", "latency_s", "answer_time_{target}_s", "host_latency_fp32_s",
               "host_latency_int8_s", "device_latency_fp32_s", "device_latency_int8_s")


@dataclass
class Report:
    title: str
    target: str = ""
    figures: Dict[str, Figure] = field(default_factory=dict)
    sections: Dict[str, Any] = field(default_factory=dict)   # free-form structured detail (tables, checks)
    notes: List[str] = field(default_factory=list)          # methods, assumptions, sources
    warnings: List[str] = field(default_factory=list)       # a goal missed: on top of the report and the console
    gate: Optional[Dict[str, Any]] = None                    # targets/gate.py: the artifact vs fp32, passed or not

    def add(self, key: str, value, unit: str = "", how: str = "measured-host", source: str = "") -> Figure:
        f = Figure(value, unit, how, source)
        self.figures[key] = f
        return f

    def to_dict(self) -> dict:
        return {"title": self.title, "target": self.target, "gate": self.gate, "warnings": self.warnings,
                "figures": {k: asdict(v) for k, v in self.figures.items()},
                "sections": self.sections, "notes": self.notes}

    def to_markdown(self) -> str:
        lines = ["# %s" % self.title, ""]
        if self.gate is not None and not self.gate["passed"]:
            lines += [self.gate["banner"], ""]
        if self.target:
            lines += ["Target: `%s`" % self.target, ""]
        if self.gate is not None and self.gate["passed"]:
            lines += ["Quality gate: %s" % self.gate["line"], ""]
        if self.warnings:
            lines += ["## Warnings", ""] + ["- %s" % w for w in self.warnings] + [""]
        if self.figures:
            lines += ["| figure | value | how obtained | source |", "|---|---|---|---|"]
            for k, f in self.figures.items():
                v = ("%.4g" % f.value) if isinstance(f.value, float) else str(f.value)
                lines.append("| %s | %s %s | %s | %s |" % (k, v, f.unit, f.how, f.source))
            lines.append("")
        for name, body in self.sections.items():
            lines += ["## %s" % name, ""]
            lines += [_section_markdown(body), ""]
        if self.notes:
            lines += ["## Notes", ""] + ["- %s" % n for n in self.notes] + [""]
        return "\n".join(lines)

    def summary(self, out_dir, keys=KEY_FIGURES, most: int = 8) -> str:
        """A few lines for the console: what was built and where, the key figures (each with how it was
        obtained), the warnings; the whole report is out_dir/report.md."""
        out = Path(out_dir)
        lines = ["%s -> %s/" % (self.title, out)]
        if self.gate is not None:
            lines.append("  gate: %s" % self.gate["line"])
        shown = [k for k in (k.format(target=self.target) for k in keys) if k in self.figures][:most]
        lines += ["  %s: %s" % (k, self.figures[k].text()) for k in shown]
        lines += ["  warning: %s" % w for w in self.warnings]
        lines.append("full report: %s (%d figures)" % (out / "report.md", len(self.figures)))
        return "\n".join(lines)

    def write(self, out_dir, stem: str = "report") -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / (stem + ".json"), json.dumps(self.to_dict(), indent=2, default=str))
        atomic_write_text(out / (stem + ".md"), self.to_markdown())
        return out / (stem + ".json")


def _section_markdown(body) -> str:
    # A list of flat dicts becomes a table; anything else is shown as JSON.
    if isinstance(body, list) and body and all(isinstance(r, dict) for r in body):
        cols = list(body[0].keys())
        rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in body:
            rows.append("| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |")
        return "\n".join(rows)
    if isinstance(body, str):
        return body
    return "```json\n%s\n```" % json.dumps(body, indent=2, default=str)


def _cell(v) -> str:
    return ("%.4g" % v) if isinstance(v, float) else str(v)


def readable_mode(executable=False) -> int:
    """0644 (0755 for scripts) less the process umask: the mode open() would give a new file."""
    m = os.umask(0)
    os.umask(m)
    return (0o755 if executable else 0o644) & ~m


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path, data: bytes) -> None:
    """Write via a temp file in the same folder + fsync + rename: readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix="." + path.name + ".", suffix=".tmp")
    try:
        os.fchmod(fd, readable_mode())             # mkstemp makes 0600 files; others must read ours
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, str(path))
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:     # a failed write() names no file: name ours
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
