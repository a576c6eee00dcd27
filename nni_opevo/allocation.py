"""Which layer of a network gets the next trial: the allocators of ``NetworkTuner``.

A network's cost is sum_i w_i * g_i, with w_i how often layer i runs and g_i the latency of its
best kernel so far. ``RoundRobin`` gives every layer the same share. ``Gradient`` is Ansor's
task scheduler (Zheng et al., OSDI 2020, section 6): after a warm-up that gives every layer a
working kernel, the next trial goes to the layer whose next trial is expected to lower the
network's cost most,

    dcost/dt_i ~ w_i * (alpha * (g_i(t_i) - g_i(t_i - window)) / window
                        + (1 - alpha) * min(-g_i(t_i) / t_i, beta * C_i / max_k V_k - g_i(t_i))),

a backward difference over the layer's last ``window`` trials (how fast it is improving) mixed
with an optimistic forward guess, and with probability ``epsilon`` a random layer instead
(Ansor's defaults: alpha 0.2, window 3, beta 2, epsilon 0.05). The forward guess is the larger
of two expected falls: its latency could fall to zero in as many trials again, or to within
``beta`` of what its *kin* (the layers of its template, ``kin``) reach, C_i being its work and
V_k the best throughput of kin k. Why the second: a small layer has a small share of the
network, so by the first guess alone it gets a trial only when every heavy layer has had many,
while its kin show how far below its current latency the template can go. The throughput is the
score of a result where the objective is one (``rate``: maximized, TFLOPS); C_i / V_k is then
g_i * V_i / V_k, so no layer's work needs to be known, and a layer without kin or rates has the
first guess alone. The warm-up gives a layer up to ``WARMUP`` trials to find a working kernel; a
layer that has none after them gets only the random share. Layers whose tuner has nothing left
to propose are skipped.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

ALLOCATORS = ("gradient", "round-robin")


class Allocator(ABC):
    def __init__(self, weights: dict[str, float], rng: np.random.Generator,
                 kin: Iterable[Iterable[str]] = ()) -> None:
        self.weights = dict(weights)
        self.rng = rng
        self.trials = {name: 0 for name in weights}  # proposed, in flight or done
        self.best: dict[str, list[float]] = {name: [] for name in weights}  # best latency after each result
        self.rate: dict[str, float] = {}  # best throughput of each layer that reported one
        self.kin: dict[str, list[str]] = {}  # layer -> every layer of its template, itself included
        for group in kin:
            members = list(group)
            for name in members:
                self.kin[name] = members
        self.closed: set[str] = set()

    def open_layers(self) -> list[str]:
        return [name for name in self.weights if name not in self.closed]

    def proposed(self, name: str) -> None:
        self.trials[name] += 1

    def observe(self, name: str, latency: float | None, rate: float | None = None) -> None:
        """A result of layer ``name``: its latency, or None for a failed kernel, and its
        throughput where the objective is one."""
        history = self.best[name]
        previous = history[-1] if history else math.inf
        working = latency is not None and latency > 0
        history.append(min(previous, latency) if working else previous)
        if working and rate is not None and rate > 0:
            self.rate[name] = max(self.rate.get(name, 0.0), rate)

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
    ALPHA, WINDOW, BETA, EPSILON = 0.2, 3, 2.0, 0.05
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
        forward = max(now / t, now * (1 - self.BETA * self._rate_share(name)))
        return self.weights[name] * (self.ALPHA * backward + (1 - self.ALPHA) * forward)


    def _rate_share(self, name: str) -> float:
        """V_i / max_k V_k over the layer's kin (1 where it has no kin or no throughput is known)."""
        rates = [self.rate[k] for k in self.kin.get(name, ()) if k in self.rate]
        if name not in self.rate or len(rates) < 2:
            return 1.0
        return self.rate[name] / max(rates)


def make(kind: str, weights: dict[str, float], rng: np.random.Generator,
         kin: Iterable[Iterable[str]] = ()) -> Allocator:
    if kind == "gradient":
        return Gradient(weights, rng, kin)
    if kind == "round-robin":
        return RoundRobin(weights, rng, kin)
    raise ValueError(f"allocator must be one of {ALLOCATORS}, got {kind!r}")
