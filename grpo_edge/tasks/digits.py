"""Digits: scikit-learn's bundled 8x8 handwritten digits (1,797 images), as a contextual bandit.

For each image the policy samples G labels; reward 1 for the right one, 0 otherwise. GRPO's group
baseline turns this into a low-variance classification signal without a cross-entropy loss.
"""
import numpy as np
import torch

from grpo_edge.core import devices
from grpo_edge.core.rollout import Rollout
from grpo_edge.tasks.base import Task


class DigitsTask(Task):
    """Config keys: test_fraction (held-out share, default 0.2), latent_noise (reserved for augmentation)."""
    name = "digits"
    kind = "bandit"
    metric_name = "accuracy"
    default_arch = "lite-resnet"
    archs = ("lite-resnet",)               # (1, 8, 8) images -> class logits
    ranges = {"test_fraction": (0, 1, False, False)}
    defaults = {"test_fraction": 0.2}

    def __init__(self, cfg, seed=0):
        super().__init__(cfg, seed)
        from sklearn.datasets import load_digits
        d = load_digits()
        x = (d.images.astype(np.float32) / 16.0)[:, None]          # (1797, 1, 8, 8) in [0, 1]
        y = d.target.astype(np.int64)
        # Fixed split (independent of the training seed) so every run is evaluated on the same images.
        perm = np.random.RandomState(1234).permutation(len(y))
        n_test = int(round(len(y) * float(cfg.get("test_fraction", 0.2))))
        self.x_test, self.y_test = x[perm[:n_test]], y[perm[:n_test]]
        self.x_train, self.y_train = x[perm[n_test:]], y[perm[n_test:]]
        self._rng = np.random.RandomState(seed)

    def model_kwargs(self):
        return {"in_channels": 1, "n_classes": 10, "image_size": 8}

    def checkpoint_meta(self):
        return {"input_shape": [1, 8, 8], "input_dtype": "float32", "n_classes": 10,
                "labels": [str(i) for i in range(10)], "input_range": [0.0, 1.0]}

    def rollout(self, policy, num_groups, group_size, generator=None):
        device = next(policy.parameters()).device
        idx = self._rng.randint(0, len(self.y_train), size=num_groups)
        x = torch.as_tensor(self.x_train[idx], device=device)            # (B, 1, 8, 8)
        y = torch.as_tensor(self.y_train[idx], device=device)            # (B,)
        with torch.no_grad():
            logp_all = torch.log_softmax(policy(x), dim=-1)              # (B, 10)
            probs = logp_all.exp().repeat_interleave(group_size, 0)      # (N, 10), group-major
            a = devices.multinomial(probs, generator)                      # (N,)
            lp = logp_all.repeat_interleave(group_size, 0).gather(-1, a[:, None]).squeeze(-1)
        reward = (a == y.repeat_interleave(group_size)).float()
        return Rollout(actions=a[:, None], mask=torch.ones_like(lp)[:, None], old_logp=lp[:, None],
                       rewards=reward, group_size=group_size, reward_parts={"correct": reward},
                       inputs={"x": x.repeat_interleave(group_size, 0)}, num_env_steps=num_groups)

    def logprobs(self, policy, rollout):
        logp_all = torch.log_softmax(policy(rollout.inputs["x"]), dim=-1)     # (N, 10)
        logp = logp_all.gather(-1, rollout.actions).reshape(-1, 1)            # (N, 1)
        entropy = -(logp_all.exp() * logp_all).sum(-1, keepdim=True)
        return logp, entropy

    def values(self, critic, rollout):
        """PPO mode: the critic's value (N, 1) of each image (a lite-resnet with out_dim=1); one step per
        episode, so PPO's advantage is the reward minus this baseline."""
        return critic(rollout.inputs["x"]).reshape(-1, 1)

    def evaluate(self, policy, split="test", n=0):
        x, y = (self.x_test, self.y_test) if split == "test" else (self.x_train, self.y_train)
        if n:
            x, y = x[:n], y[:n]
        device = next(policy.parameters()).device
        was_training = policy.training
        policy.eval()
        with torch.no_grad():
            pred = policy(torch.as_tensor(x, device=device)).argmax(-1).cpu().numpy()
        policy.train(was_training)
        return {"accuracy": float((pred == y).mean()), "n": int(len(y))}

    def calibration_inputs(self, n, policy=None):
        return self.x_train[:n].copy()
