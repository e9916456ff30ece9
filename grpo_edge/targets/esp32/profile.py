"""Where the time goes, op by op: the per-op profile of a generated model (report.json / report.md "per_op",
and per_op.png).

    prof = per_op_profile(graph, gen, x_q)      # {"ops": [row per op], "totals": {...}}
    per_op_chart(prof, "out/per_op.png")

For every op of the compiled graph: its MACs (ops.OPS[kind].macs), the rv32imc instructions it ran (exact:
the model is rebuilt with GX_MARK(i), the mark codegen puts before op i's call and after the last, defined
as a call to an empty function in its own file; the simulator records the count at each mark; mean over the
inputs), instructions per MAC, the arena bytes live while it runs (the planner's buffers whose lifetime
holds the op, its scratch included) and the flash bytes of its constant data (weights, biases,
multipliers, tables). The ops' sum leaves out invoke's entry and exit and the mark calls move registers a
little, so it is within a few percent of the unmarked model's count (both are in the totals). Ops that move
no data (reshape) have no call and no instructions.

Beside it, TFLite Micro's cost for the same op (add_host_columns): TFLM does not run on rv32 here, so both
sides are counted on this x86-64 host under valgrind callgrind, ours (host_per_op: the marked build at gcc
-O2, split at each mark) and TFLM's (tflm.tflm_per_op: Invoke split at each kernel's entry, summed over the
TFLite operators an op maps to).
"""
import tempfile
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError

MARK_H = "void gx_mark(int i);\n"
MARK_C = "#include \"gx_mark.h\"\nvoid gx_mark(int i) { (void)i; }\n"


def build_marked(gen, work) -> Path:
    """rv32 ELF of the generated model with GX_MARK(i) -> gx_mark(i) (an empty function in its own file)."""
    from . import rv32
    from .codegen import write
    work = Path(work)
    src = write(gen, work)["source"]
    (work / "gx_mark.h").write_text(MARK_H)
    (work / "gx_mark.c").write_text(MARK_C)       # its own translation unit: never inlined
    return rv32.cross_compile([src, work / "gx_mark.c"], work / (gen.prefix + "_marked.elf"), gen.prefix + "_invoke",
                              work, extra=["-DGX_MARK(i)=gx_mark(i)", "-include", str(work / "gx_mark.h")])


def per_op_instructions(graph, gen, x_q, work) -> dict:
    """{op index: mean rv32 instructions} over the inputs x_q (each of the graph's input type)."""
    from elftools.elf.elffile import ELFFile
    from unicorn import UC_HOOK_BLOCK
    from unicorn.riscv_const import UC_RISCV_REG_A0
    from . import rv32
    elf = build_marked(gen, work)
    with open(elf, "rb") as f:
        mark = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name("gx_mark")[0]["st_value"]
    tin, tout = graph.tensors[graph.input], graph.tensors[graph.output]
    m = rv32.Machine(elf, gen.prefix, tin.size, tout.size, tin.dtype, tout.dtype)
    marks = []
    m.uc.hook_add(UC_HOOK_BLOCK, lambda uc, addr, size, _: marks.append((uc.reg_read(UC_RISCV_REG_A0), m.count)),
                  None, mark, mark)
    per_input = []
    for x in x_q:
        marks.clear()
        m.invoke(x.reshape(-1), count=True)
        per_input.append(dict((a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])))
    return dict((i, float(np.mean([p[i] for p in per_input]))) for i in sorted(per_input[0]))


def host_per_op(gen, x_q, n_calls) -> dict:
    """Host (x86-64, gcc -O2) instructions of our invoke, op by op, under callgrind: {"per_op": {op index:
    mean}, "entry": ..., "exit": ..., "total": ...}. The marked build (GX_MARK(i) -> gx_mark(i), an empty
    function in its own file) is split at each entry of gx_mark (callgrind.segments)."""
    import re
    from . import callgrind as CG
    from .simulate import build_host
    marks = [int(m) for m in re.findall(r"GX_MARK\((\d+)\);", gen.source)]   # in the order invoke runs them
    n = min(n_calls, len(x_q))
    x = np.ascontiguousarray(x_q[:n], dtype=gen.input_dtype).reshape(n, -1)
    with tempfile.TemporaryDirectory(prefix="gxhostprof_") as d:
        (Path(d) / "gx_mark.h").write_text(MARK_H)
        (Path(d) / "gx_mark.c").write_text(MARK_C)
        exe = build_host([gen], d, "O2", extra=["-g", "-DGX_MARK(i)=gx_mark(i)", "-include", str(Path(d) / "gx_mark.h"),
                                                str(Path(d) / "gx_mark.c")])
        inp = Path(d) / "in.bin"
        inp.write_bytes(np.int32(n).tobytes() + x.tobytes())
        segs = CG.segments([str(exe)], gen.prefix + "_invoke", ["gx_mark"], stdin_path=inp)
    M = len(marks)
    if len(segs) != n * M + 1:
        raise TargetError("callgrind segments of %s_invoke do not match its %d marks x %d calls" % (gen.prefix, M, n))
    per_op, entry, exit_ = {}, segs[0][1], segs[-1][1]     # the first call's entry, the last call's return
    for c in range(n):              # segment c*M + j ends at mark j of call c: op marks[j-1] for j >= 1
        for j in range(1, M):
            per_op[marks[j - 1]] = per_op.get(marks[j - 1], 0) + segs[c * M + j][1]
    per_op = dict((i, v / float(n)) for i, v in per_op.items())
    return {"per_op": per_op, "entry": entry, "exit": exit_, "total": sum(per_op.values()) + entry + exit_,
            "calls": n}


def live_arena_bytes(plan, i) -> int:
    """Arena bytes of the buffers live while op i runs (written before or by it, read by it or later)."""
    return int(sum(b.size for b in plan.buffers.values() if b.first <= i <= b.last))


def per_op_profile(graph, gen, x_q, total_instructions=None) -> dict:
    """{"ops": [{op, kind, node, macs, rv32_instructions, instructions_per_mac, arena_live_bytes, flash_bytes}],
    "totals": {...}}; see the module docstring."""
    from .ops import OPS
    with tempfile.TemporaryDirectory(prefix="gxprof_") as d:
        counts = per_op_instructions(graph, gen, x_q, d)
    rows = []
    for i, op in enumerate(graph.ops):
        macs = int(OPS[op.kind].macs(op, graph.tensors))
        n = counts.get(i)
        rows.append({"op": i, "kind": op.kind, "node": op.name[:40], "macs": macs,
                     "rv32_instructions": None if n is None else int(round(n)),
                     "instructions_per_mac": None if n is None or not macs else round(n / macs, 2),
                     "arena_live_bytes": live_arena_bytes(gen.plan, i), "flash_bytes": int(op.param_bytes())})
    ran = [r["rv32_instructions"] for r in rows if r["rv32_instructions"] is not None]
    totals = {"macs": int(sum(r["macs"] for r in rows)), "rv32_instructions_ops": int(sum(ran)),
              "rv32_instructions_model": None if total_instructions is None else int(round(total_instructions)),
              "arena_bytes": int(gen.plan.arena_bytes), "flash_bytes_constants": int(sum(r["flash_bytes"] for r in rows)),
              "inputs": int(len(x_q))}
    return {"ops": rows, "totals": totals}


def add_host_columns(rows, totals, ours, tflm) -> None:
    """Our and TFLite Micro's host (x86-64) instructions per op (host_per_op, tflm.tflm_per_op) into the
    profile's rows and totals, in place. An op TFLM runs but we do not (a reshape: no call here) keeps None
    on our side."""
    for r in rows:
        o, t = ours["per_op"].get(r["op"]), tflm["per_op"].get(r["op"])
        r["host_instructions"] = None if o is None else int(round(o))
        r["tflm_host_instructions"] = None if t is None else int(round(t))
        r["tflm_over_ours"] = round(t / o, 2) if o and t is not None else None
    totals.update({"host_instructions_ops": int(round(sum(ours["per_op"].values()))),
                   "host_instructions_entry_exit": int(round(ours["entry"] + ours["exit"])),
                   "tflm_host_instructions_ops": int(round(sum(tflm["per_op"].values()))),
                   "tflm_host_instructions_entry": int(round(tflm["entry"])), "host_inputs": int(ours["calls"])})


def profile_onnx(onnx_path, prefix="model", n_inputs=3, n_callgrind=5, seed=0) -> dict:
    """The per-op profile of an int8 (or 16x8) QDQ ONNX compiled for the ESP32, on its own (what `bench`
    shows): rv32 rows and totals (rv32.rv32_check gives the whole model's count and that the C is bit-exact
    with the reference), plus the host columns, ours vs TFLite Micro's, where tflite-micro and valgrind are
    here ("host_columns" says why not otherwise). Random inputs of the model's input type (seed)."""
    import shutil
    from . import codegen, parse, rv32, tflm
    graph = parse.parse(onnx_path)
    gen = codegen.generate(graph, prefix)
    tin = graph.tensors[graph.input]
    x_q = np.random.default_rng(seed).integers(tin.qmin, tin.qmax + 1, size=(max(n_inputs, n_callgrind),)
                                               + tuple(tin.shape[1:])).astype(tin.np_dtype)
    whole = rv32.rv32_check(graph, gen, x_q[:n_inputs], n_inputs)
    prof = per_op_profile(graph, gen, x_q[:n_inputs], whole["instructions"]["mean"])
    prof["totals"]["rv32_bit_exact"] = bool(whole["bit_exact"])
    if not tflm.available() or shutil.which("valgrind") is None:
        prof["host_columns"] = "skipped: needs tflite-micro and valgrind"
        return prof
    try:
        buf, _, owners = tflm.to_tflite_owned(graph)
    except TargetError as e:
        prof["host_columns"] = "skipped: %s" % e
        return prof
    with tempfile.TemporaryDirectory(prefix="gxprof_tflm_") as d:
        mp = Path(d) / "m.tflite"
        mp.write_bytes(buf)
        try:                # TFLM cannot run it, or its kernels cannot be split: the rv32 rows still stand
            arena = tflm.find_arena(mp, d)["arena_bytes"]
            theirs = tflm.tflm_per_op(mp, tflm.to_tflm_input(graph, x_q), d, arena, n_callgrind, owners)
        except TargetError as e:
            prof["host_columns"] = "skipped: %s" % str(e).splitlines()[0]
            return prof
    add_host_columns(prof["ops"], prof["totals"], host_per_op(gen, x_q, n_callgrind), theirs)
    prof["host_columns"] = "ok"
    return prof


def _bars(ax, labels, series, xlabel, title):
    """Horizontal bars, one group per label; series: [(name, values, colour)]; each bar labelled."""
    h = 0.8 / len(series)
    ys = np.arange(len(labels))[::-1]
    top = max([v or 0 for _, vals, _ in series for v in vals] + [1])
    for k, (name, vals, colour) in enumerate(series):
        total = float(sum(v or 0 for v in vals)) or 1.0
        pos = ys + (len(series) - 1 - 2 * k) * h / 2
        ax.barh(pos, [v or 0 for v in vals], h, color=colour, label=name)
        for y, v in zip(pos, vals):
            if v is not None:
                ax.text(v, y, " %s (%.0f%%)" % (format(int(v), ","), 100.0 * v / total), va="center", fontsize=7)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels)
    ax.set_xlim(0, top * 1.4)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    if len(series) > 1:
        ax.legend(fontsize=8, loc="lower right")


def per_op_chart(prof, path, title="rv32 instructions per op", per="inference") -> Path:
    """Bar charts of where the instructions go, op by op (PNG, written atomically): rv32imc instructions;
    beside it, when the profile has them, host instructions of ours and TFLite Micro's for the same op."""
    from grpo_edge.plots import pyplot, save_figure_atomic
    rows = [r for r in prof["ops"] if r["rv32_instructions"] is not None or r.get("tflm_host_instructions")]
    labels = ["%d %s" % (r["op"], r["kind"]) for r in rows]
    host = any(r.get("tflm_host_instructions") is not None for r in rows)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 if host else 1, figsize=(13 if host else 7, 0.4 * len(rows) + 1.4), squeeze=False)
    _bars(axes[0][0], labels, [("ours", [r["rv32_instructions"] for r in rows], "#4c72b0")],
          "rv32imc instructions per %s (exact count)" % per, title)
    if host:
        _bars(axes[0][1], labels, [("ours (gcc -O2)", [r.get("host_instructions") for r in rows], "#4c72b0"),
                                   ("TFLite Micro", [r.get("tflm_host_instructions") for r in rows], "#dd8452")],
              "x86-64 host instructions per inference (callgrind)", "the same op: ours vs TFLite Micro (host)")
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)
    return Path(path)
