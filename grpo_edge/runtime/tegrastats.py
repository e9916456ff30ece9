"""Parse `tegrastats` lines (Jetson Nano / JetPack 4 and Orin / JetPack 5-6) and sample them during a run.

Two line formats matter here (fields are space separated; order varies between boards and releases):

  JetPack 4 (Nano):  RAM 2394/3956MB (lfb 71x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB)
                     CPU [12%@1479,5%@1479,off,off] EMC_FREQ 3%@1600 GR3D_FREQ 0%@921 APE 25 PLL@31C
                     CPU@33.5C ... POM_5V_IN 2750/2750 POM_5V_GPU 0/0 POM_5V_CPU 445/445
  JetPack 5/6 (Orin): [MM-DD-YYYY HH:MM:SS] RAM 2980/7620MB (lfb 6x4MB) SWAP ... CPU [12%@1510,...]
                     EMC_FREQ 0%@2133 GR3D_FREQ 0%@[305] ... cpu@48.5C tj@48.5C
                     VDD_IN 4981mW/4981mW VDD_CPU_GPU_CV 612mW/612mW VDD_SOC 1426mW/1426mW

Power rails are "<RAIL> <instant>/<average>" in milliwatts (JetPack 4 prints bare numbers, JetPack 5+
appends "mW"); the average is over the tegrastats process lifetime. The board input rail is POM_5V_IN on
the Nano and VDD_IN on Orin (module input, not the carrier board).

grpo_edge/runtime/tegrastats.py, shipped unchanged into Jetson deploy folders, where run_engine.py samples
power with it. Standard library only; Python 3.6-valid.
"""
import re
import shutil
import subprocess
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

INPUT_RAILS = ("VDD_IN", "POM_5V_IN")   # board/module input power, in order of preference

_STAMP = re.compile(r"^\s*(\d\d-\d\d-\d{4} \d\d:\d\d:\d\d)\s+")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_GPU = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?([\d,]+)\]?)?")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_TEMP = re.compile(r"(?<![\w@])([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C\b")
_RAIL = re.compile(r"(?<!\S)([A-Z][A-Z0-9_]*) (\d+)(mW)?/(\d+)(mW)?(?=\s|$)")


class TegraSample(NamedTuple):
    time_s: float                              # host monotonic time when the line was read (0 when parsed)
    stamp: Optional[str]                       # the line's own timestamp (JetPack 5+), else None
    ram_used_mb: int
    ram_total_mb: int
    cpu_load: List[Optional[int]]              # per core, None where the core is "off"
    cpu_mhz: List[Optional[int]]
    gpu_load: Optional[int]                    # GR3D_FREQ percent
    gpu_mhz: Optional[int]
    emc_load: Optional[int]
    temps_c: Dict[str, float]
    rails_mw: Dict[str, Tuple[int, int]]       # rail -> (instant mW, average mW)

    @property
    def input_rail(self) -> Optional[str]:
        for r in INPUT_RAILS:
            if r in self.rails_mw:
                return r
        return None

    @property
    def input_mw(self) -> Optional[int]:
        r = self.input_rail
        return self.rails_mw[r][0] if r else None


def parse_line(line: str, time_s: float = 0.0) -> TegraSample:
    """Parse one tegrastats line; raises ValueError when it has no RAM field (not a tegrastats line)."""
    text = line.strip()
    m = _STAMP.match(text)
    stamp = m.group(1) if m else None
    ram = _RAM.search(text)
    if not ram:
        raise ValueError("not a tegrastats line (no 'RAM used/totalMB' field): %r" % text[:80])
    cpu_load, cpu_mhz = [], []
    cm = _CPU.search(text)
    if cm:
        for core in cm.group(1).split(","):
            core = core.strip()
            if core == "off" or not core:
                cpu_load.append(None)
                cpu_mhz.append(None)
                continue
            pct, _, mhz = core.partition("@")
            cpu_load.append(int(pct.rstrip("%")))
            cpu_mhz.append(int(mhz) if mhz else None)
    gm = _GPU.search(text)
    gpu_load = int(gm.group(1)) if gm else None
    gpu_mhz = int(gm.group(2).split(",")[0]) if gm and gm.group(2) else None
    em = _EMC.search(text)
    rails = {}
    for name, cur, _u1, avg, _u2 in _RAIL.findall(text):
        rails[name] = (int(cur), int(avg))
    temps = {}
    for name, val in _TEMP.findall(text):
        if name not in ("GR3D_FREQ", "EMC_FREQ"):
            temps[name] = float(val)
    return TegraSample(time_s, stamp, int(ram.group(1)), int(ram.group(2)), cpu_load, cpu_mhz,
                      gpu_load, gpu_mhz, int(em.group(1)) if em else None, temps, rails)


def summarize(samples: List[TegraSample]) -> dict:
    """Mean/max input power and GPU load over samples (instant values; the tegrastats average is ignored
    because it spans the whole tegrastats process, including time before the benchmark)."""
    powered = [s for s in samples if s.input_mw is not None]
    out = {"samples": len(samples), "input_rail": powered[0].input_rail if powered else None}
    if powered:
        mw = [s.input_mw for s in powered]
        out.update(input_mw_mean=sum(mw) / len(mw), input_mw_max=max(mw), input_mw_min=min(mw))
    gl = [s.gpu_load for s in samples if s.gpu_load is not None]
    if gl:
        out["gpu_load_mean"] = sum(gl) / len(gl)
    return out


def available(command: str = "tegrastats") -> bool:
    return shutil.which(command) is not None


class TegrastatsSampler:
    """Run `tegrastats --interval N` in the background while a benchmark runs (only where it exists).

        with TegrastatsSampler(100) as ts:
            run_benchmark()
        print(ts.summary())

    `command` is the tegrastats executable (on JetPack 4 running as root gives the POM_* rails).
    """

    def __init__(self, interval_ms: int = 100, command: str = "tegrastats"):
        self.interval_ms = int(interval_ms)
        self.command = command
        self.samples = []          # type: List[TegraSample]
        self.bad_lines = 0
        self._proc = None
        self._thread = None
        self.t_start = self.t_stop = None

    def start(self) -> "TegrastatsSampler":
        exe = shutil.which(self.command)
        if exe is None:
            raise RuntimeError("tegrastats not found (%s): power can only be sampled on a Jetson" % self.command)
        self._proc = subprocess.Popen([exe, "--interval", str(self.interval_ms)], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, universal_newlines=True, bufsize=1)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self.t_start = time.monotonic()
        return self

    def _read(self):
        for line in self._proc.stdout:
            try:
                self.samples.append(parse_line(line, time.monotonic()))
            except ValueError:
                self.bad_lines += 1

    def stop(self) -> List[TegraSample]:
        self.t_stop = time.monotonic()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._thread.join(timeout=5)
            self._proc.stdout.close()
            self._proc = None
        return self.samples

    def window(self) -> List[TegraSample]:
        """Samples read between start() and stop()."""
        end = self.t_stop if self.t_stop is not None else float("inf")
        return [s for s in self.samples if self.t_start <= s.time_s <= end]

    def summary(self) -> dict:
        out = summarize(self.window())
        out["interval_ms"] = self.interval_ms
        out["bad_lines"] = self.bad_lines
        return out

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
