"""Adam / AdamW and a LambdaLR-style schedule without torch.optim (Python 3.6 / torch 1.10 safe).

Why not torch.optim: on torch >= 2 building any torch.optim optimizer imports torch._dynamo (3-4 s on
this machine, most of a CartPole run's start-up), and Adam's default path here runs one chain of small
kernels per parameter tensor. This Adam updates all parameters of a group with multi-tensor (foreach)
operations in torch.optim.Adam's order of arithmetic (same result to float rounding; tests/test_adam.py)
and reads and writes torch.optim.Adam's state-dict layout, so checkpoints move both ways.
LambdaSchedule is torch.optim.lr_scheduler.LambdaLR's behaviour (lr = base_lr * f(step)) and state keys.
"""
import math

import torch

_HAS_LERP = hasattr(torch, "_foreach_lerp_")


# The update's temporaries (Adam's denominator, L2 decay's grad + wd * w) are as large as the tensors updated
# at once: updating in chunks of at most this many elements (16 MB of fp32) keeps them from adding a fourth
# copy of the weights to the peak (85M-parameter micro-gpt on an H200: the peak was weights + grads + two
# moments + one weight-sized denominator, docs/results.md). Small models are one chunk, as before.
CHUNK_NUMEL = 1 << 22


def _chunks(params, max_numel):
    """params split, in order, into runs of at most max_numel elements (a larger tensor is a run alone)."""
    run, size = [], 0
    for p in params:
        n = p.numel()
        if run and size + n > max_numel:
            yield run
            run, size = [], 0
        run.append(p)
        size += n
    if run:
        yield run


class Adam(object):
    """Adam (L2 weight decay) or, with decoupled=True, AdamW. No amsgrad, no maximize."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
        self.defaults = {"lr": float(lr), "betas": (float(betas[0]), float(betas[1])), "eps": float(eps),
                         "weight_decay": float(weight_decay), "amsgrad": False, "maximize": False,
                         "foreach": True, "capturable": False, "differentiable": False, "fused": None}
        if decoupled:
            self.defaults["decoupled_weight_decay"] = True
        group = dict(self.defaults)
        group["params"] = [p for p in params]
        self.param_groups = [group]
        self.state = {}

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def _state(self, p):
        st = self.state.get(p)
        if not st:
            st = {"step": torch.zeros((), dtype=torch.float32),
                  "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                  "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            self.state[p] = st
        return st

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        with torch.no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if not params:
                    continue
                for p in params:
                    st = self._state(p)
                    if not torch.is_tensor(st["step"]):
                        st["step"] = torch.tensor(float(st["step"]))
                steps = [self.state[p]["step"] for p in params]
                torch._foreach_add_(steps, 1.0)
                by_step = {}
                for p, step in zip(params, torch.stack(steps).tolist()):      # one read of all step counts
                    by_step.setdefault(step, []).append(p)
                for step, ps in by_step.items():
                    for chunk in _chunks(ps, CHUNK_NUMEL):
                        self._update(group, chunk, step)
        return loss

    def _update(self, group, params, step):
        beta1, beta2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        grads = [p.grad for p in params]
        exp_avgs = [self.state[p]["exp_avg"] for p in params]
        exp_avg_sqs = [self.state[p]["exp_avg_sq"] for p in params]
        if wd != 0:
            if group.get("decoupled_weight_decay"):
                torch._foreach_mul_(params, 1.0 - lr * wd)
            else:
                grads = torch._foreach_add(grads, params, alpha=wd)
        if _HAS_LERP:
            torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        else:
            torch._foreach_mul_(exp_avgs, beta1)
            torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - beta2)
        step_size = lr / (1.0 - beta1 ** step)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, math.sqrt(1.0 - beta2 ** step))
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(params, exp_avgs, denom, -step_size)

    def state_dict(self):
        """torch.optim's layout: parameters numbered in group order."""
        index, groups = {}, []
        for group in self.param_groups:
            g = dict((k, v) for k, v in group.items() if k != "params")
            g["params"] = []
            for p in group["params"]:
                index[p] = len(index)
                g["params"].append(index[p])
            groups.append(g)
        state = dict((index[p], dict(st)) for p, st in self.state.items() if p in index and st)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(mine["params"]) for g, mine in zip(groups, self.param_groups)):
            raise ValueError("optimizer state does not match the parameters (different model?)")
        self.state = {}
        for saved, mine in zip(groups, self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = tuple(v) if k == "betas" else v
            for i, p in zip(saved["params"], mine["params"]):
                st = state_dict["state"].get(i)
                if st:
                    self.state[p] = {"step": torch.as_tensor(st["step"], dtype=torch.float32).clone(),
                                     "exp_avg": st["exp_avg"].to(p.device, p.dtype).clone(),
                                     "exp_avg_sq": st["exp_avg_sq"].to(p.device, p.dtype).clone()}


class LambdaSchedule(object):
    """lr of each group = its initial lr * fn(number of step() calls), like LambdaLR."""

    def __init__(self, optimizer, fn):
        self.optimizer, self.fn = optimizer, fn
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = 0
        self._step_count = 1
        self._apply()

    def _apply(self):
        self._last_lr = []
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * self.fn(self.last_epoch)
            self._last_lr.append(group["lr"])

    def step(self):
        self.last_epoch += 1
        self._step_count += 1
        self._apply()

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        return {"base_lrs": list(self.base_lrs), "last_epoch": self.last_epoch, "_step_count": self._step_count,
                "_last_lr": list(self._last_lr), "lr_lambdas": [None] * len(self.base_lrs), "verbose": False,
                "_get_lr_called_within_step": False}

    def load_state_dict(self, state):
        self.base_lrs = list(state["base_lrs"])
        self.last_epoch = int(state["last_epoch"])
        self._step_count = int(state.get("_step_count", self.last_epoch + 1))
        self._last_lr = list(state.get("_last_lr", self.base_lrs))


def clip_grad_norm(params, max_norm):
    """torch.nn.utils.clip_grad_norm_ (L2) with multi-tensor operations; returns the total norm (a tensor).
    max_norm <= 0 or inf: only measure. torch.nn.utils' own on CPU measures one tensor at a time."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if not hasattr(torch, "compile"):            # torch < 2: its own (foreach norm / tensor scale are newer)
        return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if 0 < max_norm < float("inf"):
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        torch._foreach_mul_(grads, coef)
    return total
