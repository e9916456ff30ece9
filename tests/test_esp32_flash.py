"""esptool flashing and the serial monitor, against a real pseudo-terminal and the real esptool."""
import contextlib
import json
import os
import threading
import time

import pytest

from conftest import need_module

from grpo_edge.errors import TargetError
from grpo_edge.targets.esp32 import flash as F

need_module("serial", "pyserial")

LINES = [b"ESP-ROM:esp32c3-api1-20210207\r\n", b"I (312) main_task: Calling app_main()\r\n",
         b"GRPO_EDGE model=cartpole vectors=8 checksum=0x1a2b3c4d expected=0x1a2b3c4d status=OK\r\n",
         b"GRPO_EDGE us_per_inference=123.456 runs=800\r\n", b"GRPO_EDGE done\r\n"]


@contextlib.contextmanager
def _pty_writer(lines, delay=0.05):
    """A pseudo-terminal whose other end writes `lines` (in split pieces); yields the port's path."""
    master, slave = os.openpty()

    def write():
        time.sleep(0.3)                       # let the monitor open the port first
        for ln in lines:
            os.write(master, ln[:7])          # split writes: the monitor must reassemble lines
            time.sleep(delay)
            os.write(master, ln[7:])
    t = threading.Thread(target=write, daemon=True)
    t.start()
    try:
        yield os.ttyname(slave)
    finally:
        t.join(2)
        os.close(master)
        os.close(slave)


def test_monitor_reads_result_lines_from_a_pty():
    with _pty_writer(LINES) as port:
        res = F.monitor(port, timeout=10)
    assert res["model"] == "cartpole" and res["vectors"] == 8 and res["runs"] == 800
    assert res["checksum"] == 0x1A2B3C4D and res["checksum_ok"] is True
    assert res["us_per_inference"] == pytest.approx(123.456)
    assert len(res["lines"]) == 3


def test_monitor_flags_a_checksum_mismatch_and_times_out_cleanly():
    bad = [LINES[2].replace(b"expected=0x1a2b3c4d status=OK", b"expected=0x00000001 status=MISMATCH")]
    with _pty_writer(bad) as port:
        res = F.monitor(port, timeout=1.5)
    assert res["checksum_ok"] is False and res["timed_out"] is True


def test_monitor_without_result_lines_raises():
    with _pty_writer([b"boot noise\r\n"]) as port:
        with pytest.raises(TargetError, match="no GRPO_EDGE result lines"):
            F.monitor(port, timeout=1.0)


def test_monitor_bad_port():
    with pytest.raises(TargetError, match="cannot open serial port"):
        F.monitor("/dev/does-not-exist-grpo", timeout=0.5)


def test_parse_line():
    assert F.parse_line("junk") == {}
    assert F.parse_line("I (1) x: GRPO_EDGE done") == {"done": True}
    assert F.parse_line("GRPO_EDGE us_per_inference=7.000 runs=3") == {"us_per_inference": 7.0, "runs": 3}


def _fake_build(tmp_path):
    build = tmp_path / "firmware" / "build"
    (build / "bootloader").mkdir(parents=True)
    for f in ("bootloader/bootloader.bin", "app.bin", "partition_table.bin"):
        (build / f).write_bytes(b"\xff" * 64)
    (build / "flasher_args.json").write_text(json.dumps({
        "write_flash_args": ["--flash_mode", "dio", "--flash_size", "2MB", "--flash_freq", "80m"],
        "flash_files": {"0x10000": "app.bin", "0x0": "bootloader/bootloader.bin", "0x8000": "partition_table.bin"},
        "extra_esptool_args": {"chip": "esp32c3", "before": "default_reset", "after": "hard_reset"}}))
    return build


def test_flash_command_from_flasher_args(tmp_path):
    cmd = F.flash_command(_fake_build(tmp_path), "/dev/ttyUSB0", 921600, python="py")
    assert cmd[:9] == ["py", "-m", "esptool", "--chip", "esp32c3", "-p", "/dev/ttyUSB0", "-b", "921600"]
    assert "write-flash" in cmd and "--flash-mode" in cmd
    tail = cmd[-6:]
    assert tail == ["0x0", "bootloader/bootloader.bin", "0x8000", "partition_table.bin", "0x10000", "app.bin"]


def test_flash_without_build_says_what_to_do(tmp_path):
    (tmp_path / "firmware").mkdir()
    with pytest.raises(TargetError, match="idf.py build"):
        F.flash(tmp_path, "/dev/ttyUSB0")


def test_flash_of_another_targets_folder_says_what_to_do_with_it(tmp_path):
    """A Pi folder (its report names rpi4) is not an ESP32 firmware: one line pointing to its README, not
    to idf.py; an empty folder is not a deploy folder."""
    import json
    pi = tmp_path / "pi"
    pi.mkdir()
    (pi / "report.json").write_text(json.dumps({"target": "rpi4"}))
    with pytest.raises(TargetError, match="is a rpi4 deploy folder: `grpo-edge flash` takes an ESP32 one; copy it "
                                          "to the Pi and follow its README.md"):
        F.flash(pi, "/dev/ttyUSB0")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TargetError, match="not an ESP32 deploy folder"):
        F.flash(tmp_path / "empty", "/dev/ttyUSB0")


def test_flash_with_real_esptool_and_missing_port(tmp_path):
    need_module("esptool")
    _fake_build(tmp_path)
    with pytest.raises(TargetError, match="esptool failed"):
        F.flash(tmp_path, "/dev/does-not-exist-grpo", watch=False)
