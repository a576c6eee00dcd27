"""The weighted k-nearest-neighbour surrogate of NoSE (Gatopoulos et al., sec. III.B, eqs. 1-4).

It needs no training: the prediction for a configuration is the distance-weighted mean of the
fitness of its k nearest evaluated configurations, with weights 1/d and the Canberra distance
d(x, z) = sum_l |x_l - z_l| / (|x_l| + |z_l|) over ``SearchSpace.features`` (a term with both
sides 0 counts 0, so an inactive parameter is 1 away from any active value and 0 from another
inactive one). A configuration at distance 0 of evaluated ones gets their mean.

The fitness predicted is the population's eq. 2 weight (TFLOPS as measured, 0 for a failure,
see ``fitness``), recomputed at every prediction so it follows minimize mode and shifts.
Memory is one feature row per evaluated configuration; a prediction costs one distance per
(candidate, evaluated configuration) pair, vectorized.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from ..population import Population
from ..space.search_space import Config, ConfigKey
from .features import Features


class KnnSurrogate:
    """Predicts the fitness of configurations from a population's evaluated ones."""

    def __init__(self, population: Population, k: int) -> None:
        self.population = population
        self.k = k
        self.features = Features(population.space)
        self._x = np.zeros((64, self.features.width))
        self._objective = np.zeros(64)  # NaN: failure
        self._row: dict[ConfigKey, int] = {}
        for key in population.evaluated():
            self.observe(key)

    def __len__(self) -> int:
        return len(self._row)

    def observe(self, key: ConfigKey) -> None:
        """Add (or update) an evaluated configuration of the population."""
        record = self.population.records[key]
        row = self._row.get(key)
        if row is None:
            row = len(self._row)
            if row == len(self._x):
                self._x = np.concatenate([self._x, np.zeros_like(self._x)])
                self._objective = np.concatenate([self._objective, np.zeros_like(self._objective)])
            self._row[key] = row
            self._x[row] = self.features(record.config)
        self._objective[row] = np.nan if record.objective is None else record.objective

    def predict(self, configs: list[Config]) -> np.ndarray:
        """Eq. 3 for each configuration; zeros while nothing is evaluated."""
        n = len(self._row)
        if n == 0 or not configs:
            return np.zeros(len(configs))
        x = np.stack([self.features(c) for c in configs])
        d = cdist(x, self._x[:n], "canberra")
        y = self.population.fitness.weights(self._objective[:n])
        k = min(self.k, n)
        # The k nearest, ties at the k-th distance going to the earlier evaluated: numpy's
        # argpartition breaks them differently on different CPUs (its AVX-512 sort), and the
        # same seed and measurements must predict alike everywhere (as ``nni_opevo.scores`` ranks).
        nearest = np.argsort(d, axis=1, kind="stable")[:, :k]
        dk = np.take_along_axis(d, nearest, axis=1)
        yk = y[nearest]
        exact = dk == 0
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(exact.any(axis=1, keepdims=True), exact.astype(float), 1.0 / dk)
            return (w * yk).sum(axis=1) / w.sum(axis=1)
