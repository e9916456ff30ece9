"""grpo_edge.core.adam against torch.optim: same updates, interchangeable state dicts, same schedule,
same clipping."""
import copy
import math

import pytest
import torch

from grpo_edge.core import adam
from grpo_edge.core.trainer import lr_lambda


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def _train(model, opt, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 5, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_same_updates_as_torch_adam(wd):
    a, b = _model(), _model()
    ref = (torch.optim.AdamW(a.parameters(), lr=3e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=wd) if wd
           else torch.optim.Adam(a.parameters(), lr=3e-3, betas=(0.9, 0.99), eps=1e-8))
    ours = adam.Adam(b.parameters(), lr=3e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=wd, decoupled=wd > 0)
    _train(a, ref, 20)
    _train(b, ours, 20)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), float((p - q).abs().max())


def test_state_dicts_move_both_ways():
    a, b, c = _model(), _model(), _model()
    ref = torch.optim.Adam(a.parameters(), lr=1e-2)
    _train(a, ref, 5)
    b.load_state_dict(a.state_dict())
    ours = adam.Adam(b.parameters(), lr=1e-2)
    ours.load_state_dict(ref.state_dict())          # a torch.optim checkpoint resumes here
    _train(a, ref, 5, seed=2)
    _train(b, ours, 5, seed=2)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7)
    c.load_state_dict(b.state_dict())
    back = torch.optim.Adam(c.parameters(), lr=1e-2)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))     # and the other way (torch keeps references)
    _train(b, ours, 3, seed=3)
    _train(c, back, 3, seed=3)
    for p, q in zip(b.parameters(), c.parameters()):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError):
        adam.Adam(list(c.parameters())[:2]).load_state_dict(ours.state_dict())


def test_schedule_matches_lambda_lr():
    f = lr_lambda("cosine", 3, 20)
    a, b = _model(), _model()
    ref_opt = torch.optim.Adam(a.parameters(), lr=0.1)
    ref = torch.optim.lr_scheduler.LambdaLR(ref_opt, f)
    ours = adam.LambdaSchedule(adam.Adam(b.parameters(), lr=0.1), f)
    for _ in range(25):
        assert math.isclose(ref.get_last_lr()[0], ours.get_last_lr()[0], rel_tol=1e-12)
        ref_opt.step()
        ref.step()
        ours.step()
    again = adam.LambdaSchedule(adam.Adam(b.parameters(), lr=0.1), f)
    again.load_state_dict(ref.state_dict())
    assert again.last_epoch == ref.last_epoch and again.get_last_lr() == ref.get_last_lr()


@pytest.mark.parametrize("max_norm", [0.0, 0.05, 100.0])
def test_clip_matches_torch(max_norm):
    a, b = _model(), _model()
    for m in (a, b):
        m(torch.ones(4, 5)).pow(2).sum().backward()
    n_ref = torch.nn.utils.clip_grad_norm_(list(a.parameters()), max_norm if max_norm > 0 else float("inf"))
    n_ours = adam.clip_grad_norm(list(b.parameters()), max_norm)
    assert math.isclose(float(n_ref), float(n_ours), rel_tol=1e-6)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-6, atol=1e-9)
