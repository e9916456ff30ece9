"""The seed document's import names, as aliases of grpo_edge (the article writes `from grpo.datasets import
BilingualPairLoader`, `from grpo.utils import plot_grad_flow`, `GRPOTrainer(...)`). New code imports grpo_edge.

    from grpo.datasets import BilingualPairLoader     # = grpo_edge.data.bilingual.BilingualPairLoader
    from grpo.utils import plot_grad_flow             # = grpo_edge.utils.plot_grad_flow
    from grpo import GRPOTrainer                      # = grpo_edge.GRPOTrainer
"""


def __getattr__(name):
    import grpo_edge
    return getattr(grpo_edge, name)
