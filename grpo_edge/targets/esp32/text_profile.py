"""Where a text model's decode step spends its instructions, op by op (the text report's "per_op", and
per_op.png): the text counterpart of profile.py.

    prof = text_per_op(q, "arith", prompts)     # {"ops": [row per (layer, op)], "totals": {...}}

The generated step calls GX_MARK(i) before each op (textgen_c.STEP_OPS[i]; the same marks in micro-gpt's step
and the tiny-transformer's decoder step). The rv32 build defines it as a call to an empty function in its own
file; unicorn records the exact instruction count at each mark of every decode call (the prefill's marks are
dropped: its count is in the totals). A row per op of the step, layer by layer: its MACs (attention: over
the positions it attends to, mean over the decode steps), rv32 instructions per decode token (mean),
instructions per MAC and the flash bytes of its constant data. The text arena is one static plan, live for
the whole step (its size is in the totals). TFLite Micro cannot run the decode step (text_tflm.py says why),
so there are no TFLM columns.
"""
import tempfile
from pathlib import Path

import numpy as np

from .profile import MARK_C, MARK_H


def _flash(p) -> int:
    """Bytes of one fc / ln parameter dict as the generator writes it (int8 w / s, int32 m / b)."""
    n = 0
    for k, size in (("w", 1), ("s", 1), ("m", 4), ("b", 4)):
        if p.get(k) is not None and (k != "b" or np.any(p[k])):
            n += size * int(np.asarray(p[k]).size)
    return n


def _layers(q):
    return q["p"]["layers"] if q["arch"] == "micro-gpt" else q["p"]["dec"]


def op_figures(q, layer, name, pos, n_src) -> tuple:
    """(MACs, flash bytes) of op `name` of decoder layer `layer` (None: outside the layers) at position pos."""
    c = q["cfg"]
    D, V = c["d"], c["vocab"]
    Lp = _layers(q)[layer] if layer is not None else None
    if name in ("att", "xatt"):
        return 2 * D * (pos + 1 if name == "att" else n_src), 0
    if Lp is not None and name in Lp and isinstance(Lp[name], dict) and "w" in Lp[name]:
        return int(np.asarray(Lp[name]["w"]).size), _flash(Lp[name])
    if Lp is not None and name in ("ln1", "ln2", "ln3"):
        return D, _flash(Lp[name])
    if name == "act":
        table = Lp.get("gelu") if Lp is not None else None
        return (c["ff"], 2 * int(np.asarray(table).size)) if table is not None else (0, 0)
    if name == "head":
        return int(np.asarray(q["p"]["head"]["w"]).size), _flash(q["p"]["head"])
    if name == "lnf":
        return D, _flash(q["p"]["lnf"])
    if name == "embed":
        return D, 0
    return (V, 0) if name in ("logit_hash", "argmax") else (D, 0)       # the residual adds


def _segments(marks):
    """One decode call's marks [(mark id, count)] -> [((layer or None, op name), instructions)]."""
    from .textgen_c import STEP_OPS
    out, layer = [], -1
    for (a, ca), (_, cb) in zip(marks, marks[1:]):
        name = STEP_OPS[a]
        if name == "ln1":
            layer += 1
        inside = 1 <= a <= STEP_OPS.index("add_ffn")
        out.append(((layer if inside else None, name), cb - ca))
    return out


def _source_len(cfg, ids) -> int:
    """The encoder's n_src: the run of non-pad ids after the leading pads (all of them when all are pads)."""
    ids = [int(i) for i in ids]
    s = next((k for k, v in enumerate(ids) if v != 0), len(ids))
    if s == len(ids):
        return len(ids)
    n = 0
    while s + n < len(ids) and ids[s + n] != 0:
        n += 1
    return n


def text_per_op(q, prefix, prompts, n_prompts=3) -> dict:
    """The per-op profile of the decode step over the answers to the first n_prompts prompts (rv32, exact)."""
    from elftools.elf.elffile import ELFFile
    from unicorn import UC_HOOK_BLOCK
    from unicorn.riscv_const import UC_RISCV_REG_A0
    from .textir import encode_prompts
    from .textsim import TextMachine, build_rv32
    cfg = q["cfg"]
    s2s = q["arch"] != "micro-gpt"
    with tempfile.TemporaryDirectory(prefix="gxtextprof_") as d:
        (Path(d) / "gx_mark.h").write_text(MARK_H)
        (Path(d) / "gx_mark.c").write_text(MARK_C)
        elf = build_rv32(q, prefix, d, sources=[Path(d) / "gx_mark.c"],
                         extra=["-DGX_MARK(i)=gx_mark(i)", "-include", str(Path(d) / "gx_mark.h")])
        with open(elf, "rb") as f:
            mark = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name("gx_mark")[0]["st_value"]
        m = TextMachine(elf, prefix, 1 if s2s else cfg["input_len"])
        marks, acc, steps, whole = [], {}, 0, 0
        prompts = list(prompts)[:n_prompts]
        m.uc.hook_add(UC_HOOK_BLOCK, lambda uc, addr, size, _: marks.append((uc.reg_read(UC_RISCV_REG_A0), m.count)),
                      None, mark, mark)
        for ids in encode_prompts(cfg, prompts):
            n_src = _source_len(cfg, ids) if s2s else 0

            def on_call(kind, pos):
                if kind == "decode":
                    for key, n in _segments(marks):
                        macs = op_figures(q, key[0], key[1], pos, n_src)[0]
                        a = acc.setdefault(key, [0, 0])
                        a[0], a[1] = a[0] + n, a[1] + macs
                del marks[:]
            dec = m.generate(ids, cfg["max_new_tokens"], on_call=on_call)[3]
            steps, whole = steps + len(dec), whole + sum(dec)
    prof = _rows(q, acc, max(steps, 1))
    prof["totals"].update(rv32_instructions_model=int(round(whole / float(max(steps, 1)))), prompts=len(prompts))
    return prof


def _rows(q, acc, steps) -> dict:
    rows = []
    for i, ((layer, name), (n, macs)) in enumerate(acc.items()):
        n, macs = n / float(steps), macs / float(steps)
        rows.append({"op": i, "kind": name, "node": name if layer is None else "layer %d %s" % (layer, name),
                     "macs": int(round(macs)), "rv32_instructions": int(round(n)),
                     "instructions_per_mac": round(n / macs, 2) if macs else None, "arena_live_bytes": None,
                     "flash_bytes": op_figures(q, layer, name, 0, 0)[1]})
    totals = {"macs": int(sum(r["macs"] for r in rows)), "rv32_instructions_ops": int(sum(r["rv32_instructions"]
                                                                                         for r in rows)),
              "decode_tokens": int(steps), "flash_bytes_constants": int(sum(r["flash_bytes"] for r in rows))}
    return {"ops": rows, "totals": totals}


def by_kind(prof) -> dict:
    """The rows summed over the layers, one per op kind (for the chart: a step of many layers stays legible)."""
    kinds = {}
    for r in prof["ops"]:
        k = kinds.setdefault(r["kind"], {"op": len(kinds), "kind": r["kind"], "rv32_instructions": 0})
        k["rv32_instructions"] += r["rv32_instructions"]
    return {"ops": list(kinds.values()), "totals": prof["totals"]}
