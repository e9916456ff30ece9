"""`from grpo.datasets import BilingualPairLoader`, as the seed document writes it: grpo_edge.data.bilingual's."""
from grpo_edge.data.bilingual import BilingualPairLoader  # noqa: F401
