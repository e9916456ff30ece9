"""Debugging helpers named as in the seed document."""


def plot_grad_flow(named_parameters, path="grad_flow.png"):
    """Write a bar chart of per-layer gradient L2 norms (log scale) to `path`; returns {name: norm}.

    Call after backward(). Vanishing layers show as bars near the floor, exploding ones tower over the
    rest: the seed document's tool for diagnosing an oscillating loss.
    """
    from grpo_edge.plots import _plt, save_figure_atomic
    names, norms = [], []
    for name, p in named_parameters:
        if p.requires_grad and p.grad is not None and p.dim() > 1:   # weights, not biases / norms
            names.append(name)
            norms.append(float(p.grad.detach().norm()))
    if not names:
        raise ValueError("plot_grad_flow: no parameter has a gradient (call it after loss.backward())")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(names)), 4))
    ax.bar(range(len(names)), [max(n, 1e-12) for n in norms], color="tab:blue")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=90, fontsize=7)
    ax.set_ylabel("gradient L2 norm")
    ax.set_title("gradient flow")
    save_figure_atomic(fig, path)
    plt.close(fig)
    return dict(zip(names, norms))
