#!/usr/bin/env bash
# Set up a virtual environment in .venv with everything the project and its tests need.
# Safe to re-run. torch==2.13.0 is installed FIRST: a plain `torch` requirement could pull a multi-GB
# CUDA build, while 2.13.0 resolves to the CPU wheel on machines of this kind.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install -q torch==2.13.0
fi
EXTRAS=${GRPO_EDGE_EXTRAS:-tasks,robots,export,esp32,tflite,dev}
.venv/bin/pip install -q -e ".[${EXTRAS}]"
# System tools for the ESP32 simulation (rv32 cross compiler) and instruction counting (valgrind).
if [ "${GRPO_EDGE_SKIP_APT:-0}" != "1" ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  need=""
  command -v riscv64-unknown-elf-gcc >/dev/null 2>&1 || need="$need gcc-riscv64-unknown-elf"
  command -v valgrind >/dev/null 2>&1 || need="$need valgrind"
  command -v gcc >/dev/null 2>&1 || need="$need gcc"
  # sanitizer runtimes for the ASan/UBSan builds of the generated C (device-side bounds checks)
  dpkg -s libasan8 >/dev/null 2>&1 || need="$need libasan8"
  dpkg -s libubsan1 >/dev/null 2>&1 || need="$need libubsan1"
  if [ -n "$need" ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need) >/dev/null \
      || echo "warning: apt-get could not install:$need (tests needing them will skip)" >&2
  fi
fi
