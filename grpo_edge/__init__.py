"""grpo-edge: train small models with GRPO and ship them to edge devices."""

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy public API, so `import grpo_edge` stays light (no torch, no gymnasium until needed).
    if name == "GRPOTrainer":
        from grpo_edge.training_run import GRPOTrainer
        return GRPOTrainer
    if name == "BilingualPairLoader":
        from grpo_edge.data.bilingual import BilingualPairLoader
        return BilingualPairLoader
    if name == "load_config":
        from grpo_edge.config import load_config
        return load_config
    raise AttributeError("module 'grpo_edge' has no attribute %r" % name)
