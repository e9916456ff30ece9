#!/usr/bin/env bash
# The README's test command: set up .venv (ci/setup.sh), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
.venv/bin/python -m pytest -q -ra "$@"
