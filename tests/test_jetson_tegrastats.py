"""tegrastats parser on lines in the formats of JetPack 4 (Nano) and JetPack 5/6 (Orin), and the sampler."""
import os
import stat
import sys
import time

import pytest

from grpo_edge.runtime.tegrastats import TegrastatsSampler, available, parse_line, summarize

# Composed from the documented formats (field order and spellings as tegrastats prints them).
NANO_MAXN = ("RAM 2394/3956MB (lfb 71x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB) "
             "CPU [12%@1479,5%@1479,9%@1479,8%@1479] EMC_FREQ 3%@1600 GR3D_FREQ 0%@921 APE 25 PLL@31C "
             "CPU@33.5C PMIC@100C GPU@32C AO@40.5C thermal@32.75C POM_5V_IN 2750/2750 POM_5V_GPU 0/0 "
             "POM_5V_CPU 445/445")
NANO_5W_BUSY = ("RAM 3012/3956MB (lfb 12x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB) "
                "CPU [45%@918,38%@918,off,off] EMC_FREQ 21%@1600 GR3D_FREQ 99%@640 APE 25 PLL@38C CPU@40C "
                "PMIC@100C GPU@39.5C AO@46C thermal@39.75C POM_5V_IN 4685/3102 POM_5V_GPU 1528/412 "
                "POM_5V_CPU 788/470")
ORIN_JP6 = ("11-14-2024 22:30:12 RAM 2980/7620MB (lfb 6x4MB) SWAP 18/3810MB (cached 0MB) "
            "CPU [12%@1510,8%@1510,10%@1510,9%@1510,off,off] EMC_FREQ 0%@2133 GR3D_FREQ 0%@[305] "
            "NVDEC off NVJPG off NVJPG1 off VIC off OFA off APE 200 cpu@48.5C soc2@47.218C soc0@46.968C "
            "gpu@47.5C tj@48.5C soc1@47.343C VDD_IN 4981mW/4981mW VDD_CPU_GPU_CV 612mW/612mW "
            "VDD_SOC 1426mW/1426mW")
ORIN_JP5 = ("08-24-2023 13:43:34 RAM 2346/7620MB (lfb 1205x4MB) SWAP 0/3810MB (cached 0MB) "
            "CPU [1%@729,0%@729,0%@729,0%@729,0%@729,0%@729] EMC_FREQ 0%@2133 GR3D_FREQ 87%@[624] "
            "VIC_FREQ 729 APE 174 CV0@-256C CPU@46.5C SOC2@44.593C SOC0@45.156C CV1@-256C GPU@-256C "
            "tj@46.5C SOC1@44.906C CV2@-256C VDD_IN 7215mW/5342mW VDD_CPU_GPU_CV 2873mW/1034mW "
            "VDD_SOC 1693mW/1466mW")


def test_nano_line():
    s = parse_line(NANO_MAXN)
    assert s.stamp is None
    assert (s.ram_used_mb, s.ram_total_mb) == (2394, 3956)
    assert s.cpu_load == [12, 5, 9, 8] and s.cpu_mhz == [1479] * 4
    assert (s.gpu_load, s.gpu_mhz, s.emc_load) == (0, 921, 3)
    assert s.rails_mw == {"POM_5V_IN": (2750, 2750), "POM_5V_GPU": (0, 0), "POM_5V_CPU": (445, 445)}
    assert s.input_rail == "POM_5V_IN" and s.input_mw == 2750
    assert s.temps_c["CPU"] == 33.5 and s.temps_c["thermal"] == 32.75 and s.temps_c["PMIC"] == 100.0
    assert "RAM" not in s.rails_mw and "SWAP" not in s.rails_mw and "IRAM" not in s.rails_mw


def test_nano_cores_off():
    s = parse_line(NANO_5W_BUSY)
    assert s.cpu_load == [45, 38, None, None] and s.cpu_mhz == [918, 918, None, None]
    assert (s.gpu_load, s.gpu_mhz) == (99, 640)
    assert s.rails_mw["POM_5V_IN"] == (4685, 3102) and s.input_mw == 4685


def test_orin_jetpack6_line():
    s = parse_line(ORIN_JP6)
    assert s.stamp == "11-14-2024 22:30:12"
    assert (s.ram_used_mb, s.ram_total_mb) == (2980, 7620)
    assert s.cpu_load == [12, 8, 10, 9, None, None]
    assert (s.gpu_load, s.gpu_mhz) == (0, 305)
    assert s.rails_mw == {"VDD_IN": (4981, 4981), "VDD_CPU_GPU_CV": (612, 612), "VDD_SOC": (1426, 1426)}
    assert s.input_rail == "VDD_IN" and s.input_mw == 4981
    assert s.temps_c["tj"] == 48.5 and s.temps_c["soc0"] == 46.968


def test_orin_jetpack5_line():
    s = parse_line(ORIN_JP5)
    assert (s.gpu_load, s.gpu_mhz) == (87, 624)
    assert s.temps_c["GPU"] == -256.0      # sensors that are off read -256C
    assert s.rails_mw["VDD_IN"] == (7215, 5342)


def test_not_a_tegrastats_line():
    with pytest.raises(ValueError, match="not a tegrastats line"):
        parse_line("Segmentation fault (core dumped)")


def test_summarize_uses_instant_values():
    out = summarize([parse_line(NANO_MAXN), parse_line(NANO_5W_BUSY)])
    assert out["input_rail"] == "POM_5V_IN"
    assert out["input_mw_mean"] == pytest.approx((2750 + 4685) / 2)
    assert out["input_mw_max"] == 4685 and out["gpu_load_mean"] == pytest.approx(49.5)


def test_sampler_missing_tool():
    with pytest.raises(RuntimeError, match="not found"):
        TegrastatsSampler(100, command="tegrastats-that-does-not-exist").start()


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX shebang script")
def test_sampler_with_stand_in(tmp_path):
    """The real tegrastats exists only on a Jetson; this stand-in executable prints the Orin sample line
    at the requested --interval so the subprocess/thread/window logic runs for real."""
    exe = tmp_path / "tegrastats"
    exe.write_text("#!%s\nimport sys, time\nms = int(sys.argv[sys.argv.index('--interval') + 1])\n"
                   "print('starting', flush=True)\n"
                   "while True:\n    print(%r, flush=True)\n    time.sleep(ms / 1000.0)\n" % (sys.executable, ORIN_JP6))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    assert available(str(exe))
    with TegrastatsSampler(20, command=str(exe)) as ts:
        time.sleep(0.5)
    summary = ts.summary()
    assert summary["samples"] >= 3 and summary["input_rail"] == "VDD_IN"
    assert summary["input_mw_mean"] == 4981 and summary["bad_lines"] == 1
    assert ts._proc is None and os.path.exists(str(exe))
