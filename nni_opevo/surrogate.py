"""A small Gaussian-process surrogate that screens OpEvo's children by expected improvement.

Tuning budgets are small (tens to hundreds of kernels), and a child bred from good parents is
still a guess: among the children OpEvo could breed next, the one most likely to beat the best
so far is worth measuring first. A Gaussian process learns that from every measurement:

* **Encoding**: a configuration becomes a row of *atoms* (``SearchSpace.atoms``): a factor's
  entries as log2 shares of C (ordinal: tile sizes act in ratios), a perm's item at each
  position, a choice's or a discrete set's value (categorical: a knob's values rarely perform
  smoothly in their order, a 48-wide block between two good powers of two can be ten times
  slower), a grid's or a continuous parameter's position in its range (ordinal).
* **Kernel**: ``k(x, x') = exp(-h(x, x') / l)`` with ``h`` the mean over atoms of |x - y| for
  ordinal atoms and of x != y for categorical ones (``distance``); the length ``l`` is chosen by
  maximizing the marginal likelihood over a fixed grid at every refit.
* **Targets**: log fitness, standardized; failures and refusals (fitness 0) sit one below the
  lowest measured log fitness, so the model learns where kernels fail without their zeros
  swamping the scale of the ones that run.
* **Cost**: at most ``capacity`` measurements train the model (the best half and the most
  recent half when there are more), so a refit is one Cholesky factorization per grid length
  of at most that size, whatever the history.
* **Acquisition**: expected improvement over the best standardized log fitness.
* **One BLAS thread**: the tuner shares the machine with the trials' builds and measurements,
  and a multi-threaded BLAS spinning on busy cores turned a 128 x 128 Cholesky factorization
  from 0.12 ms into 27 ms on the 2-core development machine; so the model computes on one
  thread (``threadpoolctl``, which NNI 3.0 installs through scikit-learn).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from scipy.linalg import cho_solve, cholesky
from scipy.stats import norm
from threadpoolctl import ThreadpoolController

LENGTHS = (0.05, 0.1, 0.2, 0.4, 0.8)
"""Candidate lengths ``l`` (as a share of the atoms that differ) for the marginal likelihood to pick from."""
NOISE = 1e-2
"""Observation noise variance on the standardized targets (timing noise, and numerical slack)."""


Result = TypeVar("Result")


@functools.cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def one_blas_thread(method: Callable[..., Result]) -> Callable[..., Result]:
    """Run ``method`` with the BLAS libraries limited to one thread (see the module docstring)."""
    @functools.wraps(method)
    def limited(*args: Any, **kwargs: Any) -> Result:
        with _blas().limit(limits=1, user_api="blas"):
            return method(*args, **kwargs)
    return limited


class Surrogate:
    """Fit on (atom rows, fitness) and score candidates by expected improvement."""

    def __init__(self, capacity: int, ordinal: np.ndarray) -> None:
        self.capacity = capacity
        self.ordinal = ordinal
        self._fitted: tuple[np.ndarray, np.ndarray, np.ndarray, float, float] | None = None

    @property
    def ready(self) -> bool:
        return self._fitted is not None

    @one_blas_thread
    def fit(self, atoms: np.ndarray, fitness: np.ndarray) -> None:
        """``atoms``: one row per measured configuration; ``fitness``: >= 0, 0 for failures.
        Fewer than two successes leave the model unfitted (nothing to rank by)."""
        ok = fitness > 0
        if ok.sum() < 2:
            self._fitted = None
            return
        if len(fitness) > self.capacity:
            best = np.argsort(-fitness, kind="stable")[: self.capacity // 2]
            recent = np.arange(len(fitness) - (self.capacity - len(best)), len(fitness))
            keep = np.union1d(best, recent)
            atoms, fitness, ok = atoms[keep], fitness[keep], ok[keep]
        log = np.log(np.where(ok, fitness, 1.0))
        log = np.where(ok, log, log[ok].min() - 1.0)
        z = (log - log.mean()) / (log.std() or 1.0)
        between = distance(atoms, atoms, self.ordinal)
        best_fit = None
        for length in LENGTHS:
            try:
                factor = cholesky(np.exp(-between / length) + NOISE * np.eye(len(z)), lower=True)
            except np.linalg.LinAlgError:
                continue
            alpha = cho_solve((factor, True), z)
            evidence = -0.5 * float(z @ alpha) - float(np.log(np.diag(factor)).sum())
            if best_fit is None or evidence > best_fit[0]:
                best_fit = (evidence, length, factor, alpha)
        if best_fit is None:
            self._fitted = None
            return
        _, length, factor, alpha = best_fit
        self._fitted = (atoms, factor, alpha, length, float(z.max()))

    @one_blas_thread
    def expected_improvement(self, candidates: np.ndarray) -> np.ndarray:
        assert self._fitted is not None
        atoms, factor, alpha, length, best = self._fitted
        cross = np.exp(-distance(candidates, atoms, self.ordinal) / length)
        mean = cross @ alpha
        v = cho_solve((factor, True), cross.T)
        sd = np.sqrt(np.maximum(1.0 - np.einsum("ij,ji->i", cross, v), 1e-12))
        gain = (mean - best) / sd
        return (mean - best) * norm.cdf(gain) + sd * norm.pdf(gain)


def distance(a: np.ndarray, b: np.ndarray, ordinal: np.ndarray) -> np.ndarray:
    """Mean over atoms of the distance between each row of ``a`` and each row of ``b``: |x - y|
    for an ordinal atom, 0 or 1 (equal or not) for a categorical one; an inactive atom (NaN) is
    0 from another inactive one and 1 from any active one."""
    diff = a[:, None, :] - b[None, :, :]
    per_atom = np.where(ordinal, np.abs(diff), (diff != 0).astype(float))
    a_off, b_off = np.isnan(a)[:, None, :], np.isnan(b)[None, :, :]
    per_atom = np.where(a_off | b_off, (a_off != b_off).astype(float), per_atom)
    return per_atom.mean(axis=2)


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

    def arrays(self, fitness: Any) -> tuple[np.ndarray, np.ndarray]:
        """(atoms, eq. 2 weights) of every measurement; ``fitness`` is the population's."""
        n = len(self._keys)
        return self._rows[:n], fitness.weights(self._objectives[:n])
