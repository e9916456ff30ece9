"""Flash a built firmware with esptool and read the firmware's result lines back over the serial port.

    grpo-edge flash DIR --port /dev/ttyUSB0
    -> python -m esptool --chip <chip> -p PORT -b BAUD write-flash <args from build/flasher_args.json>
    -> monitor(PORT): waits for the three GRPO_EDGE lines (checksum, timing, done)

The firmware must be built first (`idf.py build` in DIR/firmware, which writes build/flasher_args.json).
"""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from grpo_edge.errors import TargetError

LINE = re.compile(r"GRPO_EDGE\s+(.*)$")
KV = re.compile(r"(\w+)=(\S+)")


def parse_line(line: str) -> dict:
    """One firmware line -> its key=value fields ({} if not a GRPO_EDGE line; {'done': True} at the end)."""
    m = LINE.search(line.strip())
    if not m:
        return {}
    rest = m.group(1).strip()
    if rest == "done":
        return {"done": True}
    out = {}
    for k, v in KV.findall(rest):
        if k in ("checksum", "expected"):
            out[k] = int(v, 16)
        elif k in ("vectors", "runs"):
            out[k] = int(v)
        elif k == "us_per_inference":
            out[k] = float(v)
        else:
            out[k] = v
    return out


def monitor(port, baud: int = 115200, timeout: float = 30.0, reset: bool = False) -> dict:
    """Read lines from `port` until 'GRPO_EDGE done' (or timeout); return the parsed results:
    {model, vectors, checksum, expected, status, checksum_ok, us_per_inference, runs, lines}."""
    try:
        import serial
    except ImportError:
        raise TargetError("pyserial is needed for the monitor (pip install pyserial)")
    try:
        s = serial.Serial(str(port), baud, timeout=0.1)
    except (serial.SerialException, OSError) as e:
        raise TargetError("cannot open serial port %s: %s" % (port, e))
    res, buf, lines = {}, b"", []
    deadline = time.monotonic() + timeout
    try:
        if reset:                     # EN pulse through RTS, as idf.py monitor does
            s.rts = True
            time.sleep(0.1)
            s.rts = False
        while time.monotonic() < deadline:
            chunk = s.read(256)
            if not chunk:
                continue
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                text = raw.decode("utf-8", errors="replace").rstrip("\r")
                lines.append(text)
                res.update(parse_line(text))
                if res.get("done"):
                    return _finish(res, lines)
    finally:
        s.close()
    if "checksum" in res or "us_per_inference" in res:
        res["timed_out"] = True
        return _finish(res, lines)
    raise TargetError("no GRPO_EDGE result lines on %s within %.0f s (%d other lines read)" % (port, timeout, len(lines)))


def _finish(res, lines):
    res.pop("done", None)
    if "checksum" in res and "expected" in res:
        res["checksum_ok"] = res["checksum"] == res["expected"] and res.get("status") == "OK"
    res["lines"] = [ln for ln in lines if "GRPO_EDGE" in ln]
    return res


def flash_command(build_dir, port, baud: int = 460800, python=None) -> list:
    """The esptool command line for a built ESP-IDF project (from build/flasher_args.json)."""
    build = Path(build_dir)
    fa = build / "flasher_args.json"
    if not fa.is_file():
        raise TargetError("no built firmware: %s missing (run `idf.py build` in %s first)" % (fa, build.parent))
    try:
        args = json.loads(fa.read_text())
        files = args["flash_files"]
        extra = args.get("extra_esptool_args", {})
    except (ValueError, KeyError) as e:
        raise TargetError("%s is not an ESP-IDF flasher_args.json (%s)" % (fa, e))
    cmd = [python or sys.executable, "-m", "esptool", "--chip", extra.get("chip", "auto"), "-p", str(port),
           "-b", str(baud), "--before", extra.get("before", "default_reset").replace("_", "-"),
           "--after", extra.get("after", "hard_reset").replace("_", "-"), "write-flash"]
    cmd += [a.replace("_", "-") if a.startswith("--") else a for a in args.get("write_flash_args", [])]
    for addr in sorted(files, key=lambda a: int(a, 16)):
        cmd += [addr, files[addr]]
    return cmd


def _check_esp32_folder(d) -> None:
    """A folder `flash` can take: an ESP32 deploy folder (its report names an esp32 target), or an ESP-IDF
    project; another target's folder is one line saying what to do with it instead."""
    if not d.is_dir():
        raise TargetError("deploy folder not found: %s" % d)
    rep = d / "report.json"
    target = None
    if rep.is_file():
        try:
            target = json.loads(rep.read_text()).get("target")
        except ValueError:
            target = None
    if target and not str(target).startswith("esp32"):
        how = {"rpi": "copy it to the Pi and follow its README.md", "jetson": "copy it to the Jetson and run "
               "build_engine.sh there (its README.md)"}
        raise TargetError("%s is a %s deploy folder: `grpo-edge flash` takes an ESP32 one; %s" % (
            d, target, next((v for k, v in how.items() if str(target).startswith(k)), "see its report.md")))
    if not any((d / n).exists() for n in ("firmware", "CMakeLists.txt", "build")):
        raise TargetError("%s is not an ESP32 deploy folder (no firmware/): deploy with --target esp32* first" % d)


def flash(dir, port, baud: int = 460800, monitor_baud: int = 115200, timeout: float = 60.0,  # noqa: A002
          watch: bool = True) -> dict:
    """Flash DIR/firmware/build with esptool, then (watch=True) read the result lines back.
    Adds measured-device figures to DIR/report.json when it exists."""
    d = Path(dir)
    _check_esp32_folder(d)
    build = d / "firmware" / "build" if (d / "firmware").is_dir() else d / "build"
    cmd = flash_command(build, port, baud)
    r = subprocess.run(cmd, cwd=str(build), capture_output=True, text=True)
    if r.returncode != 0:
        err = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        raise TargetError("esptool failed (exit %d): %s" % (r.returncode, next(
            (ln.strip() for ln in err if "error" in ln.lower()), err[-1] if err else "?")))
    out = {"esptool": " ".join(cmd)}
    if watch:
        out.update(monitor(port, monitor_baud, timeout))
        _update_report(d, out, port)
    return out


def _update_report(d: Path, res: dict, port) -> None:
    rp = d / "report.json"
    if not rp.is_file() or "us_per_inference" not in res:
        return
    from grpo_edge.report import atomic_write_text
    data = json.loads(rp.read_text())
    src = "firmware esp_timer over %d runs, serial %s" % (res.get("runs", 0), port)
    data.setdefault("figures", {})["device_latency_s"] = {
        "value": res["us_per_inference"] * 1e-6, "unit": "s", "how": "measured-device", "source": src}
    data["figures"]["device_checksum_ok"] = {"value": bool(res.get("checksum_ok")), "unit": "",
                                             "how": "measured-device", "source": "firmware vs NumPy reference"}
    atomic_write_text(rp, json.dumps(data, indent=2, default=str))
