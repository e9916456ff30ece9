#!/usr/bin/env bash
# The Jetson Nano's stack for real: Python 3.6.15 + torch 1.10.2 (JetPack 4.6) runs the online trainer.
#
#   bash ci/py36.sh            # set up .venv36 if missing, then run the check
#   bash ci/py36.sh --setup    # only set up .venv36
#
# Creates .venv36 from pyenv's 3.6.15, installs pip<22 then torch==1.10.2 + numpy (about 880 MB, 1-2 min;
# the registry serves cp36 wheels), and runs tests/py36_online_check.py with that interpreter. The
# package is not pip-installed (pyproject requires >= 3.9): the check runs with PYTHONPATH=<repo root>.
# Exit 3 with one line when pyenv's 3.6.15 is missing (the pytest wrapper turns that into a skip).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${GRPO_EDGE_VENV36:-.venv36}
if [ ! -x "$VENV/bin/python" ]; then
  PYENV_ROOT=$( (command -v pyenv >/dev/null 2>&1 && pyenv root) || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  PY36="$PYENV_ROOT/versions/3.6.15/bin/python3"
  if [ ! -x "$PY36" ]; then
    echo "py36: pyenv's Python 3.6.15 not found at $PY36 (pyenv install 3.6.15)" >&2
    exit 3
  fi
  rm -rf "$VENV.partial"
  "$PY36" -m venv "$VENV.partial"
  "$VENV.partial/bin/python" -m pip install -q "pip<22"
  # typing-extensions is pinned: its newest releases need Python >= 3.9 and pip 21 does not skip them.
  "$VENV.partial/bin/python" -m pip install -q "torch==1.10.2" numpy "typing-extensions<4.2"
  rm -rf "$VENV"
  mv "$VENV.partial" "$VENV"
  # venv scripts hard-code the folder they were made in; python itself runs fine after the move.
fi
"$VENV/bin/python" -c "import sys, torch, numpy; print('py36: Python %s, torch %s, numpy %s' % (sys.version.split()[0], torch.__version__, numpy.__version__))"
if [ "${1:-}" = "--setup" ]; then
  exit 0
fi
PYTHONPATH="$ROOT" "$VENV/bin/python" tests/py36_online_check.py "$@"
