"""The q-random walk (eq. 3) stops where appendix A's closed form says:
S = (1 - q) (I - Q)^-1 p0, with Q[v, u] = q / |S(u)| for every neighbour v of u."""
import numpy as np
import pytest

from nni_opevo.opevo.operators import q_random_walk
from nni_opevo.space.parameters import DiscreteParameter, FactorParameter, PermParameter

DRAWS = 200_000


def closed_form(param, start, q):
    vertices = list(param.enumerate())
    index = {v: i for i, v in enumerate(vertices)}
    Q = np.zeros((len(vertices), len(vertices)))
    for u in vertices:
        nbrs = param.neighbours(u)
        for v in nbrs:
            Q[index[v], index[u]] = q / len(nbrs)
    p0 = np.zeros(len(vertices))
    p0[index[start]] = 1.0
    S = (1 - q) * np.linalg.solve(np.eye(len(vertices)) - Q, p0)
    return vertices, S


def empirical(param, start, q, seed):
    rng = np.random.default_rng(seed)
    vertices = list(param.enumerate())
    index = {v: i for i, v in enumerate(vertices)}
    counts = np.zeros(len(vertices))
    for _ in range(DRAWS):
        counts[index[q_random_walk(param, start, q, rng)]] += 1
    return counts / DRAWS


LONG_WALKS = pytest.mark.slow(seconds=25)
"""q = 0.9 walks ten steps on average, 200k times: 10-35 s each beside the other lane, too long for the edit-test loop."""


@pytest.mark.parametrize(
    "param,start,q",
    [
        (FactorParameter("f", [8, 3]), (8, 1, 1), 0.5),
        pytest.param(FactorParameter("f", [8, 3]), (8, 1, 1), 0.9, marks=LONG_WALKS),
        (PermParameter("p", 4), (0, 1, 2, 3), 0.5),
        pytest.param(PermParameter("p", 4), (0, 1, 2, 3), 0.9, marks=LONG_WALKS),
        (DiscreteParameter("d", list(range(10))), 3, 0.5),
        pytest.param(DiscreteParameter("d", list(range(10))), 3, 0.9, marks=LONG_WALKS),
    ],
    ids=["factor-q0.5", "factor-q0.9", "perm4-q0.5", "perm4-q0.9", "discrete10-q0.5", "discrete10-q0.9"],
)
def test_walk_matches_appendix_a(param, start, q):
    _, S = closed_form(param, start, q)
    assert S.sum() == pytest.approx(1.0) and (S >= 0).all()  # Theorem 1
    tv = 0.5 * np.abs(empirical(param, start, q, seed=7) - S).sum()
    assert tv < 0.01


@pytest.mark.parametrize("q", [0.5, pytest.param(0.9, marks=LONG_WALKS)])
def test_figure_2_higher_degree_is_likelier(q):
    """Figure 2's observations, read off the walk the tuner runs (200k draws each; every
    difference asserted is over six standard errors of a difference of two frequencies)."""
    param = FactorParameter("f", [8, 3])
    vertices = list(param.enumerate())
    freq = dict(zip(vertices, empirical(param, (8, 1, 1), q, seed=11)))
    margin = 6 * np.sqrt(2 * 0.25 / DRAWS)  # six standard errors of a difference, at its largest
    # Same distance from (8,1,1), but (2,2,2) has degree 6 against 4 for (2,1,4) and (2,4,1).
    assert freq[(2, 2, 2)] > freq[(2, 1, 4)] + margin
    assert freq[(2, 2, 2)] > freq[(2, 4, 1)] + margin
    assert freq[(8, 1, 1)] > freq[(4, 2, 1)] + margin
    assert freq[(4, 2, 1)] > freq[(2, 2, 2)] + margin
    if q == 0.9:  # a larger q spreads the mass further from the start
        low = dict(zip(vertices, empirical(param, (8, 1, 1), 0.5, seed=12)))
        assert freq[(8, 1, 1)] + margin < low[(8, 1, 1)]
