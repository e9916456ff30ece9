"""python3 -m grpo_edge.online: the on-device online trainer (grpo_edge/online/runner.py)."""
import sys

from grpo_edge.online.runner import main

sys.exit(main())
