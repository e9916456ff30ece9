import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)   # tiny models: one thread is faster and steadier on a shared 2-core machine


def require_tools():
    """GRPO_EDGE_REQUIRE_TOOLS=1 turns 'tool missing' skips into failures."""
    return os.environ.get("GRPO_EDGE_REQUIRE_TOOLS") == "1"


@pytest.fixture
def root():
    return ROOT
