"""MLPPolicy: the 3-layer MLP policy for control tasks (Python 3.6 / torch 1.10 safe).

Shapes: obs (B, obs_dim) float -> logits (B, n_actions), or (B, out_dim) when out_dim is set
(out_dim=1 builds a critic). With continuous=True, n_actions is the action dimension and the output is
the mean of a diagonal Gaussian whose log-std is the learned parameter `log_std` (n_actions,)
(grpo_edge/core/distributions.py). The exported graph is only Gemm + Tanh/Relu (a continuous policy adds
one Clip: the mean within the action bounds), which is what the ESP32 code generator consumes (relu is its
best-supported activation; tanh is the training default for control).

obs_norm=True standardizes each observation feature by running statistics of the states the policy has seen
(buffers obs_count / obs_sum / obs_sumsq, float64, updated by the trainer after each update from that
rollout's states, so a rollout and its update see the same normalization). The export folds it into the
first layer (W / std, b - W mean / std): the deployed graph, its inputs (raw observations) and its
calibration are the same as without it.
"""
import math

import torch
import torch.nn as nn

from .spec import ExportSpec

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class MLPPolicy(nn.Module):
    """`num_layers` Linear layers in total: obs_dim -> hidden -> ... -> hidden -> n_actions.

    forward(obs (B, obs_dim)) -> logits (B, n_actions or out_dim)
    hidden_dropout is applied after each hidden activation (training mode only).
    Init follows the usual on-policy recipe (orthogonal, gain sqrt(2) for hidden layers); the last
    layer of a policy uses gain 0.01 so the initial action distribution is close to uniform, a critic
    (out_dim set) uses gain 1.
    """

    arch = "mlp"

    def __init__(self, obs_dim, n_actions, hidden=64, num_layers=3, activation="tanh", hidden_dropout=0.0,
                 out_dim=None, continuous=False, log_std_init=0.0, action_low=None, action_high=None,
                 obs_norm=False):
        super(MLPPolicy, self).__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError("activation must be one of %s, got %r" % (sorted(_ACTIVATIONS), activation))
        if num_layers < 1:
            raise ValueError("num_layers must be >= 1, got %d" % num_layers)
        self.obs_dim, self.n_actions, self.hidden, self.num_layers = obs_dim, n_actions, hidden, num_layers
        self.activation, self.hidden_dropout, self.out_dim = activation, hidden_dropout, out_dim
        final = n_actions if out_dim is None else out_dim
        sizes = [obs_dim] + [hidden] * (num_layers - 1) + [final]
        layers = []
        for i in range(num_layers):
            lin = nn.Linear(sizes[i], sizes[i + 1])
            last = i == num_layers - 1
            gain = (0.01 if out_dim is None else 1.0) if last else math.sqrt(2.0)
            nn.init.orthogonal_(lin.weight, gain)
            nn.init.zeros_(lin.bias)
            layers.append(lin)
            if not last:
                layers.append(_ACTIVATIONS[activation]())
                if hidden_dropout > 0:
                    # Only present when used, so the default export has no Dropout node at all.
                    layers.append(nn.Dropout(hidden_dropout))
        self.net = nn.Sequential(*layers)
        self.continuous = bool(continuous) and out_dim is None
        self.log_std_init = float(log_std_init)
        self.action_low = None if action_low is None else [float(v) for v in action_low]
        self.action_high = None if action_high is None else [float(v) for v in action_high]
        if self.continuous:
            self.log_std = nn.Parameter(torch.full((n_actions,), float(log_std_init)))
            if self.action_low is not None and len(self.action_low) != n_actions:
                raise ValueError("action_low has %d values, n_actions is %d" % (len(self.action_low), n_actions))
        self.obs_norm = bool(obs_norm)
        if self.obs_norm:
            self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
            self.register_buffer("obs_sum", torch.zeros(obs_dim, dtype=torch.float64))
            self.register_buffer("obs_sumsq", torch.zeros(obs_dim, dtype=torch.float64))

    supports_gradient_checkpointing = False

    def set_gradient_checkpointing(self, interval=2):
        """Not for this model: gradient checkpointing recomputes transformer blocks (micro-gpt, tiny-transformer);
        an MLP's activations are a few KB a sample."""
        raise ValueError("gradient checkpointing recomputes transformer blocks (micro-gpt, tiny-transformer); "
                         "an mlp has none to recompute (its activations are a few KB a sample)")

    def config(self):
        """Constructor kwargs as plain Python values: build_model(self.arch, **self.config()) rebuilds it."""
        cfg = {"obs_dim": int(self.obs_dim), "n_actions": int(self.n_actions), "hidden": int(self.hidden),
                "num_layers": int(self.num_layers), "activation": str(self.activation),
                "hidden_dropout": float(self.hidden_dropout),
                "out_dim": None if self.out_dim is None else int(self.out_dim)}
        if self.continuous:
            cfg.update(continuous=True, log_std_init=self.log_std_init, action_low=self.action_low,
                       action_high=self.action_high)
        if self.obs_norm:
            cfg["obs_norm"] = True
        return cfg

    # a feature whose std is below this (one that never varied) is only centred, not divided: dividing by a
    # near-zero std would blow its first-layer weights up when the export folds them (and int8 with them)
    OBS_STD_MIN = 1e-3

    def obs_stats(self):
        """(mean (obs_dim,), std (obs_dim,)) float32 of the states seen so far: (0, 1) before any."""
        n = float(self.obs_count)
        if n <= 0:
            z = torch.zeros(self.obs_dim, device=self.obs_sum.device)
            return z, z + 1.0
        mean = self.obs_sum / n
        var = torch.clamp(self.obs_sumsq / n - mean * mean, min=0.0)
        std = torch.sqrt(var)
        return mean.float(), torch.where(std < self.OBS_STD_MIN, torch.ones_like(std), std).float()

    def obs_moments(self, obs):
        """(count, sum, sum of squares) of the states obs (N, obs_dim), float64: what update_obs_stats adds."""
        x = obs.detach().reshape(-1, self.obs_dim).to(self.obs_sum.device, torch.float64)
        return torch.cat([x.new_tensor([x.shape[0]]), x.sum(0), (x * x).sum(0)])

    def add_obs_moments(self, moments):
        """Add obs_moments(...) (of any number of batches, summed) to the running statistics."""
        moments = moments.to(self.obs_sum.device, torch.float64)
        self.obs_count += moments[0]
        self.obs_sum += moments[1:1 + self.obs_dim]
        self.obs_sumsq += moments[1 + self.obs_dim:]

    def update_obs_stats(self, obs):
        """Add the states obs (N, obs_dim) to the running statistics (obs_norm only)."""
        self.add_obs_moments(self.obs_moments(obs))

    def forward(self, obs):
        """obs (B, obs_dim) -> logits (B, n_actions or out_dim), or the Gaussian's mean (continuous)."""
        if self.obs_norm:
            mean, std = self.obs_stats()
            obs = (obs - mean.to(obs.dtype)) / std.to(obs.dtype)
        return self.net(obs)

    def folded(self):
        """The same function without obs_norm: the standardization folded into the first Linear layer."""
        import copy
        out = copy.deepcopy(self)
        if not self.obs_norm:
            return out
        mean, std = self.obs_stats()
        first = out.net[0]
        with torch.no_grad():
            w = first.weight / std.to(first.weight.dtype).unsqueeze(0)
            first.bias.copy_(first.bias - w.matmul(mean.to(w.dtype)))
            first.weight.copy_(w)
        out.obs_norm = False
        for name in ("obs_count", "obs_sum", "obs_sumsq"):
            delattr(out, name)
        return out

    def export_spec(self, batch_size=1):
        """obs (B, obs_dim) float -> logits (B, n_actions), or action (B, n_actions): the mean within the
        action bounds (continuous); batch is dynamic."""
        obs = torch.randn(batch_size, self.obs_dim, device=self.net[0].weight.device)
        policy = self.folded() if self.obs_norm else self         # Gemm + activations only, as without it
        if self.continuous:
            return ExportSpec(module=_BoundedMean(policy), example_inputs=(obs,), input_names=["obs"],
                              output_names=["action"], dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}})
        return ExportSpec(module=policy, example_inputs=(obs,), input_names=["obs"], output_names=["logits"],
                          dynamic_axes={"obs": {0: "batch"}, "logits": {0: "batch"}})


class _BoundedMean(nn.Module):
    """The deployed continuous policy: the Gaussian's mean, clipped to the action bounds (the greedy action
    the environment receives)."""

    def __init__(self, policy):
        super(_BoundedMean, self).__init__()
        self.policy = policy
        low = policy.action_low if policy.action_low is not None else [-float("inf")] * policy.n_actions
        high = policy.action_high if policy.action_high is not None else [float("inf")] * policy.n_actions
        self.register_buffer("low", torch.tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.tensor(high, dtype=torch.float32))

    def forward(self, obs):
        mean = self.policy(obs)
        lo, hi = self.policy.action_low, self.policy.action_high
        if lo is not None and hi is not None and len(set(lo)) == 1 and len(set(hi)) == 1:
            return torch.clamp(mean, lo[0], hi[0])         # one ONNX Clip (the ESP32 compiler has it)
        return torch.max(torch.min(mean, self.high), self.low)
