"""`from grpo.utils import plot_grad_flow`, as the seed document writes it: grpo_edge.utils'."""
from grpo_edge.utils import plot_grad_flow  # noqa: F401
