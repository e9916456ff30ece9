"""Loss variants and advantages against hand-computed values."""
import math

import pytest
import torch

from grpo_edge.core import advantages as A
from grpo_edge.core import losses as L


def test_group_advantages_hand_values():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    a = A.group_advantages(r, 4, "none")
    assert torch.allclose(a, torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]))
    a = A.group_advantages(r, 4, "group", eps=0.0)          # group std (population) = 0.5 -> +-1
    assert torch.allclose(a[:4], torch.tensor([1.0, -1.0, -1.0, 1.0]))
    a_eps = A.group_advantages(r, 4, "group")               # all-equal group: 0 / (0 + eps) = 0, never NaN
    assert a_eps[4:].tolist() == [0.0, 0.0, 0.0, 0.0]
    a = A.group_advantages(r, 4, "batch", eps=0.0)
    std = r.std(unbiased=False)
    assert torch.allclose(a[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]) / std)


def test_frac_zero_std_and_filter():
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 3.0, 3.0])
    assert A.frac_zero_std(r, 2) == pytest.approx(2 / 3)
    assert A.nonzero_std_groups(r, 2).tolist() == [2, 3]


def test_reward_to_go_advantages():
    # two episodes of one group: lengths 3 and 1, reward 1 per step, gamma 1
    sr = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    ret = A.discounted_returns(sr, m, 1.0)
    assert ret.tolist() == [[3.0, 2.0, 1.0], [1.0, 0.0, 0.0]]
    adv = A.reward_to_go_advantages(sr, m, 2, gamma=1.0, scale="none")
    # t=0: mean of (3, 1) = 2 -> (+1, -1); t>0: only episode 0 alive -> 0
    assert adv.tolist() == [[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]


def test_gae_matches_hand_computation():
    r = torch.tensor([[1.0, 1.0]])
    v = torch.tensor([[0.5, 0.25]])
    m = torch.ones(1, 2)
    adv, ret = A.gae(r, v, m, gamma=0.9, lam=0.8)
    d1 = 1.0 - 0.25                      # last step, no bootstrap
    d0 = 1.0 + 0.9 * 0.25 - 0.5
    assert adv[0, 1].item() == pytest.approx(d1)
    assert adv[0, 0].item() == pytest.approx(d0 + 0.9 * 0.8 * d1)
    assert torch.allclose(ret, adv + v)


def _inputs():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -0.3, 0.0]])
    old = torch.tensor([[-1.2, -1.5, -0.5], [-0.1, -0.6, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    return logp, old, mask, adv


def _per_token(logp, old, adv, eps=0.2, eps_high=None):
    hi = eps if eps_high is None else eps_high
    out = []
    for i in range(2):
        row = []
        for t in range(3):
            r = math.exp(logp[i, t] - old[i, t])
            a = float(adv[i])
            row.append(-min(r * a, min(max(r, 1 - eps), 1 + hi) * a))
        out.append(row)
    return out


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_loss_types_hand_computed(loss_type):
    logp, old, mask, adv = _inputs()
    pt = _per_token(logp, old, adv)
    if loss_type == "grpo":
        want = ((pt[0][0] + pt[0][1] + pt[0][2]) / 3 + (pt[1][0] + pt[1][1]) / 2) / 2
    elif loss_type in ("bnpo", "dapo"):
        want = (sum(pt[0]) + pt[1][0] + pt[1][1]) / 5
    else:  # dr_grpo: / (N * max_len)
        want = (sum(pt[0]) + pt[1][0] + pt[1][1]) / (2 * 4)
    loss, stats = L.policy_loss(logp, old, adv, mask, loss_type=loss_type, max_len=4)
    assert loss.item() == pytest.approx(want, rel=1e-6)
    # token 1 of sample 0: ratio e^-0.5 = 0.607 < 0.8 with A > 0 -> unclipped term smaller, no clip;
    # token 1 of sample 1: ratio e^0.3 = 1.35 > 1.2 with A < 0 -> min picks unclipped (-2*1.35): no clip
    assert 0.0 <= stats["clip_frac"] <= 1.0


def test_dapo_uses_global_token_count():
    logp, old, mask, adv = _inputs()
    pt = _per_token(logp, old, adv)
    loss, _ = L.policy_loss(logp, old, adv, mask, loss_type="dapo", num_tokens_total=10)
    assert loss.item() == pytest.approx((sum(pt[0]) + pt[1][0] + pt[1][1]) / 10)


def test_clip_higher_and_clip_fraction():
    ratio = torch.tensor([[1.25, 0.7]])
    advs = torch.tensor([[1.0, -1.0]])
    loss, clipped = L.clipped_surrogate(ratio, advs, 0.2, None)
    assert loss[0].tolist() == pytest.approx([-1.2, 0.8])
    assert clipped.tolist() == [[1.0, 1.0]]
    loss, clipped = L.clipped_surrogate(ratio, advs, 0.2, 0.28)
    assert loss[0].tolist() == pytest.approx([-1.25, 0.8])
    assert clipped.tolist() == [[0.0, 1.0]]


def test_kl_estimators():
    logp = torch.tensor([[-1.0]])
    ref = torch.tensor([[-1.5]])
    lr = 0.5
    assert L.kl_penalty(logp, ref, "k1").item() == pytest.approx(lr)
    assert L.kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * lr ** 2)
    assert L.kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-lr) - 1 + lr)
    with pytest.raises(ValueError):
        L.kl_penalty(logp, ref, "k4")


def test_gspo_sequence_ratio():
    logp, old, mask, adv = _inputs()
    r = L.importance_ratio(logp, old, mask, "sequence")
    want0 = math.exp(((-1.0 + 1.2) + (-2.0 + 1.5) + 0.0) / 3)
    want1 = math.exp(((-0.1 + 0.1) + (-0.3 + 0.6)) / 2)
    assert r[0, 2].item() == pytest.approx(want0)
    assert r[1, 0].item() == pytest.approx(want1)


def test_beta_adds_kl():
    logp, old, mask, adv = _inputs()
    base, _ = L.policy_loss(logp, old, adv, mask, loss_type="bnpo")
    ref = logp - 0.1
    with_kl, st = L.policy_loss(logp, old, adv, mask, loss_type="bnpo", ref_logp=ref, beta=0.5)
    k3 = math.exp(-0.1) - 1 + 0.1
    assert with_kl.item() == pytest.approx(base.item() + 0.5 * k3, rel=1e-5)
    assert st["kl"] == pytest.approx(k3, rel=1e-5)
    with pytest.raises(ValueError):
        L.policy_loss(logp, old, adv, mask, beta=0.1)


def test_gradient_penalty_changes_the_update():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    x = torch.randn(32, 4)
    a = torch.randint(0, 2, (32,))
    adv = torch.randn(32)

    def grads(lam):
        net.zero_grad()
        logp = torch.log_softmax(net(x), -1).gather(-1, a[:, None])        # (32, 1)
        loss, _ = L.policy_loss(logp, logp.detach(), adv, torch.ones_like(logp))
        if lam > 0:
            pen, gnorm = L.gradient_penalty(loss, net.parameters(), lam, target=0.0)
            assert gnorm > 0
            loss = loss + pen
        loss.backward()
        return torch.cat([p.grad.flatten() for p in net.parameters()])

    g0, g1 = grads(0.0), grads(0.5)
    assert not torch.allclose(g0, g1, atol=1e-6)
    # the extra gradient is lam * d||g||^2/dtheta = 2 lam H g (target 0): check against a finite difference
    net.zero_grad()
    logp = torch.log_softmax(net(x), -1).gather(-1, a[:, None])
    loss, _ = L.policy_loss(logp, logp.detach(), adv, torch.ones_like(logp))
    g = torch.autograd.grad(loss, list(net.parameters()), create_graph=True)
    sq = sum((gi ** 2).sum() for gi in g)
    hg = torch.cat([h.flatten() for h in torch.autograd.grad(sq, list(net.parameters()))])
    assert torch.allclose(g1 - g0, 0.5 * hg, atol=1e-5)


def test_value_loss():
    v = torch.tensor([[1.0, 2.0]])
    r = torch.tensor([[0.0, 2.0]])
    m = torch.tensor([[1.0, 0.0]])
    assert L.value_loss(v, r, m).item() == pytest.approx(0.5)
