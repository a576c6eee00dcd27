"""A small actor-critic network in NumPy for N-A2C: one shared ReLU layer, a softmax policy
head over a fixed action set (with a mask of the actions that apply) and a scalar value head,
trained online by Adam on the advantage actor-critic loss

    L = -(r - V(s)) * log pi(a | s)  +  0.5 * (r - V(s))^2,

with the advantage treated as a constant in the policy term. The tuner package depends on
numpy and scipy only, so this replaces the PyTorch network of the reference implementation;
with one hidden layer of 128 units the hand-written gradients are short and exact (tested
against finite differences).
"""
from __future__ import annotations

import numpy as np


class ActorCritic:
    def __init__(self, n_inputs: int, n_actions: int, hidden: int, learning_rate: float, rng: np.random.Generator) -> None:
        he = lambda fan_in, shape: rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)  # noqa: E731
        self.params = {
            "w1": he(n_inputs, (hidden, n_inputs)),
            "b1": np.zeros(hidden),
            "wp": rng.normal(0.0, 0.01, (n_actions, hidden)),  # near-uniform policy at first
            "bp": np.zeros(n_actions),
            "wv": rng.normal(0.0, 0.01, hidden),
            "bv": np.zeros(1),
        }
        self.learning_rate = learning_rate
        self._m = {k: np.zeros_like(v) for k, v in self.params.items()}
        self._v = {k: np.zeros_like(v) for k, v in self.params.items()}
        self._t = 0

    def forward(self, x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
        """(policy over the actions, 0 where masked; value; hidden activations)."""
        p = self.params
        h = np.maximum(p["w1"] @ x + p["b1"], 0.0)
        logits = np.where(mask, p["wp"] @ h + p["bp"], -np.inf)
        logits -= logits.max()
        pi = np.exp(logits)
        pi /= pi.sum()
        return pi, float(p["wv"] @ h + p["bv"][0]), h

    def loss(self, x: np.ndarray, mask: np.ndarray, action: int, reward: float, advantage: float | None = None) -> float:
        """L at the current parameters; ``advantage`` fixes A in the policy term (what
        ``gradients`` differentiates)."""
        pi, value, _ = self.forward(x, mask)
        a = reward - value if advantage is None else advantage
        return float(-a * np.log(pi[action]) + 0.5 * (reward - value) ** 2)

    def gradients(self, x: np.ndarray, mask: np.ndarray, action: int, reward: float) -> dict[str, np.ndarray]:
        p = self.params
        pi, value, h = self.forward(x, mask)
        advantage = reward - value
        d_logits = -advantage * (np.eye(len(pi))[action] - pi)  # d(-A log pi_a)/d logits, A held fixed
        d_value = -advantage  # d(0.5 A^2)/dV
        # The policy term also depends on V through A; as in A2C, that path is not followed.
        d_h = p["wp"].T @ d_logits + p["wv"] * d_value
        d_pre = d_h * (h > 0)
        return {
            "w1": np.outer(d_pre, x),
            "b1": d_pre,
            "wp": np.outer(d_logits, h),
            "bp": d_logits,
            "wv": d_value * h,
            "bv": np.array([d_value]),
        }

    def update(self, x: np.ndarray, mask: np.ndarray, action: int, reward: float) -> None:
        """One Adam step on one (state, action, reward) sample."""
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        self._t += 1
        for k, g in self.gradients(x, mask, action, reward).items():
            self._m[k] = beta1 * self._m[k] + (1 - beta1) * g
            self._v[k] = beta2 * self._v[k] + (1 - beta2) * g * g
            m_hat = self._m[k] / (1 - beta1**self._t)
            v_hat = self._v[k] / (1 - beta2**self._t)
            self.params[k] -= self.learning_rate * m_hat / (np.sqrt(v_hat) + eps)
