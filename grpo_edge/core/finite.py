"""Finiteness guards of the training loop (Python 3.6 / torch 1.10 safe, torch only).

Training refuses to go on with a NaN / inf reward, loss, gradient or weight: it raises NonFiniteError
before the optimizer applies the step (gradients) or right after it (weights), so the last checkpoint
written stays the last good state and nothing non-finite is ever saved or served. Rewards are checked
in the training dtype (float32), where a user reward of 1e300 is already inf.
"""
import math

import torch

from grpo_edge.errors import NonFiniteError

# Larger weights are refused in training and in checkpoints: no policy here needs them, and one flipped
# exponent bit turns a weight of 1.3 into 1.3e38.
WEIGHT_LIMIT = 1e6
HINT = "the last checkpoint keeps the last good state; lower training.lr or check the rewards / data"


def _bad(t):
    return t is not None and torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all())


def weights_problem(tensors):
    """None, or why a set of weight tensors is unusable: 'NaN / inf' or 'beyond 1e6 (max |w| = ...)'.
    One device sync: the per-tensor maxima are reduced on the device (a NaN propagates through max)."""
    maxima = [t.detach().abs().max().float() for t in tensors
              if torch.is_tensor(t) and t.is_floating_point() and t.numel() > 0]
    if not maxima:
        return None
    worst = float(torch.stack([m.to(maxima[0].device) for m in maxima]).max())
    if not math.isfinite(worst):
        return "NaN / inf"
    if worst > WEIGHT_LIMIT:
        return "beyond %g (max |w| = %.3g)" % (WEIGHT_LIMIT, worst)
    return None


def check_rollout(ro, step):
    """Rewards (and per-step rewards / behaviour log-probs) of a rollout must be finite in float32."""
    for name in ("rewards", "step_rewards", "old_logp"):
        t = getattr(ro, name, None)
        if t is not None and torch.is_tensor(t) and t.is_floating_point() and _bad(t.float()):
            n = int((~torch.isfinite(t.float())).sum())
            raise NonFiniteError("step %d: %d %s not finite in float32 (a reward of 1e300 or NaN?); %s"
                                 % (step, n, "reward(s)" if "reward" in name else "log-prob(s)", HINT))


def check_stats(stats, step):
    """Loss-like metrics of an update must be finite."""
    for key in ("loss", "value_loss", "grad_penalty"):
        v = stats.get(key)
        if v is not None and not math.isfinite(float(v)):
            raise NonFiniteError("step %d: the %s is %r; %s" % (step, key.replace("_", " "), v, HINT))


def check_grad_norm(norm, step):
    if not math.isfinite(float(norm)):
        raise NonFiniteError("step %d: the gradient norm is %r (NaN / inf loss or gradients); %s"
                             % (step, float(norm), HINT))


def check_parameters(params, step):
    """Weights after an optimizer step must be finite and within WEIGHT_LIMIT."""
    problem = weights_problem(params)
    if problem is not None:
        raise NonFiniteError("step %d: the optimizer step made weights %s; %s" % (step, problem, HINT))
