"""Where kernels run: each candidate's chance to run, estimated from the trials that failed.

A user's own search space comes without our static check, so most of it may not launch (a tiled
GEMM whose factorizations exceed the block's threads or shared memory: 78-88 % of Kernel Tuner's
GEMM grids). Every such configuration costs a trial. The performance surrogate sees a failure
only as a low value, which it cannot tell from a slow kernel, and it cannot be fitted at all
before two kernels have run, so the search would keep drawing blind where everything fails.

The estimate is a kernel-weighted share of successes among the measurements (Nadaraya-Watson
smoothing with a pseudo-observation of the overall success rate):

    p(x) = (r + sum_i k(x, x_i) ok_i) / (1 + sum_i k(x, x_i)),   r = (1 + successes) / (2 + measured)

with ``k(x, x') = exp(-sum_j d_j(x, x') / (l * atoms))``, the surrogate's kernel with its single
length ``l = FEASIBILITY_LENGTH`` (no relevances can be fitted yet). Far from every measurement
it is the overall rate; beside a failure it falls, beside a success it rises; while nothing has
failed it is 1 everywhere, and the search is exactly the one without it.

OpEvo uses it for the blind phase, until two kernels have run and the surrogate can be fitted:
the random draws are screened by rejection (uniform over where kernels run, as far as the
failures tell) and candidates are ranked by it. After that the surrogate, which scores failures
one below the slowest kernel, takes over alone: multiplying its expected improvement by the
chance to run (constrained Bayesian optimization with unknown constraints, Gardner et al. 2014)
lowered the mean over the cells, since fast kernels sit at the edge of what launches
(docs/decisions.md).
"""
from __future__ import annotations

import numpy as np

from .settings import FEASIBILITY_LENGTH
from .surrogate import weighted_distance


def chance_to_run(candidates: np.ndarray, measured: np.ndarray, ran: np.ndarray, ordinal: np.ndarray) -> np.ndarray:
    """``p(x)`` of each candidate row (see the module docstring); ``measured``: the atom rows of
    every measurement, ``ran``: whether each ran; ``ordinal``: which atoms are ordinal."""
    if ran.all():
        return np.ones(len(candidates))
    width = measured.shape[1]
    weights = np.full(width, 1.0 / (FEASIBILITY_LENGTH * width))
    similarity = np.exp(-weighted_distance(candidates, measured, ordinal, weights))
    rate = (1.0 + ran.sum()) / (2.0 + len(ran))
    return (rate + similarity @ ran.astype(float)) / (1.0 + similarity.sum(axis=1))
