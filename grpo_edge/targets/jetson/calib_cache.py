"""TensorRT INT8 calibration cache, text form: writer and reader.

The format (what TensorRT's calibrators write and read back, and what onnxruntime's TensorRT EP reads):

    TRT-8201-EntropyCalibration2          <- "TRT-<version int>-<algorithm>"
    input: 3caa54fc                        <- "<tensor name>: <scale as hex>"
    /fc1/Gemm_output_0: 3d8f5c29

- the version int is major*1000 + minor*100 + patch up to TensorRT 9 (8.2.1 -> 8201) and
  major*10000 + minor*100 + patch from TensorRT 10 (10.3.0 -> 100300);
- the hex is the IEEE-754 float32 bit pattern of the per-tensor scale, big-endian, lowercase, no "0x",
  no leading zeros (a zero scale is written "0"); scale = amax / 127 (symmetric int8);
- TensorRT ignores a cache whose header names another version or another calibrator algorithm, and then
  calibrates again, so the header must match the device's TensorRT and the calibrator class in use.

Example: ``input: 3caa54fc`` is scale 0.020792477, i.e. amax 2.6406.
"""
import struct
from pathlib import Path
from typing import Dict, NamedTuple

from grpo_edge.errors import ExportError

ALGORITHMS = ("EntropyCalibration2", "EntropyCalibration", "MinMaxCalibration", "LegacyCalibration")


class CalibCache(NamedTuple):
    version: int              # TensorRT version int from the header, e.g. 8201
    algorithm: str            # e.g. "EntropyCalibration2"
    scales: Dict[str, float]  # tensor name -> scale (amax / 127), float32 values

    def amax(self) -> Dict[str, float]:
        return {k: v * 127.0 for k, v in self.scales.items()}


def trt_version_int(version: str) -> int:
    """'8.2.1' -> 8201, '8.5.2.2' -> 8502, '10.3.0' -> 100300 (TensorRT's own encoding per major)."""
    try:
        parts = [int(p) for p in str(version).split(".")[:3]]
    except ValueError:
        raise ExportError("TensorRT version must look like 8.2.1, got %r" % (version,))
    while len(parts) < 3:
        parts.append(0)
    major, minor, patch = parts
    return major * (10000 if major >= 10 else 1000) + minor * 100 + patch


def scale_to_hex(scale: float) -> str:
    """float32 bits, big-endian, lowercase hex without leading zeros ('0' for +0.0)."""
    bits = struct.unpack(">I", struct.pack(">f", float(scale)))[0]
    return "%x" % bits


def hex_to_scale(text: str) -> float:
    bits = int(text, 16)
    if bits > 0xFFFFFFFF:
        raise ValueError("more than 32 bits")
    return struct.unpack(">f", struct.pack(">I", bits))[0]


def format_calib_cache(scales: Dict[str, float], version: int, algorithm: str = "EntropyCalibration2") -> str:
    """The cache text for `scales` {tensor name: scale}. Names keep their order."""
    if algorithm not in ALGORITHMS:
        raise ExportError("calibration algorithm must be one of %s, got %r" % (", ".join(ALGORITHMS), algorithm))
    lines = ["TRT-%d-%s" % (int(version), algorithm)]
    for name, scale in scales.items():
        if not name or ":" in name or "\n" in name or name != name.strip():
            # A reader splits each line at ':' (onnxruntime at the first, we at the last): such a name
            # cannot be read back unambiguously.
            raise ExportError("tensor name %r cannot go into a TensorRT calibration cache" % (name,))
        s = float(scale)
        if not (s >= 0.0) or s == float("inf"):
            raise ExportError("calibration scale for %r must be finite and >= 0, got %r" % (name, scale))
        lines.append("%s: %s" % (name, scale_to_hex(s)))
    return "\n".join(lines) + "\n"


def write_calib_cache(path, scales: Dict[str, float], version: int,
                      algorithm: str = "EntropyCalibration2") -> Path:
    """Write the cache atomically; returns the path."""
    from grpo_edge.report import atomic_write_text
    atomic_write_text(path, format_calib_cache(scales, version, algorithm))
    return Path(path)


def parse_calib_cache(text: str, where: str = "calibration cache") -> CalibCache:
    """Parse cache text; raises ExportError naming the first bad line."""
    lines = text.splitlines()
    if not lines:
        raise ExportError("%s is empty" % where)
    head = lines[0].strip().split("-")
    if len(head) != 3 or head[0] != "TRT" or not head[1].isdigit() or head[2] not in ALGORITHMS:
        raise ExportError("%s line 1: expected 'TRT-<version>-<algorithm>', got %r" % (where, lines[0][:80]))
    scales = {}
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        name, sep, value = line.rpartition(":")
        value = value.strip()
        ok = bool(sep and name.strip() and value) and all(c in "0123456789abcdef" for c in value) \
            and len(value) <= 8 and (value == "0" or not value.startswith("0"))
        if not ok:
            raise ExportError("%s line %d: expected '<tensor>: <lowercase hex float32>', got %r"
                              % (where, i, line[:80]))
        name = name.strip()
        if name in scales:
            raise ExportError("%s line %d: tensor %r listed twice" % (where, i, name))
        scale = hex_to_scale(value)
        if not (scale >= 0.0) or scale == float("inf"):
            raise ExportError("%s line %d: scale %s for %r is not a finite non-negative float" % (where, i, value, name))
        scales[name] = scale
    return CalibCache(int(head[1]), head[2], scales)


def read_calib_cache(path) -> CalibCache:
    """Read a cache file written by TensorRT or by write_calib_cache."""
    p = Path(path)
    if not p.is_file():
        raise ExportError("calibration cache not found: %s" % p)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ExportError("%s is not a text calibration cache (binary?)" % p)
    return parse_calib_cache(text, str(p))
