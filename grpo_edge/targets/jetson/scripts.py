"""The files a user copies to the Jetson: build_engine.sh (trtexec), the Python builder/runner
(copied verbatim from this package) and a README. Generated text is stamped; do not edit by hand."""
from pathlib import Path
from typing import List

from grpo_edge.report import atomic_write_text

HERE = Path(__file__).resolve().parent


def _dims(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def shape_flags(inputs: List[dict]) -> str:
    """trtexec --minShapes/--optShapes/--maxShapes for inputs with a dynamic dim ('' when all static)."""
    if all(i["min"] == i["max"] for i in inputs):
        return ""
    parts = []
    for flag, key in (("--minShapes", "min"), ("--optShapes", "opt"), ("--maxShapes", "max")):
        parts.append("%s=%s" % (flag, ",".join("%s:%s" % (i["name"], _dims(i[key])) for i in inputs)))
    return " ".join(parts)


def build_sh(cfg: dict, stamp: str) -> str:
    trt_major = int(cfg["trt_version"].split(".")[0])
    lines = [
        "#!/usr/bin/env bash",
        "# %s" % stamp,
        "# Build TensorRT engines with trtexec:  bash build_engine.sh [fp32|fp16|int8]   (default: %s)" % cfg["precision"],
        "# int8 on TensorRT < 10 uses the calibration cache (implicit quantization); on TensorRT >= 10 the Q/DQ",
        "# ONNX (explicit quantization). Set TRT_MAJOR if this board's TensorRT differs from %s." % cfg["trt_version"],
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        'PRECISION="${1:-%s}"' % cfg["precision"],
        'TRT_MAJOR="${TRT_MAJOR:-%d}"' % trt_major,
        'TRTEXEC="${TRTEXEC:-$(command -v trtexec || echo /usr/src/tensorrt/bin/trtexec)}"',
        'if [ "$TRT_MAJOR" -ge 10 ]; then WS="--memPoolSize=workspace:%d"; else WS="--workspace=%d"; fi'
        % (cfg["workspace_mb"], cfg["workspace_mb"]),
        "",
    ]
    for g in cfg["graphs"]:
        shapes = shape_flags(g["inputs"])
        engine = g["engine"].replace("{precision}", "${PRECISION}")
        common = "--saveEngine=%s $WS %s" % (engine, shapes)
        lines += [
            "# graph %s" % g["name"],
            'case "$PRECISION" in',
            '  fp32) "$TRTEXEC" --onnx=%s %s ;;' % (g["onnx"], common),
            '  fp16) "$TRTEXEC" --onnx=%s %s --fp16 ;;' % (g["onnx"], common),
        ]
        if g.get("onnx_qdq"):
            lines += [
                '  int8) if [ "$TRT_MAJOR" -ge 10 ]; then',
                '          "$TRTEXEC" --onnx=%s %s --int8 --fp16' % (g["onnx_qdq"], common),
                "        else",
                '          "$TRTEXEC" --onnx=%s %s --int8 --fp16 --calib=%s' % (g["onnx"], common, g["calib_cache"]),
                "        fi ;;",
            ]
        else:
            lines.append('  int8) echo "int8 files were not generated: re-run grpo-edge deploy --precision int8" >&2; exit 2 ;;')
        lines += ['  *) echo "precision must be fp32, fp16 or int8" >&2; exit 2 ;;', "esac", ""]
    lines.append('echo "engines built; now: python3 run_engine.py --precision $PRECISION"')
    return "\n".join(lines) + "\n"


def readme(cfg: dict, stamp: str, notes: List[str]) -> str:
    rows = []
    for g in cfg["graphs"]:
        rows.append("| `%s` | simplified fp32 ONNX (opset %s) |" % (g["onnx"], g["opset"]))
        if g.get("onnx_qdq"):
            rows.append("| `%s` | int8 Q/DQ ONNX for TensorRT >= 10.1 (explicit quantization) |" % g["onnx_qdq"])
            rows.append("| `%s` | int8 calibration cache for TensorRT %s (implicit quantization) |"
                        % (g["calib_cache"], cfg["cache_trt_version"]))
        rows.append("| `%s` | sample inputs + fp32 reference outputs (run_engine.py checks against them) |" % g["sample"])
    body = [
        "# %s on %s (%s)" % (cfg["model"], cfg["display_name"], cfg["precision"]),
        "",
    ] + ([cfg["quality_gate"]["banner"], ""] if cfg.get("quality_gate") and not cfg["quality_gate"]["passed"] else
         ["Quality gate: %s." % cfg["quality_gate"]["line"], ""] if cfg.get("quality_gate") else []) + [
        "_%s_" % stamp,
        "",
        "Prepared for TensorRT %s (%s)." % (cfg["trt_version"], cfg["runtime"]),
        "",
        "## On the Jetson",
        "",
        "```bash",
        "bash build_engine.sh %s          # trtexec; or: python3 build_engine.py" % cfg["precision"],
        "python3 run_engine.py                 # check vs the reference, time it, power via tegrastats",
        "```",
        "",
        "`run_engine.py` needs `tensorrt` (JetPack) and `torch` with CUDA (its GPU buffers and stream);",
        "run it as root (`sudo`) on JetPack 4 to see the POM_* power rails. It writes",
        "`results.<graph>.<precision>.json` (median/p90 latency, mean board power, energy per inference).",
        "Engines are tied to the TensorRT version and the GPU: build them on the board that runs them.",
        "",
    ] + _text_usage(cfg) + [
        "## Files",
        "",
        "| file | what |",
        "|---|---|",
        "| `build_engine.sh` | trtexec command lines (dynamic shapes: --minShapes/--optShapes/--maxShapes) |",
        "| `build_engine.py` | the same with the TensorRT Python API (8.2 and 10.x) |",
        "| `run_engine.py` | load, check, time, sample power (TensorRT 8.2 and 10.x APIs) |",
        "| `deploy.json` | graphs, input shape ranges, precision: read by both Python scripts |",
    ] + rows + [
        "| `report.md` / `report.json` | op check, host-simulated numerics, estimated latency and energy |",
        "",
        "## Notes",
        "",
    ] + ["- %s" % n for n in notes]
    return "\n".join(body) + "\n"


def _text_usage(cfg) -> List[str]:
    """A text model's kit: the decode loop through the engines (run_engine.py --text, textgen.py)."""
    if not cfg.get("text"):
        return []
    return ["## Text: greedy completions through the engines", "",
            "```bash",
            "python3 run_engine.py --text \"%s\"" % (cfg["text"].get("example_prompt") or "PROMPT"),
            "python3 run_engine.py --prompts prompts.txt --check   # vs expected_completions.json",
            "```", "",
            "The decode loop is `textgen.py` (the Pi runner's): each step calls the engines of `deploy.json`'s graphs "
            "(%s); `tokenizer.json` holds the characters and lengths. The optimisation profile spans the loop's "
            "lengths (build_engine.sh). `--check` compares with the checkpoint's own completions of prompts.txt "
            "and exits 1 below `--min-agreement` (0.9)." % ", ".join(g["name"] for g in cfg["graphs"]), ""]


def write_scripts(out_dir, cfg: dict, stamp: str, notes: List[str]) -> List[str]:
    out = Path(out_dir)
    atomic_write_text(out / "build_engine.sh", build_sh(cfg, stamp))
    (out / "build_engine.sh").chmod(0o755)
    from grpo_edge import runtime
    shipped = runtime.ship(out, {"build_engine.py": "build_engine", "run_engine.py": "run_engine",
                                 "tegrastats.py": "tegrastats"})
    atomic_write_text(out / "README.md", readme(cfg, stamp, notes))
    return ["build_engine.sh"] + shipped + ["README.md"]
