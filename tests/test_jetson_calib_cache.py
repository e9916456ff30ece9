"""TensorRT calibration cache (text): writer and reader follow TensorRT's format exactly."""
import struct

import numpy as np
import pytest

from grpo_edge.errors import ExportError
from grpo_edge.targets.jetson.calib_cache import (format_calib_cache, hex_to_scale, parse_calib_cache,
                                                  read_calib_cache, scale_to_hex, trt_version_int,
                                                  write_calib_cache)

# Real-format sample: the header TensorRT 8.2.1's IInt8EntropyCalibrator2 writes, then one
# "name: hex" line per tensor (ONNX-parser tensor names, TensorRT's "(Unnamed Layer* N)" names, a zero).
SAMPLE = """TRT-8201-EntropyCalibration2
input: 3caa54fc
/net/net.0/Gemm_output_0: 3d8f5c29
(Unnamed Layer* 3) [Shuffle]_output: 3c010204
logits: 0
"""


def test_sample_values():
    c = parse_calib_cache(SAMPLE)
    assert (c.version, c.algorithm) == (8201, "EntropyCalibration2")
    assert list(c.scales) == ["input", "/net/net.0/Gemm_output_0", "(Unnamed Layer* 3) [Shuffle]_output", "logits"]
    assert c.scales["input"] == pytest.approx(0.020792477, rel=1e-7)
    assert c.amax()["input"] == pytest.approx(0.020792477 * 127, rel=1e-6)
    assert c.scales["(Unnamed Layer* 3) [Shuffle]_output"] == np.float32(1 / 127)   # amax 1.0 (a Tanh output)
    assert c.scales["logits"] == 0.0
    # written back byte for byte
    assert format_calib_cache(c.scales, c.version, c.algorithm) == SAMPLE


def test_hex_is_big_endian_float32_bits_lowercase():
    assert scale_to_hex(0.020792477) == "3caa54fc"
    assert scale_to_hex(0.0) == "0"
    assert scale_to_hex(1.0) == "3f800000"
    assert scale_to_hex(1e-40) == "116c2"          # subnormal: no leading zeros
    assert hex_to_scale("116c2") == np.float32(1e-40)
    bits = struct.unpack(">I", struct.pack(">f", 0.5))[0]
    assert int(scale_to_hex(0.5), 16) == bits


def test_round_trip_file(tmp_path):
    rng = np.random.default_rng(0)
    scales = {"t%d" % i: float(np.float32(v)) for i, v in enumerate(rng.uniform(1e-6, 10, 50))}
    scales["zero"] = 0.0
    p = write_calib_cache(tmp_path / "model.calib.cache", scales, trt_version_int("8.2.1"), "MinMaxCalibration")
    c = read_calib_cache(p)
    assert c.version == 8201 and c.algorithm == "MinMaxCalibration"
    assert c.scales == scales                       # exact: float32 bits survive
    assert p.read_text().splitlines()[0] == "TRT-8201-MinMaxCalibration"


def test_version_ints():
    assert trt_version_int("8.2.1") == 8201
    assert trt_version_int("8.2.1.8") == 8201
    assert trt_version_int("8.6.2") == 8602
    assert trt_version_int("10.3.0") == 100300      # TensorRT 10 encodes major * 10000
    with pytest.raises(ExportError):
        trt_version_int("eight")


@pytest.mark.parametrize("text, where", [
    ("", "empty"),
    ("TRT-8201\ninput: 3caa54fc\n", "line 1"),
    ("trt-8201-EntropyCalibration2\n", "line 1"),
    ("TRT-8201-Entropy\n", "line 1"),
    ("TRT-8201-EntropyCalibration2\ninput 3caa54fc\n", "line 2"),
    ("TRT-8201-EntropyCalibration2\ninput: 0x3caa54fc\n", "line 2"),
    ("TRT-8201-EntropyCalibration2\ninput: 3CAA54FC\n", "line 2"),       # TensorRT writes lowercase
    ("TRT-8201-EntropyCalibration2\ninput: 03caa54f\n", "line 2"),       # no leading zeros
    ("TRT-8201-EntropyCalibration2\ninput: 3caa54fc0\n", "line 2"),      # more than 32 bits
    ("TRT-8201-EntropyCalibration2\ninput: bf800000\n", "line 2"),       # negative scale
    ("TRT-8201-EntropyCalibration2\ninput: 7fc00000\n", "line 2"),       # NaN
    ("TRT-8201-EntropyCalibration2\na: 3f800000\na: 3f800000\n", "line 3"),
])
def test_reader_rejects_malformed(text, where):
    with pytest.raises(ExportError) as e:
        parse_calib_cache(text)
    msg = str(e.value)
    assert where in msg and "\n" not in msg


def test_reader_file_errors(tmp_path):
    with pytest.raises(ExportError, match="not found"):
        read_calib_cache(tmp_path / "missing.cache")
    p = tmp_path / "binary.cache"
    p.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(ExportError, match="not a text calibration cache"):
        read_calib_cache(p)


def test_writer_rejects_bad_input():
    with pytest.raises(ExportError, match="cannot go into"):
        format_calib_cache({"a:b": 1.0}, 8201)
    with pytest.raises(ExportError, match="finite"):
        format_calib_cache({"a": float("nan")}, 8201)
    with pytest.raises(ExportError, match="algorithm"):
        format_calib_cache({"a": 1.0}, 8201, "Percentile")
