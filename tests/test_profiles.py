"""Device profiles: every one loads, every figure has a source and a label, they ship in the wheel."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grpo_edge.errors import TargetError
from grpo_edge.targets.profiles import (LABELS, check_profile, estimate_energy, estimate_latency, figure,
                                        list_profiles, load_profile)

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = {"rpi4", "rpi5", "jetson-nano", "jetson-orin-nano", "esp32", "esp32s3", "esp32c3"}


def test_all_expected_profiles_exist():
    assert EXPECTED <= set(list_profiles())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_loads_and_every_figure_has_a_source(name):
    p = load_profile(name)
    assert p["name"] == name and p["family"] in ("rpi", "jetson", "esp32")
    assert check_profile(p) == []
    for key, f in p["figures"].items():
        assert len(str(f["source"]).strip()) > 10, key
        assert f["label"] in LABELS, key
        assert f["unit"], key
    memory = figure(p, "ram_bytes") or figure(p, "sram_bytes")
    assert memory and memory > 0
    assert figure(p, "active_power_w") > figure(p, "idle_power_w") > 0
    # every estimate of ours says so
    for key in ("fp32_macs_per_s", "int8_macs_per_s", "call_overhead_s"):
        assert p["figures"][key]["label"] == "estimate"


def test_alias_and_case():
    assert load_profile("jetson-orin")["name"] == "jetson-orin-nano"
    assert load_profile("RPI4")["name"] == "rpi4"


def test_unknown_target_lists_known_ones():
    with pytest.raises(TargetError) as e:
        load_profile("rpi9")
    msg = str(e.value)
    assert "rpi9" in msg and "rpi4" in msg and "esp32c3" in msg and "\n" not in msg


def test_estimates_carry_their_method():
    p = load_profile("rpi4")
    lat = estimate_latency(p, 10000, "int8")
    assert lat["value"] > 0 and "int8_macs_per_s" in lat["source"]
    en = estimate_energy(p, lat["value"], lat["source"])
    assert en["value"] == pytest.approx(figure(p, "active_power_w") * lat["value"])
    with pytest.raises(TargetError):
        estimate_latency(p, 1, "fp16")


def test_profiles_ship_inside_the_wheel(tmp_path):
    # Build from a copy of the package files only (fast, offline, leaves the checkout untouched).
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copytree(ROOT / "targets", src / "targets")
    shutil.copytree(ROOT / "grpo_edge", src / "grpo_edge", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "w"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(wheels), "--no-deps",
                        "--no-build-isolation", "-q"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip("pip wheel failed here: %s" % r.stderr.strip().splitlines()[-1:])
    whl = next(wheels.glob("grpo_edge-*.whl"))
    names = zipfile.ZipFile(whl).namelist()
    for name in EXPECTED:
        assert "grpo_edge/profiles/%s.yaml" % name in names
    # and load_profile works from the unpacked wheel, away from the checkout
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", "import grpo_edge.targets.profiles as p; "
                          "print(p.profiles_dir()); print(p.load_profile('esp32c3')['name'])"],
                         capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    folder, name = out.stdout.split()
    assert folder.startswith(str(site)) and name == "esp32c3"
