#!/usr/bin/env bash
# Issue-7 benchmarks with their short defaults (~15-20 min on 2 shared cores); results in benchmarks/results/*.json.
#
#     bash benchmarks/run_all.sh                # all five (issue 7, and issue 14: command_time)
#     bash benchmarks/run_all.sh vs_trl vs_sb3  # a subset
#
# Needs the bench extra for the peers: pip install trl transformers stable-baselines3 (see docs/results.md).
# Each script takes flags for longer runs (--rounds, --steps, --seeds ...; see its docstring).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ALL="grpo_vs_ppo vs_trl vs_sb3 command_time microgpt_memory"
for b in ${@:-$ALL}; do
  echo "=== benchmarks/$b.py"
  "$PY" "benchmarks/$b.py"
done
