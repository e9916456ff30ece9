"""ESP32-C3 class (RISC-V rv32imc) cross-build and instruction-level simulation.

Build: riscv64-unknown-elf-gcc -march=rv32imc -mabi=ilp32 -O2, freestanding, no libc, entry =
<prefix>_invoke. Simulate: unicorn (QEMU's CPU core) maps the ELF's segments, sets sp/gp/ra and calls
<prefix>_invoke(in, out) directly, returning to a sentinel address. Instructions are counted exactly
with a basic-block hook (each block's instructions decoded once: 16-bit compressed or 32-bit).

Latency = instructions x CPI / clock is an ESTIMATE: the ESP32-C3's CPI is not published; we assume
CPI_RV32 (single-issue in-order core, code and data in SRAM / cache hits; flash-cache misses and
interrupts not modelled).
"""
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError

CROSS = "riscv64-unknown-elf-gcc"
RV_FLAGS = ["-march=rv32imc", "-mabi=ilp32", "-O2", "-ffreestanding", "-std=c99", "-Wall", "-Wextra", "-Werror"]
CPI_RV32 = 1.2          # assumed cycles per instruction (same assumption as targets/esp32c3.yaml)
TEXT_BASE = 0x10000
IO_BASE = 0x20000000    # in/out buffers
STACK_TOP = 0x30000000
STACK_SIZE = 0x10000
SENTINEL = 0x40000000
STACK_FILL = 0xA5


def available() -> bool:
    try:
        import elftools  # noqa: F401
        import unicorn  # noqa: F401
    except ImportError:
        return False
    return shutil.which(CROSS) is not None


def missing_reason() -> str:
    if shutil.which(CROSS) is None:
        return "%s not found (apt-get install gcc-riscv64-unknown-elf)" % CROSS
    return "python packages unicorn and pyelftools are needed (pip install unicorn pyelftools)"


def cross_compile(sources, elf, entry, include_dir, extra=()) -> Path:
    """riscv64-unknown-elf-gcc RV_FLAGS (+ extra): `sources` to a bare ELF (no libc, entry `entry`) at `elf`."""
    if shutil.which(CROSS) is None:
        raise TargetError(missing_reason())
    cmd = [CROSS] + RV_FLAGS + list(extra) + ["-nostdlib", "-nostartfiles", "-Wl,-e,%s" % entry,
                                              "-Wl,-Ttext=0x%x" % TEXT_BASE, "-I", str(include_dir), "-o",
                                              str(elf)] + [str(s) for s in sources] + ["-lgcc"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "R_RISCV_GPREL" in r.stderr:
        # ld's gp relaxation can leave a gp-relative access out of range in a large program (a binutils
        # limitation): build that program again without linker relaxation (smaller ones keep it: same counts)
        r = subprocess.run(cmd[:1] + ["-mno-relax"] + cmd[1:], capture_output=True, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stderr.strip().splitlines() if "warning: " not in l] or ["?"]   # ld's RWX warning is not the cause
        raise TargetError("rv32 cross-compile failed: %s" % " / ".join(lines[:4]))
    return Path(elf)


def build(gen, workdir) -> Path:
    """Cross-compile and link the generated model to a bare rv32imc ELF; return its path."""
    from .codegen import write
    work = Path(workdir)
    src = write(gen, work)["source"]
    return cross_compile([src], work / (gen.prefix + "_rv32.elf"), gen.prefix + "_invoke", work)


def section_sizes(elf_path) -> dict:
    """Bytes per class of section: code (.text), rodata (.rodata/.srodata), data, bss."""
    from elftools.elf.elffile import ELFFile
    out = {"text": 0, "rodata": 0, "data": 0, "bss": 0}
    with open(elf_path, "rb") as f:
        for s in ELFFile(f).iter_sections():
            n, size = s.name, s["sh_size"]
            if not s["sh_flags"] & 0x2:          # SHF_ALLOC
                continue
            if n.startswith(".text"):
                out["text"] += size
            elif n.startswith((".rodata", ".srodata")):
                out["rodata"] += size
            elif n.startswith((".bss", ".sbss")):
                out["bss"] += size
            elif n.startswith((".data", ".sdata")):
                out["data"] += size
    return out



def load_segments(uc, elf):
    """Map and fill every loadable segment of an ELF (pyelftools ELFFile) in a unicorn machine (zero bss)."""
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD" or seg["p_memsz"] == 0:
            continue
        lo = seg["p_vaddr"] & ~0xFFF
        hi = (seg["p_vaddr"] + seg["p_memsz"] + 0xFFF) & ~0xFFF
        uc.mem_map(lo, hi - lo)
        uc.mem_write(seg["p_vaddr"], seg.data() + b"\0" * (seg["p_memsz"] - seg["p_filesz"]))

class Program:
    """A bare rv32 ELF in unicorn: call(symbol, a0, a1) runs one of its functions from a fresh stack to a
    sentinel return address, with an exact instruction count (a basic-block hook; each block decoded once:
    16-bit compressed or 32-bit instructions) and the stack bytes it used (a fill pattern)."""

    def __init__(self, elf_path, symbols, io_bytes=0x1000):
        from elftools.elf.elffile import ELFFile
        from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV32, Uc
        self.uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
        with open(elf_path, "rb") as f:
            elf = ELFFile(f)
            load_segments(self.uc, elf)
            syms = elf.get_section_by_name(".symtab")
            self.addr = dict((n, syms.get_symbol_by_name(n)[0]["st_value"]) for n in symbols)
            gp = syms.get_symbol_by_name("__global_pointer$")
            self.gp = gp[0]["st_value"] if gp else 0
        self.uc.mem_map(IO_BASE, max((io_bytes + 0xFFF) & ~0xFFF, 0x1000))
        self.uc.mem_map(STACK_TOP - STACK_SIZE, STACK_SIZE)
        self.uc.mem_map(SENTINEL, 0x1000)
        self._blocks, self.count, self.last_stack, self.stack = {}, 0, 0, 0

    def _count_block(self, uc, addr, size, _):
        n = self._blocks.get((addr, size))
        if n is None:
            code = bytes(uc.mem_read(addr, size))
            n, i = 0, 0
            while i < size:                       # rv32c: low bits 11 = 32-bit instruction
                i += 4 if (code[i] & 3) == 3 else 2
                n += 1
            self._blocks[(addr, size)] = n
        self.count += n

    def call(self, name, a0=0, a1=0, count=True):
        """Run function `name`(a0, a1); returns (its int32 a0 result, instructions or None)."""
        from unicorn import UC_HOOK_BLOCK
        from unicorn.riscv_const import (UC_RISCV_REG_A0, UC_RISCV_REG_A1, UC_RISCV_REG_GP, UC_RISCV_REG_RA,
                                         UC_RISCV_REG_SP)
        uc = self.uc
        uc.mem_write(STACK_TOP - STACK_SIZE, bytes([STACK_FILL]) * STACK_SIZE)
        for reg, v in ((UC_RISCV_REG_SP, STACK_TOP - 16), (UC_RISCV_REG_RA, SENTINEL), (UC_RISCV_REG_GP, self.gp),
                       (UC_RISCV_REG_A0, a0 & 0xFFFFFFFF), (UC_RISCV_REG_A1, a1 & 0xFFFFFFFF)):
            uc.reg_write(reg, v)
        self.count = 0
        h = uc.hook_add(UC_HOOK_BLOCK, self._count_block) if count else None
        try:
            uc.emu_start(self.addr[name], SENTINEL, timeout=0, count=0)
        except Exception as e:  # noqa: BLE001 - unicorn raises UcError
            raise TargetError("rv32 simulation of %s faulted: %s" % (name, e))
        finally:
            if h is not None:
                uc.hook_del(h)
        st = bytes(uc.mem_read(STACK_TOP - STACK_SIZE, STACK_SIZE))
        self.last_stack = STACK_SIZE - next((i for i, b in enumerate(st) if b != STACK_FILL), STACK_SIZE)
        self.stack = max(self.stack, self.last_stack)
        v = uc.reg_read(UC_RISCV_REG_A0)
        return (v - (1 << 32) if v >= (1 << 31) else v), (self.count if count else None)


class Machine(Program):
    """A generated vector model's ELF: invoke(x) -> (output, instructions or None, stack bytes)."""

    def __init__(self, elf_path, prefix, in_size, out_size, in_dtype="int8", out_dtype="int8"):
        """in_size / out_size: elements of in_dtype / out_dtype ("int8" | "int16")."""
        self.in_dtype, self.out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
        self.in_size, self.out_size = in_size * self.in_dtype.itemsize, out_size * self.out_dtype.itemsize  # bytes
        self.entry_name = prefix + "_invoke"
        super().__init__(elf_path, [self.entry_name], io_bytes=self.out_offset() + self.out_size)

    def out_offset(self) -> int:
        """The output buffer follows the input, 4-byte aligned."""
        return (self.in_size + 3) & ~3

    def invoke(self, x: np.ndarray, count=False):
        """Run <prefix>_invoke on one input; returns (output, instructions or None, stack bytes)."""
        self.uc.mem_write(IO_BASE, np.ascontiguousarray(x, dtype=self.in_dtype).tobytes())
        _, n = self.call(self.entry_name, IO_BASE, IO_BASE + self.out_offset(), count)
        y = np.frombuffer(bytes(self.uc.mem_read(IO_BASE + self.out_offset(), self.out_size)),
                          dtype=self.out_dtype).copy()
        return y, n, self.last_stack


def rv32_check(graph, gen, x_q: np.ndarray, n_counted: int = 3) -> dict:
    """Cross-build, run every input (of the graph's input type) in the simulator, compare with the
    reference, count instructions."""
    from . import reference as R
    if not available():
        raise TargetError(missing_reason())
    ref = R.run(graph, x_q).reshape(len(x_q), -1)
    tin, tout = graph.tensors[graph.input], graph.tensors[graph.output]
    with tempfile.TemporaryDirectory(prefix="esp32rv_") as d:
        elf = build(gen, d)
        sizes = section_sizes(elf)
        m = Machine(elf, gen.prefix, tin.size, tout.size, tin.dtype, tout.dtype)
        outs, counts, stack = [], [], 0
        for i, x in enumerate(x_q):
            y, c, s = m.invoke(x.reshape(-1), count=i < n_counted)
            outs.append(y)
            stack = max(stack, s)
            if c is not None:
                counts.append(c)
    y = np.stack(outs)
    return {"n_inputs": int(len(x_q)), "bit_exact": bool(np.array_equal(y, ref)),
            "mismatches": int((y != ref).sum()),
            "instructions": {"min": int(min(counts)), "max": int(max(counts)),
                             "mean": float(np.mean(counts)), "n_counted": len(counts)},
            "sections": sizes, "stack_bytes": int(stack),
            "compiler": " ".join([CROSS] + RV_FLAGS)}
