"""Policy losses, one pure function per variant, chosen by a string (Python 3.6 safe).

All take token/step-level tensors of shape (N, T) with a mask; sequence-level advantages are broadcast
to (N, T) by the caller. The clipped surrogate is PPO's (Schulman et al. 2017) as used by GRPO
(Shao et al. 2024, DeepSeekMath); the variants differ in how per-token losses are aggregated:

  grpo     mean over each sequence's tokens, then mean over sequences (DeepSeekMath). Long and short
           completions get equal weight, so each token of a long one counts less (length bias).
  bnpo     sum over all tokens of the minibatch / number of tokens in the minibatch (batch-normalized).
  dapo     sum over tokens / number of tokens in the WHOLE rollout batch (`num_tokens_total`), so the
           result does not depend on how the batch is split into minibatches (Yu et al. 2025, DAPO).
  dr_grpo  sum over tokens / (N * max_len): a constant normaliser, no length bias (Liu et al. 2025,
           "Understanding R1-Zero-like training"; pair it with scale_rewards="none").
Sequence-level importance ratio (GSPO, Zheng et al. 2025): `importance_level="sequence"` replaces the
per-token ratio with exp(mean over the sequence's tokens of (logp - old_logp)).
"""
import torch

from grpo_edge.core.defaults import IMPORTANCE_LEVELS, KL_ESTIMATORS, LOSS_TYPES  # noqa: F401  (one source)


def kl_penalty(logp, ref_logp, estimator="k3"):
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman, "Approximating KL").

    k1 = log r', k2 = (log r')^2 / 2, k3 = (r - 1) - log r with r = pi_ref / pi (unbiased, >= 0).
    Here log r' = logp - ref_logp. All (N, T).
    """
    log_ratio = logp - ref_logp
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio ** 2
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    raise ValueError("kl estimator must be one of %s, got %r" % (KL_ESTIMATORS, estimator))


def importance_ratio(logp, old_logp, mask, level="token"):
    """pi/pi_old per token (N, T), or GSPO's per-sequence geometric mean broadcast to (N, T)."""
    log_ratio = logp - old_logp
    if level == "token":
        return torch.exp(log_ratio)
    if level == "sequence":
        seq = (log_ratio * mask).sum(1) / mask.sum(1).clamp(min=1.0)       # (N,)
        # gradient flows through each token's logp (GSPO's sequence ratio)
        return torch.exp(seq).unsqueeze(1).expand_as(logp)
    raise ValueError("importance level must be one of %s, got %r" % (IMPORTANCE_LEVELS, level))


def clipped_surrogate(ratio, advantages, clip_eps=0.2, clip_eps_high=None):
    """Per-token negative clipped objective -min(r A, clip(r, 1-eps, 1+eps_high) A). (N, T) -> (N, T).

    clip_eps_high > clip_eps is DAPO's clip-higher (lets unlikely tokens grow, against entropy collapse).
    Also returns the per-token indicator that clipping was active.
    """
    high = clip_eps if clip_eps_high is None else clip_eps_high
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * advantages
    loss = -torch.min(unclipped, clipped)
    is_clipped = (clipped < unclipped).float()
    return loss, is_clipped


def aggregate(per_token, mask, loss_type="grpo", max_len=None, num_tokens_total=None):
    """Reduce a per-token loss (N, T) to a scalar according to `loss_type` (see module docstring)."""
    if loss_type == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dapo":
        denom = float(num_tokens_total) if num_tokens_total else mask.sum().clamp(min=1.0)
        return (per_token * mask).sum() / denom
    if loss_type == "dr_grpo":
        t = max_len if max_len is not None else per_token.shape[1]
        return (per_token * mask).sum() / (per_token.shape[0] * t)
    raise ValueError("loss_type must be one of %s, got %r" % (LOSS_TYPES, loss_type))


def policy_loss(logp, old_logp, advantages, mask, loss_type="grpo", clip_eps=0.2, clip_eps_high=None,
                importance_level="token", ref_logp=None, beta=0.0, kl_estimator="k3", entropy=None,
                entropy_coef=0.0, max_len=None, num_tokens_total=None):
    """The full GRPO policy loss and its statistics.

    logp, old_logp, mask: (N, T); advantages (N, T) or (N,) (broadcast over tokens).
    Returns (loss scalar, stats dict of floats: kl, clip_frac, entropy, ratio_mean).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1).expand_as(logp)
    ratio = importance_ratio(logp, old_logp, mask, importance_level)
    per_token, is_clipped = clipped_surrogate(ratio, advantages, clip_eps, clip_eps_high)
    kl = None
    if beta > 0.0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp (log-probs under the frozen reference policy)")
        kl = kl_penalty(logp, ref_logp, kl_estimator)
        per_token = per_token + beta * kl
    loss = aggregate(per_token, mask, loss_type, max_len, num_tokens_total)
    if entropy is not None and entropy_coef != 0.0:
        loss = loss - entropy_coef * aggregate(entropy, mask, loss_type, max_len, num_tokens_total)
    n_tok = mask.sum().clamp(min=1.0)
    stats = {
        "clip_frac": float((is_clipped * mask).sum() / n_tok),
        "ratio_mean": float((ratio.detach() * mask).sum() / n_tok),
    }
    if kl is not None:
        stats["kl"] = float((kl.detach() * mask).sum() / n_tok)
    if entropy is not None:
        stats["entropy"] = float((entropy.detach() * mask).sum() / n_tok)
    return loss, stats


def gradient_penalty(loss, params, lam, target=0.0):
    """Gradient regularization from the seed document: lam * (||g|| - target)^2.

    g is the gradient of `loss` (the clipped policy loss, before the penalty) with respect to all
    trainable policy parameters, flattened into one vector; ||g|| its L2 norm. It is built with
    create_graph=True so the penalty's own gradient (a Hessian-vector product) reaches the parameters:
    the update really differs from lam = 0. Costs one extra backward pass (double backprop).
    Returns (penalty scalar, grad norm float).
    """
    params = [p for p in params if p.requires_grad]
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    sq = [(g ** 2).sum() for g in grads if g is not None]
    gnorm = torch.sqrt(torch.stack(sq).sum() + 1e-12)
    return lam * (gnorm - target) ** 2, float(gnorm.detach())


def value_loss(values, returns, mask, old_values=None, clip=None):
    """PPO critic loss: 0.5 * (V - R)^2 averaged over real steps, optionally value-clipped."""
    err = (values - returns) ** 2
    if clip is not None and old_values is not None:
        v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.max(err, (v_clipped - returns) ** 2)
    return 0.5 * (err * mask).sum() / mask.sum().clamp(min=1.0)
