"""One decision per input (a contextual bandit): the base of the built-in digits task and of a user's own
labelled data. For each input the policy samples G actions (labels); `reward` scores them; GRPO's group
baseline turns this into a low-variance training signal without a cross-entropy loss.

A subclass implements `load()` -> (x_train, y_train, x_test, y_test) and sets `n_actions`; it may override
`reward(actions, y)` (default: 1 for the right label, 0 otherwise). Inputs are float32 vectors (arch mlp)
or (C, H, W) images (arch lite-resnet); docs/own_task.md has a complete example.
"""
import numpy as np
import torch

from grpo_edge.core import devices
from grpo_edge.core.rollout import Rollout
from grpo_edge.errors import ConfigError
from grpo_edge.tasks.base import Task


class BanditTask(Task):
    kind = "bandit"
    metric_name = "accuracy"
    default_arch = "mlp"
    archs = ("mlp", "lite-resnet")
    n_actions = None                     # number of actions (labels); None: one more than the largest label
    labels = None                        # optional names of the actions, stored in the checkpoint

    def __init__(self, cfg, seed=0):
        super().__init__(cfg, seed)
        data = self.load()
        if not (isinstance(data, tuple) and len(data) == 4):
            raise ConfigError("%s.load() must return (x_train, y_train, x_test, y_test)" % type(self).__name__)
        self.x_train, self.y_train, self.x_test, self.y_test = [np.asarray(a) for a in data]
        self.x_train = self.x_train.astype(np.float32)
        self.x_test = self.x_test.astype(np.float32)
        self._check_data()
        if self.n_actions is None:
            self.n_actions = int(max(self.y_train.max(), self.y_test.max())) + 1
        self._rng = np.random.RandomState(seed)

    def load(self):
        """(x_train (N, ...) float, y_train (N,) int, x_test, y_test): the data, the same for every seed."""
        raise NotImplementedError

    def reward(self, actions, y):
        """actions (N,) and labels y (N,), int64 tensors -> rewards (N,) float: 1 for the right label."""
        return (actions == y).float()

    def _check_data(self):
        name = type(self).__name__
        for split, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            if x.ndim not in (2, 4) or len(x) == 0:
                raise ConfigError("%s.load(): x_%s must be (N, features) or (N, C, H, W) with N > 0, got shape %s"
                                  % (name, split, x.shape))
            if y.shape != (len(x),) or y.dtype.kind not in "iu":
                raise ConfigError("%s.load(): y_%s must be (%d,) integer labels, got shape %s dtype %s"
                                  % (name, split, len(x), y.shape, y.dtype))
            if not np.isfinite(x).all():
                raise ConfigError("%s.load(): x_%s holds NaN or inf" % (name, split))
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ConfigError("%s.load(): x_train is %s per sample, x_test %s"
                              % (name, self.x_train.shape[1:], self.x_test.shape[1:]))
        self.y_train, self.y_test = self.y_train.astype(np.int64), self.y_test.astype(np.int64)

    # --- what the model needs -------------------------------------------------------------
    @property
    def input_shape(self):
        return list(self.x_train.shape[1:])

    def model_kwargs(self):
        shape = self.input_shape
        if len(shape) == 1:
            return {"obs_dim": shape[0], "n_actions": self.n_actions}
        if shape[1] != shape[2]:
            raise ConfigError("%s: images must be square for lite-resnet, got %s" % (type(self).__name__, shape))
        return {"in_channels": shape[0], "n_classes": self.n_actions, "image_size": shape[1]}

    def checkpoint_meta(self):
        lo, hi = float(self.x_train.min()), float(self.x_train.max())
        names = list(self.labels) if self.labels is not None else [str(i) for i in range(self.n_actions)]
        return {"input_shape": self.input_shape, "input_dtype": "float32", "n_classes": int(self.n_actions),
                "n_actions": int(self.n_actions), "labels": names, "input_range": [lo, hi], "slug": self.slug}

    @property
    def slug(self):
        from grpo_edge.tasks.control import env_slug
        return env_slug(self.name)

    # --- training -------------------------------------------------------------------------
    def rollout(self, policy, num_groups, group_size, generator=None):
        device = next(policy.parameters()).device
        idx = self._rng.randint(0, len(self.y_train), size=num_groups)
        x = torch.as_tensor(self.x_train[idx], device=device)            # (B, ...)
        y = torch.as_tensor(self.y_train[idx], device=device)            # (B,)
        with torch.no_grad():
            logp_all = torch.log_softmax(policy(x), dim=-1)              # (B, A)
            probs = logp_all.exp().repeat_interleave(group_size, 0)      # (N, A), group-major
            a = devices.multinomial(probs, generator)                    # (N,)
            lp = logp_all.repeat_interleave(group_size, 0).gather(-1, a[:, None]).squeeze(-1)
        reward = self.reward(a, y.repeat_interleave(group_size)).float().reshape(-1)
        return Rollout(actions=a[:, None], mask=torch.ones_like(lp)[:, None], old_logp=lp[:, None],
                       rewards=reward, group_size=group_size, reward_parts={"reward": reward},
                       inputs={"x": x.repeat_interleave(group_size, 0)}, num_env_steps=num_groups)

    def logprobs(self, policy, rollout):
        logp_all = torch.log_softmax(policy(rollout.inputs["x"]), dim=-1)     # (N, A)
        logp = logp_all.gather(-1, rollout.actions).reshape(-1, 1)            # (N, 1)
        entropy = -(logp_all.exp() * logp_all).sum(-1, keepdim=True)
        return logp, entropy

    def values(self, critic, rollout):
        """PPO mode: the critic's value (N, 1) of each input; one step per episode, so PPO's advantage is the
        reward minus this baseline."""
        return critic(rollout.inputs["x"]).reshape(-1, 1)

    # --- evaluation / deploy ----------------------------------------------------------------
    def evaluate(self, policy, split="test", n=0):
        """Greedy accuracy (argmax action == label) and the mean reward of the greedy actions."""
        pred, y, reward = self._greedy(policy, split, n)
        return {"accuracy": float((pred.numpy() == y).mean()), "reward": float(reward.mean()), "n": int(len(y))}

    def _greedy(self, policy, split, n):
        """(greedy actions, labels, rewards) on the first n inputs of `split` (n = 0: all)."""
        x, y = (self.x_test, self.y_test) if split == "test" else (self.x_train, self.y_train)
        if n:
            x, y = x[:n], y[:n]
        device = next(policy.parameters()).device
        was_training = policy.training
        policy.eval()
        with torch.no_grad():
            pred = policy(torch.as_tensor(x, device=device)).argmax(-1).cpu()
        policy.train(was_training)
        return pred, y, self.reward(pred, torch.as_tensor(y)).float()

    def examples(self, policy, split="test", k=3):
        """The first k inputs of `split`: the greedy action (the predicted class), the label, the reward."""
        pred, y, reward = self._greedy(policy, split, k)
        return [{"input": i, "predicted": int(p), "label": int(t), "reward": float(r)}
                for i, (p, t, r) in enumerate(zip(pred.tolist(), np.asarray(y).tolist(), reward.tolist()))]

    def calibration_inputs(self, n, policy=None):
        return self.x_train[:n].copy()
