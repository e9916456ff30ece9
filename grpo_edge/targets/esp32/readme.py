"""README.md of an ESP32 deploy folder, for the firmware's user: check the generated C on a PC, build and
flash it for the chip asked for, what goes in and comes out of `<prefix>_invoke`, how to measure. Made from
the deploy's own graph and report (tests run its host commands)."""
from pathlib import Path

from grpo_edge.report import atomic_write_text


def host_commands(prefix) -> list:
    """The shell lines that build the firmware's app for this PC and run it (from the deploy folder)."""
    comp = "components/grpo_model"
    return ["cd firmware",
            "gcc -std=c99 -O2 -I host -I main -I %s -o host_app main/grpo_app.c main/main.c host/host_main.c "
            "%s/%s_model.c %s/%s_testvec.c" % (comp, comp, prefix, comp, prefix),
            "./host_app"]


def write_readme(out, graph, prefix, chip, rep) -> None:
    tin, tout = graph.tensors[graph.input], graph.tensors[graph.output]
    P = prefix.upper()
    lat = rep.figures.get("latency_s")
    title = rep.title.replace("ESP32 deploy: ", "")
    if tin.limit:
        how_in = ("`%d` token ids (`int32_t`, 0 .. %d), ONNX layout %s." % (tin.size, tin.limit - 1, list(tin.shape)))
    else:
        how_in = ("`%d` %s codes, ONNX layout %s (NCHW for images). A real input x becomes "
                  "`q = clamp(round(x / %s_INPUT_SCALE) + %s_INPUT_ZERO_POINT)` (scale %.6g, zero point %d); the "
                  "values the model was trained on are the task's own, prepared as in training."
                  % (tin.size, tin.dtype, list(tin.shape), P, P, tin.scale, tin.zero_point))
    if graph.ops[-1].kind == "argmax":
        how_out = "one code: the index of the largest score, the action (or class) to take."
    else:
        how_out = ("`%d` %s codes; a real value is `%s_OUTPUT_SCALE * (q - %s_OUTPUT_ZERO_POINT)` (scale %.6g, zero "
                   "point %d). A discrete policy takes the index of the largest; a continuous one's values are its "
                   "actions." % (tout.size, tout.dtype, P, P, tout.scale, tout.zero_point))
    text = "\n".join([
        "# %s on the %s" % (title, chip), ""] + ([rep.gate["banner"]] if rep.gate and not rep.gate["passed"] else []) + [
        "Quality gate: %s." % rep.gate["line"] if rep.gate and rep.gate["passed"] else "", "",
        "Made by `grpo-edge deploy --target %s`. `report.md` has every figure and how it was obtained." % chip, "",
        "## Check the generated C on this PC", "", "```"] + host_commands(prefix) + ["```", "",
        "The app runs the model on the test vectors built into the firmware and prints "
        "`GRPO_EDGE ... checksum=0x... expected=0x... status=OK`: the C computes exactly what the NumPy reference "
        "computes (the checksum of its outputs, %s)." % rep.sections.get("firmware", {}).get("checksum", ""), "",
        "## Build, flash and watch on the board", "", "```", "cd firmware", "idf.py set-target %s" % chip,
        "idf.py build flash monitor", "```", "",
        "ESP-IDF 5.x installed and exported. Or, with the image built: `grpo-edge flash . --port /dev/ttyUSB0` (esptool, "
        "then the result lines read back into report.json).", "",
        "## In and out", "",
        "Call `int %s_invoke(const %s_input_t *in, %s_output_t *out)` (`firmware/components/grpo_model/%s_model.h`; "
        "one static arena of %s bytes, `%s_ARENA_BYTES`; not reentrant)." % (
            prefix, prefix, prefix, prefix, rep.figures["arena_bytes"].value if "arena_bytes" in rep.figures else "?", P), "",
        "- in: " + how_in, "- out: " + how_out, "",
        "## Measure", "",
        "The firmware prints `GRPO_EDGE us_per_inference=...` on the board. Deploy's figure for this chip is an "
        "ESTIMATE: %s." % ("%.3g s (%s)" % (lat.value, lat.source) if lat else "none (no clock in the profile)"), "",
        "## Files", "", "| file | what |", "|---|---|",
        "| firmware/ | the ESP-IDF project (main/: the app; components/grpo_model/: the generated model) |",
        "| model.onnx, model.int8.onnx (or model.a16w8.onnx) | the fp32 model and the quantized one compiled to C |",
        "| report.md, report.json | checks, sizes, estimates |",
        "| MANIFEST.sha256 | the digest of every file deploy wrote |", ""])
    atomic_write_text(Path(out) / "README.md", text)


def write_text_readme(out, prefix, chip, rep, fw) -> None:
    """README.md of an ESP32 text deploy folder: the firmware's host check, build / flash, the decode API,
    the answer-time estimates."""
    est = ["- %s: %.3g s (%s)" % (k, f.value, f.source) for k, f in rep.figures.items()
           if k.startswith("answer_time_") and f.how == "estimated"]
    g = rep.gate
    text = "\n".join([
        "# %s on the %s" % (rep.title.split(": ", 1)[-1], chip), ""] + ([g["banner"]] if g and not g["passed"] else []) + [
        "Quality gate: %s." % g["line"] if g and g["passed"] else "", "",
        "Made by `grpo-edge deploy --target %s`: a text model's greedy decoder in plain C. `report.md` has every "
        "figure and how it was obtained." % chip, "",
        "## Check the generated C on this PC", "", "```", "cd firmware",
        fw["host_build"] + " -o host_app", "./host_app", "```", "",
        "The app decodes the %d prompts built into the firmware and prints `GRPO_EDGE text model=%s vectors=%d "
        "passed=%d status=OK`: the C answers exactly as the NumPy reference did at deploy time."
        % (fw["test_vectors"], prefix, fw["test_vectors"], fw["test_vectors"]), "",
        "## Build, flash and watch on the board", "", "```", "cd firmware", "idf.py set-target %s" % chip,
        "idf.py build flash monitor", "```", "",
        "## In and out", "",
        "`firmware/main/%s_text.h` declares the decoder: a prompt of the model's characters in, the greedy answer "
        "out (prompts.txt holds the prompts deploy checked)." % prefix, "",
        "## Measure", "",
        "The firmware prints its timing on the board. Deploy's figures are ESTIMATES:"] + (est or ["- (none)"]) + [""])
    atomic_write_text(Path(out) / "README.md", text)
