"""Micro-batches: one minibatch's forward/backward in pieces sized to a memory budget (Python 3.6 safe).

The trainer's update splits each minibatch of samples into micro-batches whose activations fit
`training.micro_batch_mb` (default: 128 MB on the CPU, sized from the free memory on CUDA: the trainer's
_activation_budget_mb), backpropagates each one with a weight, and takes the same
single optimizer step as before: the weights make the summed micro-batch losses equal the minibatch
loss, so the accumulated gradient is the unsplit one (tests/test_microbatch.py). 0 turns splitting off.

The size comes from the rollout's sequence length and the model's width, with an upper estimate of
what a pre-LN transformer keeps for backward, in fp32:

    per sample  =  4 bytes * tokens * (n_layer * (16 * width + 2 * n_head * tokens) + 3 * out_width)

(16 * width: layer-norm inputs, q, k, v, attention output and projection, the 4x MLP hidden and its
activation; 2 * n_head * tokens: attention scores and their softmax; 3 * out_width: the logits,
log-softmax and softmax); an MLP keeps 2 * hidden per layer. With gradient checkpointing every k-th block
keeps only its input (width) and one block at a time is recomputed in backward, so the same budget takes
larger micro-batches: checkpointing turns into fewer passes at the same memory. Small models (the CartPole
MLP) fit in one micro-batch and run as before; convolutional models have no estimate and are not split; the seed-size
micro-gpt at 256 samples x 72 tokens splits into pieces of ~15 samples.
"""
import torch


def tokens_per_sample(rollout):
    """Positions a sample runs through the model: the completion / episode length (mask's T) plus any
    token-id input of fixed width (a text prompt or source); float inputs (observations) add nothing."""
    t = int(rollout.mask.shape[1])
    for v in rollout.inputs.values():
        if torch.is_tensor(v) and v.dim() == 2 and not v.is_floating_point():
            t += int(v.shape[1])
    return t


def floats_per_token(policy, tokens):
    """Upper estimate of the activations one position keeps for backward, in floats, from the model's
    config(): a transformer (d_model, n_layer, n_head), an MLP (hidden, num_layers); None for other
    models (convolutional ones: no estimate, no split)."""
    cfg = policy.config() if hasattr(policy, "config") else {}
    out = int(cfg.get("out_dim") or cfg.get("vocab_size") or cfg.get("n_actions") or 1)
    if cfg.get("d_model"):
        width, n_head = int(cfg["d_model"]), int(cfg.get("n_head") or cfg.get("nhead") or 1)
        n_layer = int(cfg.get("n_layer") or cfg.get("num_layers") or 1)
        per_layer = 16 * width + 2 * n_head * tokens
        k = int(getattr(policy, "checkpoint_interval", 0) or 0)
        if k > 0:       # gradient checkpointing: every k-th block keeps only its input, one is recomputed at a time
            ckpt = (n_layer + k - 1) // k
            return (n_layer - ckpt) * per_layer + ckpt * width + per_layer + 3 * out
        return n_layer * per_layer + 3 * out
    if cfg.get("hidden"):
        return int(cfg.get("num_layers") or 2) * 2 * int(cfg["hidden"]) + 3 * out
    return None


def micro_batch_size(policy, rollout, budget_mb):
    """Samples per micro-batch for this rollout under `budget_mb` MB; 0 = no split (no budget, or a
    model without an estimate)."""
    if not budget_mb or budget_mb <= 0:
        return 0
    tokens = tokens_per_sample(rollout)
    per_token = floats_per_token(policy, tokens)
    if per_token is None:
        return 0
    return max(1, int(budget_mb * 2 ** 20 // (4 * tokens * per_token)))


def split(idx, size):
    """Consecutive pieces of the index tensor `idx` of at most `size` (size 0: one piece)."""
    if size <= 0 or size >= len(idx):
        return [idx]
    return [idx[i:i + size] for i in range(0, len(idx), size)]


def weights(parts, mask, loss_type, constant_denominator=False):
    """Per-piece factors that make sum(weight_k * loss(piece_k)) == loss(all pieces together).

    parts: index tensors into `mask` (the minibatch's (n, T) loss mask, rows in the order of the
    concatenated parts). Losses averaged over samples (grpo, dr_grpo) weigh a piece by its share of the
    samples; losses averaged over tokens (bnpo, the critic's value loss) by its share of the real
    tokens; a loss with a fixed denominator (dapo with num_tokens_total) by 1.
    """
    n = float(sum(len(p) for p in parts))
    if loss_type == "dapo" and constant_denominator:
        return [1.0] * len(parts)
    if loss_type in ("bnpo", "tokens"):
        tok = [float(mask[p].sum()) for p in parts]
        total = sum(tok)
        if total > 0:
            return [t / total for t in tok]
    return [len(p) / n for p in parts]

