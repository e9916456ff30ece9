"""What every C build of the ESP32 path shares: the kernel headers in csrc/, the host gcc and its flags, the
sanitizer flags, the C-identifier rule for a model's prefix.

    write_headers(out_dir, VECTOR_HEADERS)     # the kernels a generated <prefix>_model.c includes
    [gcc()] + CFLAGS + ["-O2", ...]            # every host build (simulation, harnesses, TFLM comparisons)

The rv32 cross-compiler and its flags live in rv32.py, with the instruction counter.
"""
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from grpo_edge.errors import TargetError

CSRC = Path(__file__).resolve().parent / "csrc"
# the headers a generated model includes, copied unchanged next to it (gx_fixedpoint.h: the shared arithmetic)
VECTOR_HEADERS = ["gx_fixedpoint.h", "gx_kernels.h", "gx_kernels16.h"]
TEXT_HEADERS = ["gx_fixedpoint.h", "gx_text_kernels.h"]
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


def write_headers(out_dir, names) -> list:
    """Copy csrc/<name> for each name into out_dir (atomically); returns the paths written."""
    from grpo_edge.report import atomic_write_text
    out = []
    for name in names:
        out.append(Path(out_dir) / name)
        atomic_write_text(out[-1], (CSRC / name).read_text())
    return out


def gcc() -> str:
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise TargetError("host C compiler (gcc) not found: install gcc to simulate the generated C")
    return cc


def sanitizers_available() -> bool:
    """True when gcc links and runs an -fsanitize=address,undefined program here."""
    with tempfile.TemporaryDirectory(prefix="gxsan_") as d:
        src = Path(d) / "t.c"
        src.write_text("int main(void){return 0;}\n")
        r = subprocess.run([gcc()] + SANITIZE + ["-o", str(Path(d) / "t"), str(src)], capture_output=True)
        if r.returncode != 0:
            return False
        return subprocess.run([str(Path(d) / "t")], capture_output=True).returncode == 0


def check_prefix(prefix: str) -> str:
    """`prefix` when it is a C identifier of at most 32 characters (it starts every generated symbol)."""
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$", prefix or ""):
        raise TargetError("prefix %r must be a C identifier (letters, digits, _), at most 32 characters" % (prefix,))
    return prefix
