"""Which layer of a network gets the next trial: the allocators of the network tuner.

A network's cost is sum_i w_i * g_i, with w_i how often layer i runs and g_i the latency of its
best kernel so far. ``RoundRobin`` gives every layer the same share. ``Gradient`` is Ansor's
task scheduler (Zheng et al., OSDI 2020, section 6) without its similarity term: after a
warm-up that gives every layer a working kernel, the next trial goes to the layer whose next
trial is expected to lower the network's cost most,

    dcost/dt_i ~ w_i * (alpha * (g_i(t_i) - g_i(t_i - window)) / window + (1 - alpha) * (-g_i(t_i) / t_i)),

a backward difference over the layer's last ``window`` trials (how fast it is improving) mixed
with an optimistic forward guess (its latency could fall to zero in as many trials again), and
with probability ``epsilon`` a random layer instead (Ansor's defaults: alpha 0.2, window 3,
epsilon 0.05). Ansor's similarity term (a layer's latency could also fall to twice what it would
be at the best throughput of the layers of its template) is left out: on ResNet-18 it made the
tuned networks no faster (docs/decisions.md, Networks). The warm-up gives a layer up to ``WARMUP`` trials
to find a working kernel; a layer that has none after them gets only the random share. Layers
whose tuner has nothing left to propose are skipped.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

ALLOCATORS = ("gradient", "round-robin")


class Allocator(ABC):
    def __init__(self, weights: dict[str, float], rng: np.random.Generator) -> None:
        self.weights = dict(weights)
        self.rng = rng
        self.trials = {name: 0 for name in weights}  # proposed, in flight or done
        self.best: dict[str, list[float]] = {name: [] for name in weights}  # best latency after each result
        self.closed: set[str] = set()

    def open_layers(self) -> list[str]:
        return [name for name in self.weights if name not in self.closed]

    def proposed(self, name: str) -> None:
        self.trials[name] += 1

    def observe(self, name: str, latency: float | None) -> None:
        """A result of layer ``name``: its latency, or None for a failed kernel."""
        history = self.best[name]
        previous = history[-1] if history else math.inf
        history.append(min(previous, latency) if latency is not None and latency > 0 else previous)

    def close(self, name: str) -> None:
        """Layer ``name`` has nothing more to propose."""
        self.closed.add(name)

    def cost(self) -> float:
        """sum_i w_i * best latency_i (inf while a layer has no working kernel)."""
        return sum(w * (self.best[n][-1] if self.best[n] else math.inf) for n, w in self.weights.items())

    def next(self) -> str:
        """The layer to propose for next; ValueError when every layer is closed."""
        layers = self.open_layers()
        if not layers:
            raise ValueError("every layer of the network is closed")
        return self._choose(layers)

    @abstractmethod
    def _choose(self, layers: list[str]) -> str:
        """One of ``layers`` (open, in declaration order)."""


class RoundRobin(Allocator):
    def _choose(self, layers: list[str]) -> str:
        return min(layers, key=lambda n: self.trials[n])  # fewest trials first; ties in order


class Gradient(Allocator):
    ALPHA, WINDOW, EPSILON = 0.2, 3, 0.05
    WARMUP = 5
    """Trials a layer gets in the warm-up to find a working kernel; one that has none by then is
    left to the random share (its latency, and so its gain, is unknown)."""

    def _choose(self, layers: list[str]) -> str:
        warming = [n for n in layers if not self._working(n) and self.trials[n] < self.WARMUP]
        if warming:  # every layer needs a working kernel before it can be compared
            return min(warming, key=lambda n: self.trials[n])
        if self.rng.random() < self.EPSILON:
            return layers[int(self.rng.integers(len(layers)))]
        return max(layers, key=self._gain)

    def _working(self, name: str) -> bool:
        return bool(self.best[name]) and math.isfinite(self.best[name][-1])

    def _gain(self, name: str) -> float:
        """-dcost/dt_i: the expected fall of the network's cost from one more trial of ``name``."""
        if not self._working(name):
            return 0.0
        history, t = self.best[name], max(self.trials[name], 1)
        now = history[-1]
        before = history[-1 - self.WINDOW] if len(history) > self.WINDOW else history[0]
        backward = (before - now) / self.WINDOW if math.isfinite(before) else 0.0
        forward = now / t
        return self.weights[name] * (self.ALPHA * backward + (1 - self.ALPHA) * forward)


def make(kind: str, weights: dict[str, float], rng: np.random.Generator) -> Allocator:
    if kind == "gradient":
        return Gradient(weights, rng)
    if kind == "round-robin":
        return RoundRobin(weights, rng)
    raise ValueError(f"allocator must be one of {ALLOCATORS}, got {kind!r}")
