"""Model scores rank alike on every machine (nni_opevo/scores.py): twins, equal up to the last
bits that rounding leaves differently on different CPUs, rank in the candidates' order."""
import numpy as np

from nni_opevo.scores import best_first, comparable, first_best


def test_twins_apart_by_rounding_are_one_score_and_the_first_wins():
    twin = 0.27883990597306340
    scores = np.array([0.1, np.nextafter(twin, 0), 0.2, twin, np.nextafter(twin, 1)])
    assert first_best(scores) == 1
    assert first_best(scores[::-1]) == 0
    assert list(best_first(scores)) == [1, 3, 4, 2, 0]


def test_scores_apart_by_more_than_rounding_keep_their_order():
    scores = np.array([1.0, 1.0 + 1e-6, -np.inf, np.inf, -3.0, 0.0])
    assert list(best_first(scores)) == [3, 1, 0, 5, 4, 2]
    assert first_best(np.array([-np.inf, -np.inf, 0.5 - 1e-7, 0.5])) == 3


def test_rounding_is_relative_and_exact():
    for value in (3e-300, 1.5e-9, 0.7, 6.0e22):
        assert comparable(np.array([value]))[0] == comparable(np.array([value * (1 + 4e-16)]))[0]
        assert abs(comparable(np.array([value]))[0] - value) <= value * 2.0 ** -30
    assert comparable(np.array([0.0, -2.0]))[0] == 0.0
    assert np.isnan(comparable(np.array([np.nan])))[0]
