"""Tests for grpo_edge.core.models: shapes, gradients, config round-trip, generation contracts, ONNX export.

Run: .venv/bin/python -m pytest tests/test_models.py -q
Widths are tiny so the file runs in seconds on two CPU cores.
"""
import json
import warnings

import numpy as np
import pytest
import torch

from grpo_edge.core.models import ARCHS, ExportSpec, build_model, count_parameters
from grpo_edge.core.models.lite_resnet import LiteResNet

V = 12  # vocabulary of the small text models

SMALL = {
    "mlp": dict(obs_dim=4, n_actions=3, hidden=16),
    "lite-resnet": dict(channels=(4, 8, 8), blocks=(2, 2, 1)),
    "micro-gpt": dict(vocab_size=V, d_model=32, n_layer=3, n_head=4, max_len=24),
    "tiny-transformer": dict(vocab_size=V, d_model=32, nhead=4, num_layers=2, dim_feedforward=48, max_len=24),
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster than several fighting over shared cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make(arch, **over):
    torch.manual_seed(0)
    kw = dict(SMALL[arch])
    kw.update(over)
    return build_model(arch, **kw)


def inputs(arch, b=3, g=None):
    """Example forward() inputs for each arch (tuple)."""
    if arch == "mlp":
        return (torch.randn(b, 4, generator=g),)
    if arch == "lite-resnet":
        return (torch.randn(b, 1, 8, 8, generator=g),)
    if arch == "micro-gpt":
        return (torch.randint(0, V, (b, 7), generator=g),)
    src = torch.randint(3, V, (b, 6), generator=g)
    src[0, -2:] = 0                                       # padded source row
    return (src, torch.randint(0, V, (b, 5), generator=g))


def expected_shape(arch, b=3):
    return {"mlp": (b, 3), "lite-resnet": (b, 10), "micro-gpt": (b, 7, V), "tiny-transformer": (b, 5, V)}[arch]


def grads(model, x):
    model.zero_grad()
    model(*x).float().pow(2).mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


# ---------------------------------------------------------------- registry, shapes, gradients

def test_registry_and_unknown_arch():
    assert set(ARCHS) == {"mlp", "tiny-transformer", "micro-gpt", "lite-resnet"}
    with pytest.raises(ValueError, match="lite-resnet, micro-gpt, mlp, tiny-transformer"):
        build_model("resnet50")


@pytest.mark.parametrize("arch", sorted(SMALL))
def test_forward_shape_and_every_parameter_gets_a_finite_grad(arch):
    m = make(arch).train()
    x = inputs(arch)
    out = m(*x)
    assert out.shape == expected_shape(arch)
    out.pow(2).mean().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("arch", sorted(SMALL))
def test_config_round_trip_gives_identical_outputs(arch):
    m = make(arch, hidden_dropout=0.1).eval()
    cfg = m.config()
    assert json.loads(json.dumps(cfg)) == cfg                # plain Python scalars / lists only
    torch.manual_seed(123)                                   # different init: the state dict must carry it
    m2 = build_model(m.arch, **cfg)
    m2.load_state_dict(m.state_dict(), strict=True)
    m2.eval()
    assert m2.config() == cfg
    x = inputs(arch)
    assert torch.equal(m(*x), m2(*x))


@pytest.mark.parametrize("arch", sorted(SMALL))
def test_out_dim_builds_a_value_head(arch):
    """The trainer builds a critic as build_model(arch, **dict(policy.config(), out_dim=1))."""
    m = make(arch)
    critic = build_model(m.arch, **dict(m.config(), out_dim=1))
    assert critic(*inputs(arch)).shape == expected_shape(arch)[:-1] + (1,)


@pytest.mark.parametrize("arch", sorted(SMALL))
def test_dropout_is_off_in_eval(arch):
    kw = {"hidden_dropout": 0.3}
    if arch in ("micro-gpt", "tiny-transformer"):
        kw["attn_dropout"] = 0.3
    m = make(arch, **kw)
    x = inputs(arch)
    m.eval()
    assert torch.equal(m(*x), m(*x))
    m.train()
    assert not torch.equal(m(*x), m(*x))


def test_micro_gpt_default_size():
    m = build_model("micro-gpt", vocab_size=20)
    n = count_parameters(m)
    print("micro-gpt default parameters (vocab 20):", n)
    assert 3.5e6 <= n <= 4.2e6
    assert m.head.weight is m.tok_emb.weight                 # tied
    critic = build_model("micro-gpt", vocab_size=20, d_model=32, n_layer=1, n_head=4, out_dim=1)
    assert critic.head.weight is not critic.tok_emb.weight
    assert critic(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 1)


def test_mlp_layers_activation_and_critic():
    m = build_model("mlp", obs_dim=4, n_actions=2, num_layers=3, activation="relu")
    assert sum(isinstance(l, torch.nn.Linear) for l in m.modules()) == 3
    assert build_model("mlp", obs_dim=4, n_actions=2, out_dim=1)(torch.randn(5, 4)).shape == (5, 1)
    with pytest.raises(ValueError, match="activation"):
        build_model("mlp", obs_dim=4, n_actions=2, activation="gelu")


def test_lite_resnet_defaults_and_bn_folding():
    m = LiteResNet()
    assert m.num_weight_layers() == 12
    assert max(m.channels) == 64 and count_parameters(m) < 200000
    m = make("lite-resnet")
    randomize_bn(m)
    m.eval()
    x = inputs("lite-resnet")[0]
    assert torch.allclose(m.folded()(x), m(x), atol=1e-5)
    assert not any(isinstance(mod, torch.nn.BatchNorm2d) for mod in m.folded().modules())


def perturb(model, scale=0.05):
    """Add small noise to every parameter (stands in for training)."""
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def randomize_bn(model):
    """Non-trivial BN statistics and affine params, so folding is really exercised."""
    g = torch.Generator().manual_seed(5)
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            n = mod.num_features
            mod.running_mean.copy_(torch.randn(n, generator=g) * 0.5)
            mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            with torch.no_grad():
                mod.weight.copy_(torch.randn(n, generator=g))
                mod.bias.copy_(torch.randn(n, generator=g) * 0.1)


# ---------------------------------------------------------------- generation

def gen_inputs(arch, b=4):
    g = torch.Generator().manual_seed(1)
    if arch == "micro-gpt":
        p = torch.randint(3, V, (b, 5), generator=g)
        p[0, :2] = 0                                         # left padding is attended, not masked
        return p
    s = torch.randint(3, V, (b, 6), generator=g)
    s[1, -3:] = 0
    return s


@pytest.mark.parametrize("arch", ["micro-gpt", "tiny-transformer"])
@pytest.mark.parametrize("greedy,temperature", [(False, 0.7), (False, 1.0), (True, 1.0)])
def test_generate_logp_matches_sequence_logprobs(arch, greedy, temperature):
    m = make(arch).eval()
    p = gen_inputs(arch)
    tokens, logp, mask = m.generate(p, 10, temperature=temperature, greedy=greedy,
                                    generator=torch.Generator().manual_seed(7), eos_id=2)
    assert tokens.dtype == torch.long and tokens.shape == logp.shape == mask.shape and tokens.shape[1] <= 10
    lp, ent = m.sequence_logprobs(p, tokens, temperature=temperature)
    assert lp.requires_grad and ent.shape == lp.shape
    assert torch.allclose(lp * mask, logp, atol=1e-5)
    assert (ent >= 0).all()


@pytest.mark.parametrize("arch", ["micro-gpt", "tiny-transformer"])
def test_eos_and_mask_contract(arch):
    m = make(arch).eval()
    p = gen_inputs(arch, b=16)
    eos, pad = 3, 0
    tokens, logp, mask = m.generate(p, 20, temperature=3.0, generator=torch.Generator().manual_seed(3),
                                    eos_id=eos, pad_id=pad)
    hit = 0
    for i in range(tokens.shape[0]):
        where = (tokens[i] == eos).nonzero().flatten()
        if len(where) == 0:
            assert (mask[i] == 1).all()
            continue
        hit += 1
        e = int(where[0])
        assert (mask[i, :e + 1] == 1).all()                  # EOS itself counts
        assert (mask[i, e + 1:] == 0).all()
        assert (tokens[i, e + 1:] == pad).all() and (logp[i, e + 1:] == 0).all()
    assert hit > 0
    # Early stop: identical rows, greedy, and EOS = the token greedy picks first -> one step only.
    same = p[:1].repeat(4, 1)
    first = m.generate(same, 5, greedy=True)[0][0, 0].item()
    tokens, logp, mask = m.generate(same, 5, greedy=True, eos_id=first)
    assert tokens.shape == (4, 1) and (mask == 1).all() and (tokens == first).all()


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_micro_gpt_kv_cache_step_matches_full_forward(positions):
    m = make("micro-gpt", positions=positions).eval()
    idx = torch.randint(0, V, (3, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = m(idx)                                        # (3, 9, V)
        pk, pv = m.empty_cache(3)
        logits, pk, pv = m.forward_step(idx[:, :4], pk, pv)  # prefill 4 tokens
        assert torch.allclose(logits, full[:, :4], atol=1e-5)
        for t in range(4, 9):                                # then one token at a time
            logits, pk, pv = m.forward_step(idx[:, t:t + 1], pk, pv)
            assert torch.allclose(logits[:, 0], full[:, t], atol=1e-5)
        assert pk.shape == (3, 3, 4, 9, 8)


def _grouped_prompts(groups=3, g=4, seed=5):
    """GRPO-style prompts: `groups` distinct left-padded prompts, each repeated g times, rows shuffled."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.randint(3, V, (groups, 6), generator=gen)
    p[0, :2] = 0
    return p.repeat_interleave(g, 0)[torch.randperm(groups * g, generator=gen)]


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_micro_gpt_shared_prompt_teacher_forcing_matches_plain_forward(training, positions):
    """Rows sharing prompts run each prompt once (packed pass): same logp, entropy and gradients as
    forward() on the concatenated sequences."""
    from grpo_edge.core.models._layers import logprobs_and_entropy
    from grpo_edge.core.models._layers import shared_rows
    m = make("micro-gpt", positions=positions).train(training)
    p = _grouped_prompts()
    assert shared_rows(p) is not None and shared_rows(p)[0].shape[0] == 3
    tokens = torch.randint(0, V, (12, 5), generator=torch.Generator().manual_seed(6))
    lp, ent = m.sequence_logprobs(p, tokens)
    m.zero_grad()
    (lp.sum() + 0.3 * ent.sum()).backward()
    shared = {n: q.grad.clone() for n, q in m.named_parameters()}
    lp2, ent2 = logprobs_and_entropy(m(torch.cat([p, tokens[:, :-1]], 1))[:, p.shape[1] - 1:], tokens)
    m.zero_grad()
    (lp2.sum() + 0.3 * ent2.sum()).backward()
    assert torch.allclose(lp, lp2, atol=1e-5) and torch.allclose(ent, ent2, atol=1e-5)
    for n, q in m.named_parameters():
        assert torch.allclose(shared[n], q.grad, atol=1e-5, rtol=1e-4), n
    one, _ = m.sequence_logprobs(p, tokens[:, :1])                 # no completion token fed back
    assert torch.allclose(one, lp[:, :1], atol=1e-5)


def test_micro_gpt_distinct_prompts_take_the_plain_path():
    from grpo_edge.core.models._layers import shared_rows
    p = torch.arange(4 * 5).view(4, 5) % V
    assert shared_rows(p) is None                             # 4 distinct rows of 4
    assert shared_rows(p[:1]) is None                         # one row
    assert shared_rows(torch.cat([p[:1]] * 2 + [p[1:3]])) is None   # 3 distinct of 4: not worth it
    assert shared_rows(torch.cat([p[:1]] * 3 + [p[1:2]]))[0].shape == (2, 5)


@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_micro_gpt_generate_withshared_rows(greedy, positions):
    """Prefill once per distinct prompt, decode with stacked q/k/v weights: the logp generate returns are
    the teacher-forced ones, and each row's tokens are those the row would get alone (greedy)."""
    m = make("micro-gpt", positions=positions).eval()
    p = _grouped_prompts(groups=2, g=4)
    tokens, logp, mask = m.generate(p, 8, greedy=greedy, generator=torch.Generator().manual_seed(1), eos_id=2)
    lp, _ = m.sequence_logprobs(p, tokens)
    assert torch.allclose(lp * mask, logp, atol=1e-5)
    if greedy:
        for i in range(p.shape[0]):
            alone = m.generate(p[i:i + 1], 8, greedy=True, eos_id=2)[0][0]
            n = min(len(alone), tokens.shape[1])
            assert torch.equal(alone[:n], tokens[i, :n])


def test_micro_gpt_rope_sees_distances_not_places():
    """Rotary positions: the same tokens give the same logits wherever they sit (no absolute position
    anywhere), while learned positions change them; a rope model has no position embedding to learn."""
    idx = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(3))
    for positions, same in (("rope", True), ("learned", False)):
        m = make("micro-gpt", positions=positions).eval()
        with torch.no_grad():
            pk, pv = m.empty_cache(2)
            at0 = m.forward_step(idx, pk, pv, position=torch.arange(6).expand(2, 6))[0]
            at9 = m.forward_step(idx, pk, pv, position=torch.arange(9, 15).expand(2, 6))[0]
        assert torch.allclose(at0, at9, atol=1e-5) == same, positions
    assert not hasattr(make("micro-gpt", positions="rope"), "pos_emb")
    with pytest.raises(ValueError, match="positions must be one of learned, rope"):
        make("micro-gpt", positions="alibi")


def test_rows_sharing_a_prompt_keep_their_own_dropout():
    """With dropout active, rows with the same prompt are not computed once (they would share one
    dropout mask): micro-gpt takes the plain path in training mode then."""
    gpt = make("micro-gpt", hidden_dropout=0.5)
    assert not gpt.train()._packed_ok() and gpt.eval()._packed_ok()
    assert make("micro-gpt").train()._packed_ok()                 # no dropout: shared in training too


def test_generate_rejects_bad_arguments():
    m = make("micro-gpt")
    with pytest.raises(ValueError, match="max_len"):
        m.generate(torch.zeros(1, 20, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="temperature"):
        m.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=0.0)


@pytest.mark.parametrize("arch", ["micro-gpt", "tiny-transformer"])
def test_gradient_checkpointing_leaves_grads_unchanged(arch):
    m = make(arch, hidden_dropout=0.1, attn_dropout=0.1).train()
    x = inputs(arch)
    torch.manual_seed(11)
    ref = grads(m, x)
    for interval in (1, 2):
        m.set_gradient_checkpointing(interval)
        torch.manual_seed(11)                                # same dropout masks
        got = grads(m, x)
        for n in ref:
            assert torch.allclose(ref[n], got[n], atol=1e-6), (interval, n)
    m.set_gradient_checkpointing(0)


# ---------------------------------------------------------------- ONNX export

def onnx_export(spec, path):
    """Legacy (TorchScript) exporter, opset 17; returns the loaded onnx model."""
    import onnx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(spec.module, spec.example_inputs, str(path), input_names=spec.input_names,
                          output_names=spec.output_names, dynamic_axes=spec.dynamic_axes, opset_version=17,
                          dynamo=False)
    return onnx.load(str(path))


def ort_check(path, spec, example_inputs):
    """onnxruntime on `example_inputs` (a tuple in spec order) must match the torch module within 1e-4."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = dict((n, t.numpy()) for n, t in zip(spec.input_names, example_inputs))
    got = sess.run(spec.output_names, feed)
    with torch.no_grad():
        want = spec.module.eval()(*example_inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape)
        np.testing.assert_allclose(g, w.numpy(), atol=1e-4, rtol=0)


def op_types(model):
    return set(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("arch,activation", [("mlp", "tanh"), ("mlp", "relu"), ("lite-resnet", None)])
def test_export_small_nets_plain_ops(arch, activation, tmp_path):
    m = make(arch, activation=activation) if activation else make(arch)
    # Like a trained model: fresh zero biases are identical tensors, which the exporter dedups into an
    # Identity node; a trained model has no such ties.
    perturb(m)
    if arch == "lite-resnet":
        randomize_bn(m)
    m.eval()
    spec = m.export_spec()
    assert isinstance(spec, ExportSpec)
    ops = op_types(onnx_export(spec, tmp_path / "m.onnx"))
    if arch == "mlp":
        allowed = {"Gemm", activation.capitalize()}
    else:
        allowed = {"Conv", "Relu", "Add", "GlobalAveragePool", "Flatten", "Gemm"}
    assert ops <= allowed, ops - allowed
    for b in (1, 3):
        ort_check(tmp_path / "m.onnx", spec, m.export_spec(batch_size=b).example_inputs)
    if arch == "lite-resnet":                                # folded export == the BN model itself
        x = m.export_spec(batch_size=3).example_inputs[0]
        assert torch.allclose(spec.module(x), m(x), atol=1e-5)


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_export_micro_gpt_decode_step(tmp_path, positions):
    m = make("micro-gpt", positions=positions).train()
    spec = m.export_spec()
    onnx_export(spec, tmp_path / "gpt.onnx")
    assert m.training                                        # export left the model's mode alone
    for b, past in ((1, 4), (3, 7), (3, 0)):                 # dynamic batch and past length, empty cache too
        ort_check(tmp_path / "gpt.onnx", spec, m.export_spec(batch_size=b, past_len=past).example_inputs)
    # The exported step reproduces real decoding: feed a prompt token by token from an empty cache.
    idx = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = m(idx)
    import onnxruntime as ort
    sess = ort.InferenceSession(str(tmp_path / "gpt.onnx"), providers=["CPUExecutionProvider"])
    pk, pv = [c.numpy() for c in m.empty_cache(2)]
    for t in range(5):
        logits, pk, pv = sess.run(None, {"idx": idx[:, t:t + 1].numpy(), "past_keys": pk, "past_values": pv,
                                         "position": np.full((2, 1), t, dtype=np.int64)})
        np.testing.assert_allclose(logits[:, 0], full[:, t].numpy(), atol=1e-4, rtol=0)


def test_export_tiny_transformer_encoder_and_decoder_step(tmp_path):
    m = make("tiny-transformer").eval()
    specs = m.export_spec()
    assert set(specs) == {"encoder", "decoder_step"}
    for name, spec in specs.items():
        onnx_export(spec, tmp_path / (name + ".onnx"))
        for b, s, t in ((1, 6, 3), (3, 9, 5)):               # dynamic batch, source and prefix lengths
            ort_check(tmp_path / (name + ".onnx"), spec,
                      m.export_spec(batch_size=b, src_len=s, tgt_len=t)[name].example_inputs)
    # encoder -> decoder_step == the last position of forward()
    src, tgt = inputs("tiny-transformer")
    with torch.no_grad():
        memory = specs["encoder"].module(src)
        step = specs["decoder_step"].module(memory, src, tgt)
        assert torch.allclose(step, m(src, tgt)[:, -1], atol=1e-5)
