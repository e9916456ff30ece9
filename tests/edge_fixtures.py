"""Small trained checkpoints for the export / deploy / bench tests, made in a few seconds.

They do not need the GRPO trainer: the cartpole MLP imitates a hand-written balancing rule
(reaches 500 on CartPole-v1), the digits LiteResNet is fit with cross-entropy for a few epochs.
The checkpoints have the trainer's layout (arch, model_config, task, config, model), so deploy and
bench treat them like real ones.
"""
import numpy as np
import torch

from grpo_edge.core.checkpoint import save_checkpoint
from grpo_edge.core.models import build_model


def balance_rule(obs):
    """A linear rule that balances CartPole-v1 for 500 steps: push toward where the pole falls."""
    obs = np.atleast_2d(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] + 0.01 * obs[:, 0] + 0.1 * obs[:, 1] > 0).astype(np.int64)


def _cartpole_states(n, seed):
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    out = []
    obs, _ = env.reset(seed=seed)
    while len(out) < n:
        out.append(obs)
        a = int(balance_rule(obs)[0]) if rng.random() > 0.2 else int(rng.integers(2))  # some off-rule states
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
    return np.asarray(out, dtype=np.float32)


def make_cartpole_checkpoint(path, seed=0, steps=300):
    torch.manual_seed(seed)
    x = torch.as_tensor(_cartpole_states(3000, seed))
    y = torch.as_tensor(balance_rule(x.numpy()))
    model = build_model("mlp", obs_dim=4, n_actions=2, hidden=64, num_layers=3, activation="tanh")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for i in range(steps):
        idx = torch.randint(0, len(x), (256,))
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    save_checkpoint(path, {"arch": model.arch, "model_config": model.config(), "task": "cartpole",
                           "task_meta": {"input_shape": [4], "input_dtype": "float32"},
                           "config": {"task": {"name": "cartpole", "eval_episodes": 20}},
                           "model": model.state_dict(), "step": steps})
    return path


def make_digits_checkpoint(path, seed=0, epochs=4):
    from grpo_edge.tasks import get_task
    torch.manual_seed(seed)
    task = get_task("digits", {}, seed=seed)
    x, y = torch.as_tensor(task.x_train), torch.as_tensor(task.y_train).long()
    model = build_model("lite-resnet", in_channels=1, n_classes=10, image_size=8, channels=[8, 16, 32],
                        blocks=[1, 1, 1])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    save_checkpoint(path, {"arch": model.arch, "model_config": model.config(), "task": "digits",
                           "task_meta": task.checkpoint_meta(), "config": {"task": {"name": "digits"}},
                           "model": model.state_dict(), "step": epochs})
    return path
