"""Environments for online-training studies, in plain NumPy (Python 3.6 safe, no gymnasium needed).

    from grpo_edge.online.envs import CartPole
    env = CartPole(length=0.5)
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(1)
    env.set_dynamics(length=0.25)          # the world changes: a shorter pole, a weaker motor, ...

`CartPole` follows the gymnasium API (reset(seed=, options=) -> (obs, info); step(a) -> (obs, reward,
terminated, truncated, info)) and, with its default parameters, the CartPole-v1 task: reward 1 per step,
the episode ends when |x| > 2.4 or |theta| > 12 degrees, and is truncated after 500 steps. Its parameters
are attributes that `set_dynamics` changes between episodes, which is what the online trainer's
`env_schedule` uses to make the dynamics change mid-run (see docs/online.md). Name it in an online config
as `grpo_edge.online.envs:CartPole`.

The dynamics are the cart-pole equations of motion (Barto, Sutton and Anderson, 1983) with the pole as a
uniform rod of half-length `length`, integrated with explicit Euler steps of `tau` seconds.
"""
import math

import numpy as np


class Space(object):
    """The two attributes of a gymnasium space that the online trainer reads: shape and (discrete) n."""

    def __init__(self, shape, n=None, dtype=np.float32):
        self.shape = tuple(shape)
        self.n = n
        self.dtype = dtype

    def __repr__(self):
        return "Space(shape=%s, n=%s)" % (self.shape, self.n)


def _check_param(name, value):
    if name not in CartPole.PARAMS:
        raise ValueError("CartPole has no parameter %r (parameters: %s)" % (name, ", ".join(CartPole.PARAMS)))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("CartPole %s must be a finite number, got %r" % (name, value))
    if name in ("gravity", "force_mag"):
        if value < 0:
            raise ValueError("CartPole %s must be >= 0, got %r" % (name, value))
    elif value <= 0:
        raise ValueError("CartPole %s must be > 0, got %r" % (name, value))
    if name == "max_episode_steps":
        if int(value) != value:
            raise ValueError("CartPole max_episode_steps must be a whole number, got %r" % (value,))
        return int(value)
    return float(value)


class CartPole(object):
    """Balance a pole on a cart by pushing left (action 0) or right (action 1).

    observation (4,) float32: cart position, cart velocity, pole angle (rad), pole angular velocity.
    Parameters (all changeable with set_dynamics):
      gravity (m/s^2), masscart, masspole (kg), length (half the pole, m), force_mag (N), tau (s),
      x_limit (m), theta_limit (rad), max_episode_steps.
    """

    PARAMS = ("gravity", "masscart", "masspole", "length", "force_mag", "tau", "x_limit", "theta_limit",
              "max_episode_steps")

    def __init__(self, gravity=9.8, masscart=1.0, masspole=0.1, length=0.5, force_mag=10.0, tau=0.02,
                 x_limit=2.4, theta_limit=12 * 2 * math.pi / 360, max_episode_steps=500):
        self.set_dynamics(gravity=gravity, masscart=masscart, masspole=masspole, length=length, force_mag=force_mag,
                          tau=tau, x_limit=x_limit, theta_limit=theta_limit, max_episode_steps=max_episode_steps)
        self.observation_space = Space((4,))
        self.action_space = Space((), n=2, dtype=np.int64)
        self.state = np.zeros(4, dtype=np.float64)
        self.steps = 0
        self.done = True
        self._rng = np.random.RandomState(0)

    def dynamics(self):
        """The current parameters as a plain dict."""
        return dict((k, getattr(self, k)) for k in self.PARAMS)

    def set_dynamics(self, **params):
        """Change physical parameters (takes effect from the next step); an unknown name, or a value outside
        the physics (a mass, length, step or limit <= 0, a negative gravity or force) is a ValueError."""
        for k, v in params.items():
            setattr(self, k, _check_param(k, v))

    def reset(self, seed=None, options=None):
        """Start an episode; `seed` re-seeds the start-state generator (as gymnasium does)."""
        if seed is not None:
            self._rng = np.random.RandomState(int(seed) % (2 ** 32))
        self.state = self._rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        self.done = False
        return self.state.astype(np.float32), {}

    def step(self, action):
        """Push the cart; returns (obs, reward, terminated, truncated, info)."""
        if self.done:
            raise RuntimeError("CartPole.step called after the episode ended; call reset() first")
        if action not in (0, 1):
            raise ValueError("CartPole action must be 0 or 1, got %r" % (action,))
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        total_mass = self.masscart + self.masspole
        pole_ml = self.masspole * self.length
        cos, sin = math.cos(theta), math.sin(theta)
        # Pole angular acceleration first (the cart's depends on it), then the cart's.
        temp = (force + pole_ml * theta_dot * theta_dot * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos * cos / total_mass))
        x_acc = temp - pole_ml * theta_acc * cos / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * theta_acc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        terminated = bool(abs(x) > self.x_limit or abs(theta) > self.theta_limit)
        truncated = bool(not terminated and self.steps >= self.max_episode_steps)
        self.done = terminated or truncated
        return self.state.astype(np.float32), 1.0, terminated, truncated, {}

    def close(self):
        pass
