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
"""
import tempfile
from pathlib import Path

import numpy as np

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


def per_op_chart(prof, path, title="rv32 instructions per op") -> Path:
    """A horizontal bar chart of each op's share of the instructions (PNG, written atomically)."""
    from grpo_edge.plots import pyplot, save_figure_atomic
    rows = [r for r in prof["ops"] if r["rv32_instructions"] is not None]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.2))
    labels = ["%d %s" % (r["op"], r["kind"]) for r in rows][::-1]
    values = [r["rv32_instructions"] for r in rows][::-1]
    total = float(sum(values)) or 1.0
    ax.barh(labels, values, color="#4c72b0")
    for y, v in enumerate(values):
        ax.text(v, y, " %s (%.0f%%)" % (format(v, ","), 100.0 * v / total), va="center", fontsize=8)
    ax.set_xlabel("rv32imc instructions per inference (exact count)")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0, max(values) * 1.35 if values else 1)
    save_figure_atomic(fig, path)
    plt.close(fig)
    return Path(path)
