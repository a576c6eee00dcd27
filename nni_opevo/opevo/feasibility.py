"""The chance that a configuration runs, learned apart from its speed.

Without a constraint, a configuration that cannot run (a tile past the hardware's limits) costs
a trial and returns nothing. The knobs that decide how fast a kernel is are not the ones that
decide whether it runs (a block's thread count against the GPU's limit), so one model of both,
its relevances fitted to speeds, learns little from a failure about the next one; and a speed
model that places failures one below the slowest kernel learns a cliff where there is none.
So the speed surrogate learns from the kernels that ran, and this model from every measurement,
whether it ran: a Gaussian process on run (+1) against fail (-1), with relevances of its own,
whose prior mean is the share that ran so far; a candidate's chance of running is the
posterior's probability of a positive label. With no failure yet (or no success) there is
nothing to tell apart, and every chance is 1.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import norm

from .gaussian_process import GaussianProcess, one_blas_thread


class Feasibility(GaussianProcess):
    """Fit on (atom rows, fitness) and give each candidate its chance of running."""

    prior = 0.0
    """The labels' mean over the training rows: the model's value far from every measurement."""

    @one_blas_thread
    def fit(self, atoms: np.ndarray, fitness: np.ndarray) -> None:
        """``fitness``: >= 0, 0 for failures; the most recent ``capacity`` rows train it (the
        failures that matter are those near where the search is now)."""
        atoms, fitness = atoms[-self.capacity:], fitness[-self.capacity:]
        ok = fitness > 0
        self._fitted = None
        if ok.all() or not ok.any():
            return
        labels = np.where(ok, 1.0, -1.0)
        self.prior = float(labels.mean())
        self._fitted = self.fit_targets(atoms, labels - self.prior)

    def probability(self, candidates: np.ndarray) -> np.ndarray:
        """Each candidate's chance of running (1 while unfitted)."""
        if not self.ready:
            return np.ones(len(candidates))
        mean, sd = self.predict(candidates)
        return norm.cdf((self.prior + mean) / sd)
