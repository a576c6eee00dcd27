"""The screening surrogate of OpEvo's default variant: relevances learnt per atom, expected
improvement, bounded memory on wide rows, the atoms of a discrete set, and the feasibility model
that learns the failures apart."""
from __future__ import annotations

import numpy as np
import pytest

from nni_opevo.opevo import gaussian_process
from nni_opevo.opevo.atoms import encoder, powers_of_two
from nni_opevo.opevo.feasibility import Feasibility
from nni_opevo.opevo.gaussian_process import RELEVANCE_LIMIT, per_atom, weighted_distance
from nni_opevo.opevo.screened import improvement_that_runs, uncertainty_that_runs
from nni_opevo.opevo.surrogate import Surrogate
from nni_opevo.space.parameters import DiscreteParameter


def knob_landscape(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of one decisive categorical knob (atom 0: value 2 is ten times faster) and three
    knobs that change nothing, with 2 % timing noise."""
    rng = np.random.default_rng(seed)
    atoms = rng.integers(0, 4, size=(n, 4)).astype(float)
    fitness = np.where(atoms[:, 0] == 2, 10.0, 1.0) * rng.lognormal(0.0, 0.02, n)
    return atoms, fitness, np.zeros(4, dtype=bool)


def test_the_decisive_knob_gets_the_largest_relevance():
    atoms, fitness, ordinal = knob_landscape(40, seed=0)
    model = Surrogate(128, ordinal)
    model.fit(atoms, fitness)
    relevance = model.relevance
    assert relevance is not None and relevance[0] > 3 * relevance[1:].max()


def test_expected_improvement_prefers_the_decisive_value():
    atoms, fitness, ordinal = knob_landscape(40, seed=1)
    seen = {tuple(row) for row in atoms}
    unseen = [np.array(c, dtype=float) for c in np.ndindex(4, 4, 4, 4) if c not in seen]
    model = Surrogate(128, ordinal)
    model.fit(atoms, fitness)
    gains = model.expected_improvement(np.stack(unseen))
    assert unseen[int(np.argmax(gains))][0] == 2


def test_fewer_than_two_successes_leave_the_model_unfitted():
    model = Surrogate(128, np.zeros(2, dtype=bool))
    model.fit(np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]), np.array([0.0, 3.0, 0.0]))
    assert not model.ready and model.relevance is None


def test_wide_rows_keep_one_length_and_bounded_blocks(monkeypatch):
    """Past RELEVANCE_LIMIT atoms the model keeps a single length (no capacity^2 x atoms tensor),
    and distances are summed over blocks of atoms, giving what one big tensor would."""
    rng = np.random.default_rng(2)
    width = RELEVANCE_LIMIT + 36
    ordinal = rng.random(width) < 0.5
    atoms = np.where(ordinal, rng.random((30, width)), rng.integers(0, 3, (30, width)).astype(float))
    atoms[:5, :10] = np.nan  # inactive atoms
    weights = rng.random(width)
    monkeypatch.setattr(gaussian_process, "CHUNK", 30 * 30 * 7)  # blocks of 7 atoms
    assert np.allclose(weighted_distance(atoms, atoms, ordinal, weights), per_atom(atoms, atoms, ordinal) @ weights)
    model = Surrogate(128, ordinal)
    model.fit(atoms, rng.lognormal(0.0, 1.0, 30))
    assert model.ready and np.allclose(model.relevance, model.relevance[0])
    assert model.expected_improvement(atoms[:3]).shape == (3,)


def test_a_discrete_set_is_one_category_and_one_log_scaled_position():
    sizes = DiscreteParameter("block", [128, 16, 64, 32])
    assert encoder(sizes).ordinal == (False, True)
    assert np.allclose([encoder(sizes).encode(k) for k in range(4)], [(0, 0.0), (1, 1 / 3), (2, 2 / 3), (3, 1.0)])
    signed = DiscreteParameter("offset", [-2, 0, 5])
    assert [encoder(signed).encode(k)[1] for k in range(3)] == pytest.approx([0.0, 0.5, 1.0])  # by rank
    assert encoder(DiscreteParameter("one", [7])).encode(0) == (0.0, 0.0)


def test_a_set_mixing_powers_of_two_with_other_sizes_also_says_which_is_which():
    blocks = DiscreteParameter("block", [16, 32, 48, 64, 80])
    assert encoder(blocks).ordinal == (False, True, False)
    assert [encoder(blocks).encode(k)[2] for k in range(5)] == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert encoder(blocks).encode(2)[:2] == (2.0, pytest.approx(np.log2(3) / np.log2(5)))
    # Nothing to tell apart, or not sizes: the two atoms only.
    for values in ([16, 32, 64], [3, 5, 6], [0, 125, 256], [0.5, 1, 3], [7]):
        assert encoder(DiscreteParameter("other", values)).ordinal == (False, True)


def test_the_power_of_two_atom_carries_a_slow_size_to_the_unseen_ones():
    """Block widths 16-256 in steps of 16 where every width that is not a power of two runs
    ten times slower (the shape of the MI250X convolution's block_size_x), measured at some
    widths only: the surrogate expects an unmeasured power of two to beat an unmeasured other
    width, and fits the atom a relevance above the index's."""
    blocks = DiscreteParameter("block", list(range(16, 257, 16)))
    measured = [0, 1, 2, 4, 5, 8, 10]  # 16, 32, 48, 80, 96, 144, 176
    rng = np.random.default_rng(0)
    atoms = np.array([encoder(blocks).encode(k) for k in measured for _ in range(3)])
    fitness = np.array([10.0 if powers_of_two(blocks.values)[k] else 1.0 for k in measured for _ in range(3)])
    model = Surrogate(128, np.array(encoder(blocks).ordinal))
    model.fit(atoms, fitness * rng.lognormal(0.0, 0.02, len(fitness)))
    unseen = np.array([encoder(blocks).encode(k) for k in (3, 6, 7, 11)])  # 64, 112, 128, 192
    mean, _ = model.predict(unseen)
    assert min(mean[0], mean[2]) > max(mean[1], mean[3])
    assert model.relevance is not None and model.relevance[2] > model.relevance[0]


def failing_landscape(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Atom 0 decides the speed (ten times faster at 2), atom 1 whether the kernel runs (it fails
    at 3, as a block past a launch limit does); atoms 2-3 change nothing."""
    atoms, fitness, ordinal = knob_landscape(n, seed)
    return atoms, np.where(atoms[:, 1] == 3, 0.0, fitness), ordinal


def test_the_feasibility_model_learns_where_kernels_fail_from_the_knob_that_decides_it():
    atoms, fitness, ordinal = failing_landscape(40, seed=3)
    model = Feasibility(128, ordinal)
    model.fit(atoms, fitness)
    assert model.ready and model.relevance[1] > 3 * np.delete(model.relevance, 1).max()
    unseen = np.array([[2.0, knob, 0.5, 0.5] for knob in range(4)])  # a value no row has in atoms 2-3
    chance = model.probability(unseen)
    assert chance[3] < 0.1 and chance[:3].min() > 0.9, chance


def test_with_nothing_to_tell_apart_every_chance_is_one():
    atoms, fitness, ordinal = knob_landscape(20, seed=4)
    for labels in (fitness, np.zeros_like(fitness)):  # every kernel ran; none did
        model = Feasibility(128, ordinal)
        model.fit(atoms, labels)
        assert not model.ready and np.array_equal(model.probability(atoms[:5]), np.ones(5))


def test_the_speed_model_learns_from_the_kernels_that_ran_only():
    """Failures are the feasibility model's: the speed model fitted with them predicts what it
    predicts without them, so a failed kernel does not drag its running neighbours down."""
    atoms, fitness, ordinal = failing_landscape(40, seed=5)
    ran = fitness > 0
    with_failures, without = Surrogate(128, ordinal), Surrogate(128, ordinal)
    with_failures.fit(atoms, fitness)
    without.fit(atoms[ran], fitness[ran])
    probe = np.array([[2.0, knob, 0.0, 0.0] for knob in range(4)])
    assert np.allclose(with_failures.predict(probe)[0], without.predict(probe)[0])


def test_screening_weighs_by_the_chance_of_running_and_local_steps_skip_the_likely_failures():
    atoms, fitness, ordinal = failing_landscape(40, seed=6)
    speed, feasibility = Surrogate(128, ordinal), Feasibility(128, ordinal)
    speed.fit(atoms, fitness)
    feasibility.fit(atoms, fitness)
    fails, runs = np.array([[2.0, 3.0, 0.5, 0.5]]), np.array([[2.0, 1.0, 0.5, 0.5]])
    both = np.concatenate([fails, runs])
    gains = improvement_that_runs(speed, feasibility, both)
    assert gains[0] < 0.1 * speed.expected_improvement(fails)[0] and gains[1] > gains[0]
    assert uncertainty_that_runs(speed, feasibility, both)[0] == -np.inf
    assert np.isfinite(uncertainty_that_runs(speed, feasibility, fails)).all()  # none likely: all are steps
