"""Ranking a model's scores the same way on every machine.

A tuner that proposes by a model's scores (OpEvo's expected improvement, NoSE's k-NN
predictions) often meets candidates the model cannot tell apart: two neighbours of the best one
step away on either side, mirror images, children with the same nearest neighbours. Their
scores are equal up to rounding, and rounding differs between machines: numpy's AVX-512
``exp`` and its AVX2 one differ in the last bit, so ``argmax`` picked one twin on one machine
and the other twin on the next, and the same seed and measurements gave different searches.
Scores are therefore compared at ``SIGNIFICANT_BITS`` bits (rounded with ``frexp``/``ldexp``,
which are exact, not with ``log10``, which is itself one of the functions that differ), where
twins are equal on every machine and their order is the candidates' own.
"""
from __future__ import annotations

import numpy as np

SIGNIFICANT_BITS = 30
"""A score's bits that count (about 9 digits): rounding differences are some 1e-14 of a score,
and a model fitted to a tolerance far coarser than 1e-9 means nothing past it."""


def comparable(scores: np.ndarray) -> np.ndarray:
    """``scores`` rounded to ``SIGNIFICANT_BITS`` bits (infinities and NaN as they are)."""
    mantissa, exponent = np.frexp(np.asarray(scores, dtype=float))
    return np.ldexp(np.round(mantissa * 2.0 ** SIGNIFICANT_BITS), exponent - SIGNIFICANT_BITS)


def first_best(scores: np.ndarray) -> int:
    """The index of the highest score, the first of equal ones (``comparable``)."""
    return int(np.argmax(comparable(scores)))


def best_first(scores: np.ndarray) -> np.ndarray:
    """The indices from the highest score down, equal ones (``comparable``) in their order."""
    return np.argsort(-comparable(scores), kind="stable")
