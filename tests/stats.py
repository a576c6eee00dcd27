"""False-pass probabilities of statistical tests: how likely a tuner that searched at random
(or one indistinguishable from its baseline) would pass. Every statistical test computes its
own with these and asserts it is below ``ALPHA`` before asserting the outcome."""
from __future__ import annotations

from scipy import stats

ALPHA = 0.01


def binomial_tail(successes: int, trials: int, p: float) -> float:
    """P(X >= successes) for X ~ Binomial(trials, p)."""
    return float(stats.binom.sf(successes - 1, trials, p))


def hypergeometric_tail(hits: int, population: int, good: int, draws: int) -> float:
    """P(X >= hits) when ``draws`` distinct points are drawn at random from ``population`` of
    which ``good`` are good (random search without repeats)."""
    return float(stats.hypergeom.sf(hits - 1, population, good, draws))


def sign_test(wins: int, n: int) -> float:
    """P(at least ``wins`` of ``n`` paired comparisons won) when each is a fair coin: the
    chance that a tuner no better than its baseline wins that often."""
    return binomial_tail(wins, n, 0.5)
