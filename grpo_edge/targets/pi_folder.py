"""Host-side work on a Raspberry Pi deploy folder, shared by the policy (rpi.py) and text (rpi_text.py)
deploys: run the shipped runner.py as the simulation, and choose fp32 or int8 by measurement."""
import json
import subprocess
import sys
from pathlib import Path

from grpo_edge.errors import TargetError


def run_runner(out, args):
    """Run the folder's runner.py with `args` (it prints JSON last); a failure is one TargetError line."""
    out = Path(out).resolve()         # the runner runs with cwd=out: a relative path would be joined twice
    r = subprocess.run([sys.executable, str(out / "runner.py")] + [str(a) for a in args], cwd=str(out),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        raise TargetError("runner.py %s failed on this host: %s" % (" ".join(map(str, args[:2])), tail))
    return json.loads(r.stdout.strip().splitlines()[-1])


def choose_model(keep, lat, min_retention, agreement=None, min_agreement=0.0):
    """fp32 or int8, by measurement: int8 only if it keeps the metric, agrees with the checkpoint on at least
    min_agreement of the sample (when measured) AND is faster on the measured host."""
    faster = lat["int8"] < lat["fp32"]
    speed = "int8 %.3g s vs fp32 %.3g s median on this host" % (lat["int8"], lat["fp32"])
    if keep is None:
        return "model.onnx", "no task metric to check int8 against: fp32 kept (%s)" % speed
    if keep < min_retention:
        return "model.onnx", "int8 keeps %.4f of the fp32 metric (< %.2f): fp32 (%s)" % (keep, min_retention, speed)
    if agreement is not None and agreement < min_agreement:
        return "model.onnx", ("int8 agrees with the checkpoint on %.4f of the sample (< %.2f): fp32 (%s)"
                              % (agreement, min_agreement, speed))
    if not faster:
        return "model.onnx", "int8 keeps %.4f of the metric but is not faster (%s): fp32" % (keep, speed)
    return "model.int8.onnx", "int8 keeps %.4f of the metric and is faster (%s)" % (keep, speed)


def pi_gate(chosen, agreements: dict, n: int, on: str, keep, opts, figure: str) -> dict:
    """The Pi deploy's quality gate (targets/gate.py) on the model the folder runs: its agreement with the
    checkpoint (agreements: {"fp32": a, "int8": b}), and for int8 the task metric it keeps."""
    from grpo_edge.targets import gate
    tag = "int8" if chosen == "model.int8.onnx" else "fp32"
    tried = [{"form": t, "value": agreements.get(t)} for t in ("int8", "fp32") if agreements.get(t) is not None]
    return gate.decide(figure, agreements.get(tag), gate.check_threshold("min_agreement", opts["min_agreement"]), n,
                       on, tried, "%s (%s)" % (chosen, tag), keep if tag == "int8" else None,
                       gate.check_threshold("min_retention", opts["min_retention"]))


def write_readme(out, rep) -> None:
    """README.md for the Pi user, made from the folder's own deploy.json (and tokenizer.json for a text
    model) and the report's figures: install, check, run, inputs, outputs, which model runs, measure."""
    from grpo_edge.report import atomic_write_text
    out = Path(out)
    cfg = json.loads((out / "deploy.json").read_text())
    tok = json.loads((out / "tokenizer.json").read_text()) if (out / "tokenizer.json").exists() else None
    name = rep.title.replace("grpo-edge deploy: ", "")
    what = "%s %s" % (cfg.get("task") or (tok or {}).get("task") or "A", "text model" if tok else "policy")
    banner = [rep.gate["banner"]] if rep.gate is not None and not rep.gate["passed"] else []
    parts = ["# %s on the %s\n" % (what[0].upper() + what[1:], name)] + banner + [
             "Quality gate: %s.\n" % rep.gate["line"] if rep.gate is not None and rep.gate["passed"] else "",
             "Made by `grpo-edge deploy --target %s` from `%s`. The runner needs Python 3 with numpy and "
             "onnxruntime only (no torch, no grpo-edge).\n" % (cfg["target"], cfg["source"]),
             _INSTALL, check_section(cfg, out, tok is not None)]
    if tok and "prompt_end" in tok:
        parts += _fixer_sections(tok, rep)
    else:
        parts += _text_sections(tok) if tok else _policy_sections(cfg, out)
    parts += [_CHOICE % (cfg["chosen"], cfg["why"]), _measure(rep, tok), _FILES]
    atomic_write_text(out / "README.md", "\n".join(parts))


_INSTALL = """## Install

```
python3 -m venv venv
. venv/bin/activate
pip install -r requirements.txt
```
"""

_CHECK = """## Check the folder

```
sha256sum -c MANIFEST.sha256
python3 runner.py --check
```

The first line checks that every file is as deploy wrote it. `--check` runs both models on %s, and prints """ \
    """one `PASS` or `FAIL` line per model, with the measured figure and the threshold deploy.json sets for it:

%s

The last line is `check: PASS`, or `check: FAIL` naming the models that failed (exit status 1).
"""


def check_section(cfg, out, text) -> str:
    """The README's check section: what runner.py --check compares and the thresholds it applies, from the
    runner's own reading of deploy.json (pi_runner.check_limits, decision_rule)."""
    import numpy as np
    from grpo_edge.runtime.pi_runner import check_limits, decision_rule
    if text:
        on = "the prompts of expected_completions.json (the checkpoint's own greedy completions of prompts.txt)"
        rule = "completes the prompts exactly as the checkpoint did"
    else:
        on = "sample_inputs.npy and compares with expected_outputs.npy (the checkpoint's own outputs)"
        rule = "decides as the checkpoint did (%s)" % decision_rule(
            cfg, np.asarray(np.load(str(Path(out) / "expected_outputs.npy")), dtype=np.float64))[1]
    lines = []
    for name, (form, what, limit, why) in check_limits(cfg, text=text).items():
        if what == "max_abs_diff":
            lines.append("- %s (`%s`): PASS when its largest difference from expected_outputs.npy is at most "
                         "%.4g (%s)." % (form, name, limit, why))
        else:
            lines.append("- %s (`%s`): PASS when the share of %s on which it %s is at least %.4g (%s%s)."
                         % (form, name, "prompts" if text else "samples", rule, limit, why,
                            ": another CPU's int8 kernels may round a few the other way" if form == "int8" and
                            cfg.get("int8_check_agreement") is not None else ""))
    return _CHECK % (on, "\n".join(lines))


_CHOICE = """## Which model runs

Deploy chose `%s`: %s. `python3 runner.py --choose` measures both models on this Pi and keeps the """ \
    """faster one when deploy allowed int8; it writes `device_choice.json` (deploy.json and the manifest stay """ \
    """as shipped). `--model model.onnx` runs a given file.
"""

_FILES = """## Files

| file | what |
|---|---|
| runner.py | the runner (`python3 runner.py --help`) |
| model.onnx, model.int8.onnx (and their parts) | the fp32 and int8 models |
| deploy.json | the chosen model, the input layout and range, what `--check` expects |
| report.md, report.json | what deploy measured on its host and estimated for this device |
| MANIFEST.sha256 | the digest of every file deploy wrote |
"""


def _policy_sections(cfg, out) -> list:
    import numpy as np
    spec = cfg.get("input") or {}
    layout = spec.get("layout") or cfg["inputs"][0]["shape"]
    per = list(layout[1:])
    sample = np.load(str(out / "sample_inputs.npy"))[0].reshape(-1)
    lines = ["## Run\n", "```", "python3 runner.py --input sample_inputs.npy",
             "echo \"%s\" | python3 runner.py --input -" % " ".join("%.4g" % v for v in sample),
             "python3 runner.py --input sample_inputs.npy --json --out outputs.npy", "```\n",
             "## Inputs\n",
             "- A batch of shape (N, %s), float32: N samples of %d values each." % (
                 ", ".join(map(str, per)), int(np.prod(per))),
             "- From a `.npy` / `.npz` file (float64 and integers are cast), a `.csv` / `.txt` file or stdin (`-`)"
             " with one sample per line. One sample without the batch axis, or samples flattened to rows, are"
             " reshaped. NaN and inf are refused."]
    if spec.get("range"):
        lines.append("- The model was trained on values in [%g, %g]%s; inputs far outside are refused "
                     "(`--no-range-check` runs them anyway)." % (spec["range"][0], spec["range"][1],
                                                                 ": " + spec["preprocess"] if spec.get("preprocess") else ""))
    outs = cfg.get("outputs") or [{}]
    n = int(np.load(str(out / "expected_outputs.npy")).shape[-1])
    if outs[0].get("name") == "action":
        what = "- `actions`: per sample, the %d bounded action values (a continuous policy)." % n
    else:
        what = ("- `outputs`: per sample, %d scores, one per action (logits). `actions`: the index of the largest, "
                "the action to take (0 .. %d)." % (n, n - 1))
    lines += ["", "## Outputs\n", what, "- `--json` prints one JSON object; `--out FILE.npy` saves the outputs.\n"]
    return ["\n".join(lines)]


def _text_sections(tok) -> list:
    return ["\n".join([
        "## Run\n", "```", "python3 runner.py --text \"%s\"" % tok["example_prompt"],
        "python3 runner.py --prompts prompts.txt", "python3 runner.py --prompts prompts.txt --json", "```\n",
        "## Inputs\n",
        "- Prompts of at most %d characters from the model's vocabulary (tokenizer.json: %s)." % (
            tok["input_len"], json.dumps("".join(tok["chars"]))[:200]),
        "- `--text` (repeatable), or `--prompts FILE` (`-` for stdin) with one prompt per line. A line the model "
        "cannot take is one error line; the others still complete (exit 1 then).\n",
        "## Outputs\n",
        "- One greedy completion per prompt, up to %d new characters (`--json`: prompts and completions)." % (
            tok["max_new_tokens"]), ""])]


def _fixer_sections(tok, rep) -> list:
    """Run / inputs / what it fixes, for a code-fixing model (task pyfix: tokenizer.json has prompt_end)."""
    sim = rep.sections.get("simulation") or {}
    by_bug = dict((k.split("/", 1)[1], v) for k, v in ((sim.get("fp32") or {}).get("breakdown") or {}).items()
                  if k.startswith("fix_rate/"))
    fig = rep.figures.get("metric_onnx_fp32")
    rows = ["| %s | %.2f |" % (bug.replace("_", " "), v) for bug, v in by_bug.items()]
    room = int(tok["input_len"]) - len(tok["prompt_end"])
    how = ("writes the one line it changes, numbered (the runner numbers the lines it reads and puts that line "
           "in place; `--json` shows it as `completion`)" if tok.get("output") == "edit" else "writes it whole, fixed")
    return ["\n".join([
        "## Run\n", "```", "python3 runner.py --program example_broken.py       # prints the suggested fix",
        "cat my_function.py | python3 runner.py --program -", "python3 runner.py --program example_broken.py --json",
        "```\n",
        "## Inputs\n",
        "- One small Python function (a file, or `-` for stdin) of at most %d characters%s, with the characters of "
        "tokenizer.json; tabs become 4 spaces. An empty, binary, non-UTF-8, too long or non-Python file is one "
        "`error:` line and exit 2." % (room, " counting the line numbers the runner puts before each line ('1|')"
                                       if tok.get("output") == "edit" else ""), "",
        "## What it fixes\n",
        "One bug a student makes in a small function: a missing colon, wrong indentation, an unbalanced bracket, a "
        "misspelt name or keyword, a wrong operator, an off-by-one constant, a wrong return. It reads the function "
        "and %s; it never runs it. It cannot fix several bugs at once, programs longer than "
        "it reads, code unlike the small functions it was trained on, or a bug whose fix the function's name does "
        "not tell. Its measured fix rate (the fixed function passes its own tests, on %s held-out functions, "
        "runner.py with model.onnx on the deploying host): %s.\n" % (how,
            sim.get("n_prompts", "?"), "%.2f" % fig.value if fig is not None else "?"),
        "| bug | fix rate |", "|---|---|"] + rows + [""])]


def _measure(rep, tok) -> str:
    est = ["- %s: %.3g s (%s)" % (k, f.value, f.source) for k, f in rep.figures.items()
           if f.how == "estimated" and k.startswith("device_latency")]
    return "\n".join(["## Measure\n", "```",
                      "python3 runner.py --bench --runs %d" % (200 if tok else 2000), "```\n",
                      "The median latency of one %s on this Pi (a Pi 5 also reads board power with `vcgencmd "
                      "pmic_read_adc`). Deploy's figures for this device are estimates, not measurements:"
                      % ("completion and per token" if tok else "call")] + (est or ["- (none)"]) + [""])
