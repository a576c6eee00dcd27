"""The Gaussian process behind OpEvo's models of speed (``surrogate``) and of failure (``feasibility``).

* **Kernel**: ``k(x, x') = exp(-sum_j w_j d_j(x, x'))`` on rows of atoms (``SearchSpace.atoms``),
  with ``d_j`` the distance in atom j (``per_atom``: |x - y| for ordinal atoms, x != y for
  categorical ones). One relevance ``w_j`` per atom (automatic relevance determination): which
  knobs matter differs from kernel to kernel and GPU to GPU (shared memory on or off may decide
  everything on one, nothing on another), and a model that weighs every knob alike spends its
  measurements learning that the irrelevant ones do not matter. The relevances are fitted at
  every refit by maximizing the marginal likelihood (``RELEVANCE_STEPS`` L-BFGS steps) under a
  log-normal prior (``RELEVANCE_PRIOR`` e-folds) centred on the best single length of a small
  grid, which keeps them sane on a few dozen points; a row of more than ``RELEVANCE_LIMIT``
  atoms keeps the single length (the fit's memory and time grow with the atoms).
* **Targets**: of prior mean 0 and variance 1; each model says what they are.
* **One BLAS thread**: the tuner shares the machine with the trials' builds and measurements,
  and a multi-threaded BLAS spinning on busy cores turned a 128 x 128 Cholesky factorization
  from 0.12 ms into 27 ms on the 2-core development machine; so the model computes on one
  thread (``threadpoolctl``, which NNI 3.0 installs through scikit-learn).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from scipy.linalg import cho_solve, cholesky
from scipy.optimize import minimize
from threadpoolctl import ThreadpoolController

from .settings import LENGTHS, NOISE, RELEVANCE_LIMIT, RELEVANCE_PRIOR, RELEVANCE_STEPS

CHUNK = 1 << 20
"""Distances held at once when comparing many rows over many atoms (bounds the memory of a refit)."""


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


@dataclass(frozen=True)
class Fitted:
    """A fitted model: its training rows, relevances, Cholesky factor and weights."""

    atoms: np.ndarray
    relevance: np.ndarray
    factor: np.ndarray
    alpha: np.ndarray


class GaussianProcess:
    """A Gaussian process on rows of atoms: its relevances fitted to each set of targets, and
    the posterior at candidates. Subclasses say what the targets are."""

    def __init__(self, capacity: int, ordinal: np.ndarray) -> None:
        self.capacity = capacity
        self.ordinal = ordinal
        self._fitted: Fitted | None = None
        self._relevance: np.ndarray | None = None

    @property
    def ready(self) -> bool:
        return self._fitted is not None

    @property
    def relevance(self) -> np.ndarray | None:
        """The fitted relevance of each atom (None before a fit)."""
        return None if self._fitted is None else self._fitted.relevance

    def fit_targets(self, atoms: np.ndarray, z: np.ndarray) -> Fitted | None:
        """The model of targets ``z`` (prior mean 0, variance 1) on ``atoms``, its relevances
        fitted; None when no kernel matrix is positive definite."""
        width = atoms.shape[1]
        distances = per_atom(atoms, atoms, self.ordinal) if width <= RELEVANCE_LIMIT else None
        between = distances.mean(axis=2) if distances is not None else \
            weighted_distance(atoms, atoms, self.ordinal, np.full(width, 1.0 / width))
        single = None
        for length in LENGTHS:
            fit = _solve(np.exp(-between / length), z)
            if fit is not None and (single is None or fit[0] > single[0]):
                single = (fit[0], length)
        if single is None:
            return None
        relevance = np.full(width, 1.0 / (single[1] * width))
        if distances is not None:
            # The previous fit's relevances start the search: one measurement more moves them little.
            previous = self._relevance if self._relevance is not None and len(self._relevance) == width else relevance
            relevance = _relevances(distances, z, relevance, previous)
            self._relevance = relevance
            fit = _solve(np.exp(-distances @ relevance), z)
        else:
            fit = _solve(np.exp(-between / single[1]), z)
        if fit is None:
            return None
        _, factor, alpha = fit
        return Fitted(atoms, relevance, factor, alpha)

    @one_blas_thread
    def predict(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The posterior mean and standard deviation of each candidate's target."""
        assert self._fitted is not None
        f = self._fitted
        cross = np.exp(-weighted_distance(candidates, f.atoms, self.ordinal, f.relevance))
        mean = cross @ f.alpha
        v = cho_solve((f.factor, True), cross.T)
        return mean, np.sqrt(np.maximum(1.0 - np.einsum("ij,ji->i", cross, v), 1e-12))


def _solve(kernel: np.ndarray, z: np.ndarray) -> tuple[float, np.ndarray, np.ndarray] | None:
    """(log evidence up to a constant, Cholesky factor, K^-1 z) of the kernel matrix plus noise;
    None when it is not positive definite."""
    try:
        factor = cholesky(kernel + NOISE * np.eye(len(z)), lower=True)
    except np.linalg.LinAlgError:
        return None
    alpha = cho_solve((factor, True), z)
    return -0.5 * float(z @ alpha) - float(np.log(np.diag(factor)).sum()), factor, alpha


def _relevances(distances: np.ndarray, z: np.ndarray, prior: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The relevances maximizing the marginal likelihood of ``z`` plus the log-normal prior
    around ``prior`` (``distances``: n x n x atoms), searched from ``start``; ``prior`` when
    the fit fails."""
    centre = np.log(prior)
    identity = np.eye(len(z))

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w = np.exp(theta)
        kernel = np.exp(-distances @ w)
        try:
            factor = cholesky(kernel + NOISE * identity, lower=True)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(theta)
        alpha = cho_solve((factor, True), z)
        inverse = cho_solve((factor, True), identity)
        # d(-log evidence)/d theta_j = 0.5 w_j sum((alpha alpha^T - K^-1) * K * D_j)
        outer = (np.outer(alpha, alpha) - inverse) * kernel
        grad = 0.5 * w * np.einsum("ik,ikj->j", outer, distances) + (theta - centre) / RELEVANCE_PRIOR**2
        value = 0.5 * float(z @ alpha) + float(np.log(np.diag(factor)).sum())
        return value + 0.5 * float(((theta - centre) ** 2).sum()) / RELEVANCE_PRIOR**2, grad

    try:
        bounds = [(c - 6 * RELEVANCE_PRIOR, c + 6 * RELEVANCE_PRIOR) for c in centre]
        result = minimize(loss, np.clip(np.log(start), *np.array(bounds).T), jac=True, method="L-BFGS-B",
                          options={"maxiter": RELEVANCE_STEPS}, bounds=bounds)
    except (ValueError, FloatingPointError):
        return prior
    return np.exp(result.x) if np.all(np.isfinite(result.x)) else prior


def per_atom(a: np.ndarray, b: np.ndarray, ordinal: np.ndarray) -> np.ndarray:
    """The distance in each atom between each row of ``a`` and each row of ``b`` (len(a) x
    len(b) x atoms): |x - y| for an ordinal atom, 0 or 1 (equal or not) for a categorical one;
    an inactive atom (NaN) is 0 from another inactive one and 1 from any active one."""
    d = a[:, None, :] - b[None, :, :]
    categorical = ~np.asarray(ordinal, dtype=bool)
    unequal = d[..., categorical] != 0
    np.abs(d, out=d)
    d[..., categorical] = unequal
    a_off, b_off = np.isnan(a), np.isnan(b)
    if a_off.any() or b_off.any():  # in place, on the rows and atoms concerned: a refit computes this often
        off = a_off[:, None, :] | b_off[None, :, :]
        d[off] = (a_off[:, None, :] != b_off[None, :, :])[off]
    return d


def weighted_distance(a: np.ndarray, b: np.ndarray, ordinal: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``sum_j weights_j * per_atom(a, b)_j``, over blocks of atoms so that at most ``CHUNK``
    distances are held at once, however wide the rows."""
    out = np.zeros((len(a), len(b)))
    step = max(1, CHUNK // max(1, len(a) * len(b)))
    for j in range(0, a.shape[1], step):
        block = slice(j, j + step)
        out += per_atom(a[:, block], b[:, block], ordinal[block]) @ weights[block]
    return out
