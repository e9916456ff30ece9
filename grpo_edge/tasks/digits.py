"""Digits: scikit-learn's bundled 8x8 handwritten digits (1,797 images), as a contextual bandit.

For each image the policy samples G labels; reward 1 for the right one, 0 otherwise (grpo_edge/tasks/bandit.py).
"""
import numpy as np

from grpo_edge.tasks.bandit import BanditTask


class DigitsTask(BanditTask):
    """scikit-learn's 8x8 handwritten digits (1,797 images): pick the digit, reward 1 when right (a bandit).

    Config keys: test_fraction (held-out share, default 0.2)."""
    name = "digits"
    default_arch = "lite-resnet"
    archs = ("lite-resnet",)               # (1, 8, 8) images -> class logits
    ranges = {"test_fraction": (0, 1, False, False)}
    defaults = {"test_fraction": 0.2}
    n_actions = 10

    def load(self):
        from sklearn.datasets import load_digits
        d = load_digits()
        x = (d.images.astype(np.float32) / 16.0)[:, None]          # (1797, 1, 8, 8) in [0, 1]
        y = d.target.astype(np.int64)
        # Fixed split (independent of the training seed) so every run is evaluated on the same images.
        perm = np.random.RandomState(1234).permutation(len(y))
        n_test = int(round(len(y) * float(self.cfg.get("test_fraction", 0.2))))
        return x[perm[n_test:]], y[perm[n_test:]], x[perm[:n_test]], y[perm[:n_test]]

    def checkpoint_meta(self):
        return dict(super().checkpoint_meta(), input_range=[0.0, 1.0],
                    preprocess="scikit-learn's 8x8 digits: pixel values 0-16 divided by 16, shape (N, 1, 8, 8)")
