"""A small Gaussian-process surrogate that screens OpEvo's children by expected improvement.

Tuning budgets are small (tens to hundreds of kernels), and a child bred from good parents is
still a guess: among the children OpEvo could breed next, the one most likely to beat the best
so far is worth measuring first. A Gaussian process (``gaussian_process``) learns that from
every kernel that ran:

* **Encoding**: a configuration becomes a row of *atoms* (``SearchSpace.atoms``): a factor's
  entries as log2 shares of C (ordinal: tile sizes act in ratios), a perm's item at each
  position, a choice's value (categorical), a discrete set's value as a category and as its
  log-scaled position (a knob's values may perform smoothly in their order or not at all: a
  48-wide block between two good powers of two can be ten times slower) and, where the set
  mixes powers of two with other sizes, whether the value is one (categorical: the sizes that
  are not powers of two are often all slow), a grid's or a continuous parameter's position in
  its range (ordinal).
* **Targets**: log fitness of the kernels that ran, standardized. Failures (fitness 0) are
  learned apart (``feasibility``): placed one below the slowest kernel, they taught the speed
  model a cliff, and its relevances fitted to speeds say little about where kernels fail.
* **Cost**: at most ``capacity`` measurements train the model (the best half and the most
  recent half when there are more), so a refit is a few dozen Cholesky factorizations of at
  most that size, whatever the history.
* **Acquisition**: expected improvement over the best standardized log fitness; OpEvo's local
  steps ask for the posterior's standard deviation alone (``predict``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import norm

from .gaussian_process import GaussianProcess, one_blas_thread


class Surrogate(GaussianProcess):
    """Fit on (atom rows, fitness) the speeds of the kernels that ran, and score candidates by
    expected improvement."""

    _best = 0.0
    """The best standardized log fitness the model was fitted on."""

    @one_blas_thread
    def fit(self, atoms: np.ndarray, fitness: np.ndarray) -> None:
        """``atoms``: one row per measured configuration; ``fitness``: >= 0, 0 for failures,
        which this model leaves out. Fewer than two kernels that ran leave it unfitted (nothing
        to rank by)."""
        ran = fitness > 0
        atoms, fitness = atoms[ran], fitness[ran]
        self._fitted = None
        if len(fitness) < 2:
            return
        if len(fitness) > self.capacity:
            best = np.argsort(-fitness, kind="stable")[: self.capacity // 2]
            recent = np.arange(len(fitness) - (self.capacity - len(best)), len(fitness))
            keep = np.union1d(best, recent)
            atoms, fitness = atoms[keep], fitness[keep]
        log = np.log(fitness)
        z = (log - log.mean()) / (log.std() or 1.0)
        self._fitted = self.fit_targets(atoms, z)
        self._best = float(z.max())

    def expected_improvement(self, candidates: np.ndarray) -> np.ndarray:
        assert self._fitted is not None
        mean, sd = self.predict(candidates)
        gain = (mean - self._best) / sd
        return (mean - self._best) * norm.cdf(gain) + sd * norm.pdf(gain)


class TrainingSet:
    """The measurements a surrogate learns from, in the order they arrived: each configuration's
    atoms and objective (None for a failure), kept in growing arrays so that a fit never
    re-encodes the history. A configuration measured again (a late result after a provisional
    failure) keeps its place and takes the new objective."""

    def __init__(self) -> None:
        self._index: dict[Any, int] = {}
        self._keys: list[Any] = []
        self._rows = np.zeros((0, 0))
        self._objectives = np.zeros(0)

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, key: Any, atoms: np.ndarray, objective: float | None) -> None:
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self._keys)
            self._keys.append(key)
            if i == len(self._objectives):
                grown = max(64, 2 * len(self._objectives))
                rows = np.full((grown, len(atoms)), np.nan)
                if i:
                    rows[:i] = self._rows[:i]
                self._rows = rows
                self._objectives = np.concatenate([self._objectives, np.full(grown - i, np.nan)])
            self._rows[i] = atoms
        self._objectives[i] = np.nan if objective is None else objective

    def index(self, key: Any) -> int:
        return self._index[key]

    def keys_since(self, start: int) -> set[Any]:
        return set(self._keys[start:])

    @property
    def objectives(self) -> np.ndarray:
        """Every measurement's objective in arrival order (NaN for a failure)."""
        return self._objectives[: len(self._keys)]

    def arrays(self, fitness: Any) -> tuple[np.ndarray, np.ndarray]:
        """(atoms, eq. 2 weights) of every measurement; ``fitness`` is the population's."""
        n = len(self._keys)
        return self._rows[:n], fitness.weights(self._objectives[:n])
