"""Neighbour sets of every parameter type equal the paper's topologies (sec. 3, Figure 1),
and uniform sampling and random neighbours match their definitions without enumeration."""
import math
from collections import Counter

import numpy as np
import pytest

from nni_opevo.space.parameters import (
    ChoiceParameter,
    DiscreteParameter,
    FactorParameter,
    PermParameter,
    QUniformParameter,
    RandintParameter,
    prime_factorization,
)


def neighbour_set(param, value):
    out = param.neighbours(value)
    assert len(out) == len(set(out)), "neighbours must be distinct"
    return set(out)


def test_factor_c8_nu3_figure_1a():
    p = FactorParameter("t", [8, 3])
    assert neighbour_set(p, (8, 1, 1)) == {(4, 2, 1), (4, 1, 2)}
    assert neighbour_set(p, (4, 2, 1)) == {(2, 4, 1), (2, 2, 2), (8, 1, 1), (4, 1, 2)}
    assert neighbour_set(p, (2, 2, 2)) == {(1, 4, 2), (1, 2, 4), (4, 1, 2), (2, 1, 4), (4, 2, 1), (2, 4, 1)}
    vertices = list(p.enumerate())
    assert len(vertices) == p.size == 10
    # The triangular grid of Figure 1a: 18 undirected edges, adjacency symmetric.
    edges = {frozenset((u, v)) for u in vertices for v in p.neighbours(u)}
    assert len(edges) == 18
    assert all(u in p.neighbours(v) for u in vertices for v in p.neighbours(u))


def test_factor_moves_each_distinct_prime():
    p = FactorParameter("t", [12, 2])
    assert neighbour_set(p, (12, 1)) == {(6, 2), (4, 3)}
    assert neighbour_set(p, (1, 12)) == {(2, 6), (3, 4)}
    assert neighbour_set(p, (6, 2)) == {(3, 4), (2, 6), (12, 1)}


def test_perm_n3_figure_1b():
    p = PermParameter("order", 3)
    assert neighbour_set(p, (0, 1, 2)) == {(1, 0, 2), (2, 1, 0), (0, 2, 1)}
    vertices = list(p.enumerate())
    edges = {frozenset((u, v)) for u in vertices for v in p.neighbours(u)}
    assert len(vertices) == 6 and len(edges) == 9


def test_discrete_1234_figure_1c():
    p = DiscreteParameter("unroll", [3, 1, 4, 2])
    by_value = {p.to_trial(k): {p.to_trial(n) for n in p.neighbours(k)} for k in p.enumerate()}
    assert by_value == {1: {2}, 2: {1, 3}, 3: {2, 4}, 4: {3}}


def test_choice_of_six_figure_1d():
    p = ChoiceParameter("c", list("abcdef"))
    for k in range(6):
        assert neighbour_set(p, k) == set(range(6)) - {k}


@pytest.mark.parametrize(
    "param,start",
    [
        (FactorParameter("f", [8, 3]), (2, 2, 2)),
        (FactorParameter("f", [360, 3]), (360, 1, 1)),
        (PermParameter("p", 4), (0, 1, 2, 3)),
        (ChoiceParameter("c", list("abcdef")), 2),
        (DiscreteParameter("d", [1, 2, 3]), 1),
        (RandintParameter("r", [0, 10]), 0),
    ],
)
def test_random_neighbour_is_uniform_over_neighbours(param, start):
    rng = np.random.default_rng(0)
    expected = param.neighbours(start)
    draws = Counter(param.random_neighbour(start, rng) for _ in range(20_000))
    assert set(draws) == set(expected)
    for v in expected:
        assert draws[v] / 20_000 == pytest.approx(1 / len(expected), abs=0.02)


@pytest.mark.slow(seconds=10)
def test_factor_sampling_is_uniform_over_factorizations():
    p = FactorParameter("f", [72, 3])  # 2^3 * 3^2: 10 * 6 = 60 factorizations
    rng = np.random.default_rng(1)
    n = 120_000
    counts = Counter(p.sample(rng) for _ in range(n))
    assert set(counts) == set(p.enumerate()) and len(counts) == 60
    tv = 0.5 * sum(abs(c / n - 1 / 60) for c in counts.values())
    assert tv < 0.02


def test_factor_huge_space_without_enumeration():
    p = FactorParameter("f", [2**30, 8])
    assert p.size == math.comb(37, 7)
    rng = np.random.default_rng(2)
    for _ in range(200):
        v = p.sample(rng)
        assert len(v) == 8 and math.prod(v) == 2**30
        n = p.random_neighbour(v, rng)
        assert math.prod(n) == 2**30 and sum(a != b for a, b in zip(v, n)) == 2


def test_prime_factorization():
    assert prime_factorization(1) == []
    assert prime_factorization(2**30) == [(2, 30)]
    assert prime_factorization(227 * 227 * 12) == [(2, 2), (3, 1), (227, 2)]
    assert prime_factorization(1_000_003) == [(1_000_003, 1)]


def test_isolated_values_have_no_neighbour():
    rng = np.random.default_rng(0)
    for p, v in [(FactorParameter("f", [7, 1]), (7,)), (FactorParameter("f", [1, 4]), (1, 1, 1, 1)),
                 (PermParameter("p", 1), (0,)), (ChoiceParameter("c", [5]), 0), (DiscreteParameter("d", [2]), 0)]:
        assert p.neighbours(v) == [] and p.random_neighbour(v, rng) is None


def test_quniform_grid_follows_nni_rounding_and_clipping():
    p = QUniformParameter("x", [0.3, 4.2, 1])
    # NNI gives clip(round(x / q) * q, low, high): 0.3 at the low edge, and never 4.2 (round(4.2) = 4).
    assert [p.to_trial(k) for k in p.enumerate()] == [0.3, 1.0, 2.0, 3.0, 4.0]
    assert p.neighbours(p.from_trial(2.0)) == [p.from_trial(1.0), p.from_trial(3.0)]


@pytest.mark.parametrize(
    "param",
    [
        FactorParameter("f", [2**3 * 3**2 * 5, 3]),
        PermParameter("p", 4),
        ChoiceParameter("c", ["a", "b", "c", "d"]),
        DiscreteParameter("d", [1, 2, 4, 8, 16]),
        RandintParameter("r", [-3, 4]),
        QUniformParameter("q", [0, 2, 0.25]),
    ],
    ids=lambda p: p.type_name,
)
def test_fixed_moves_reach_exactly_the_neighbours(param):
    """N-A2C's action set (``moves``) applied to any value gives exactly its neighbours, and
    the origin is the first listed value ((C, 1, 1) for a factor: the loop untiled)."""
    for value in param.enumerate():
        reached = [param.apply_move(value, m) for m in param.moves]
        assert {r for r in reached if r is not None} == neighbour_set(param, value)
    assert param.origin() == next(iter(param.enumerate()))
    if isinstance(param, FactorParameter):
        assert param.origin() == (360, 1, 1)


def test_search_space_moves_handle_nested_choices_and_continuous_steps():
    from nni_opevo.peers.features import Features
    from nni_opevo.space.search_space import SearchSpace

    space = SearchSpace({
        "u": {"_type": "uniform", "_value": [0, 10]},
        "c": {"_type": "choice", "_value": [{"_name": "a"}, {"_name": "b", "x": {"_type": "randint", "_value": [0, 5]}}]},
    })
    rng = np.random.default_rng(0)
    origin = space.origin()
    assert origin == {("u",): 0.0, ("c",): 0}
    moved = [space.apply_move(origin, a, rng) for a in space.moves]
    reached = [m for m in moved if m is not None]
    assert {("u",): 1.0, ("c",): 0} in reached  # a step of a tenth of the width up; down leaves the range
    switched = [m for m in reached if m[("c",)] == 1]
    assert len(switched) == 1 and 0 <= switched[0][("c", 1, "x")] < 5 and space.contains(switched[0])
    assert all(space.contains(m) for m in reached)
    back = space.apply_move(switched[0], (("c",), 0), rng)
    assert back == {("u",): 0.0, ("c",): 0}  # the sub-parameter leaves with its option
    features = Features(space)  # the peers' encoding: zeros where a parameter is inactive
    assert features(back).tolist() == [0.0, 1.0, 0.0] and features(switched[0])[1] == 2.0


def test_diagonal_neighbours_double_one_size_and_halve_another():
    """One whole-number ``discrete`` size doubled and another halved, where both sets hold the new
    values: the product of the two stays (a 4 x 2 tile steps to 2 x 4 and 8 x 1). Zero,
    fractions, a missing double or half, and other parameter types take no part; past
    ``limit`` the steps are drawn at random, distinct."""
    from nni_opevo.space.search_space import SearchSpace

    space = SearchSpace({"tx": {"_type": "discrete", "_value": [1, 2, 3, 4, 8]},
                         "ty": {"_type": "discrete", "_value": [1, 2, 3, 4]},
                         "unroll": {"_type": "discrete", "_value": [0, 125, 256]},
                         "block": {"_type": "discrete", "_value": [48, 64, 80]},
                         "rate": {"_type": "discrete", "_value": [0.25, 0.5, 1.0]},
                         "vec": {"_type": "choice", "_value": [1, 2, 4]}})
    config = space.from_trial({"tx": 4, "ty": 2, "unroll": 0, "block": 64, "rate": 1.0, "vec": 2})
    steps = [space.to_trial(c) for c in space.neighbours(config, kind="diagonal", rng=np.random.default_rng(0), limit=100)]
    assert sorted((s["tx"], s["ty"]) for s in steps) == [(2, 4), (8, 1)]
    assert all((s["unroll"], s["block"], s["rate"], s["vec"]) == (0, 64, 1.0, 2) for s in steps)
    grid = SearchSpace({f"s{i}": {"_type": "discrete", "_value": [1, 2, 4]} for i in range(10)})
    middle = grid.from_trial({f"s{i}": 2 for i in range(10)})
    assert len(list(grid.neighbours(middle, kind="diagonal", rng=np.random.default_rng(0), limit=1000))) == 90
    for limit in (20, 50):  # drawn among all pairs, and among the listed ones
        drawn = list(grid.neighbours(middle, kind="diagonal", rng=np.random.default_rng(0), limit=limit))
        assert len({grid.identity(c) for c in drawn}) == limit
        assert all(sorted(grid.to_trial(c).values()) == [1] + [2] * 8 + [4] for c in drawn)
