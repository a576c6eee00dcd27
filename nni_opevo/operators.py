"""OpEvo's variation operators: recombination (paper eq. 2) and the q-random walk (eq. 3).

Both work parameter by parameter on the flat keyed configurations of ``search_space``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .parameters import Parameter, Value
from .search_space import Config, SearchSpace


def q_random_walk(param: Parameter, start: Value, q: float, rng: np.random.Generator) -> Value:
    """Walk from ``start``: at every step, with probability q move to a uniformly chosen
    neighbour (eq. 3), else stop. The stopping point follows S = (1-q)(I-Q)^-1 p0 (appendix A).
    An isolated value (a set of one) stays put."""
    value = start
    while rng.random() < q:
        nxt = param.random_neighbour(value, rng)
        if nxt is None:
            break
        value = nxt
    return value


def breed(
    space: SearchSpace,
    parents: Sequence[tuple[Config, float]],
    q: float,
    rng: np.random.Generator,
) -> Config:
    """One child: each parameter inherited from a parent drawn with probability proportional
    to its weight (eq. 2), then mutated by the q-random walk.

    Parameters are visited parents-first, so a nested choice is settled (inherited and
    mutated) before its sub-parameters; a sub-parameter is inherited only from parents that
    chose the same option, and drawn from its prior when none did. If every eligible parent
    weighs 0, they are drawn uniformly (the limit of eq. 2).

    With a single parent of weight 1 this is plain mutation: every parameter walked again.
    """
    child: Config = {}
    for slot in space.slots:
        if not slot.active_in(child):
            continue
        eligible = [(config[slot.key], w) for config, w in parents if slot.key in config]
        if not eligible:
            value = slot.param.sample(rng)
        else:
            cumulative = np.cumsum([w for _, w in eligible])
            if cumulative[-1] > 0:
                i = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
            else:
                i = int(rng.integers(len(eligible)))
            value = eligible[min(i, len(eligible) - 1)][0]
        child[slot.key] = q_random_walk(slot.param, value, q, rng)
    return child


def nearest_usable(
    space: SearchSpace,
    start: Config,
    usable: Callable[[Config], bool],
    rng: np.random.Generator,
    max_expansions: int,
) -> Config | None:
    """A usable configuration (unseen, and feasible where there is a constraint) at the smallest
    topology distance from ``start``, drawn uniformly among those at that distance
    (breadth-first, at most ``max_expansions`` configurations expanded); None when none is
    found within the bound.

    This is where repeated re-mutation of a child ends up once the walk keeps landing on
    sampled configurations: the first unseen ring around it.
    """
    visited = {space.identity(start)}
    frontier = [start]
    expansions = 0
    while frontier and expansions < max_expansions:
        ring: list[Config] = []
        found: list[Config] = []
        for config in frontier:
            expansions += 1
            for nb in space.neighbours(config):
                key = space.identity(nb)
                if key in visited:
                    continue
                visited.add(key)
                (found if usable(nb) else ring).append(nb)
            if expansions >= max_expansions:
                break
        if found:
            return found[int(rng.integers(len(found)))]
        frontier = ring
    return None


REDRAWS = 32


def redraw(param: Parameter, value: Value, rng: np.random.Generator) -> Value:
    """A value drawn from the parameter's prior other than ``value`` (uniform mutation, and the
    random walk of AutoTVM's annealing); ``value`` itself when no other comes up in ``REDRAWS``
    draws (a set of one, or a prior concentrated on it)."""
    for _ in range(REDRAWS):
        other = param.sample(rng)
        if other != value:
            return other
    return value


def redraw_one(space: SearchSpace, config: Config, rng: np.random.Generator) -> Config:
    """``config`` with one active parameter, chosen uniformly, redrawn (AutoTVM's random walk
    step: one knob to another random value)."""
    keys = [slot.key for slot in space.active_slots(config)]
    key = keys[int(rng.integers(len(keys)))]
    return space.complete({**config, key: redraw(space.by_key[key].param, config[key], rng)}, rng)
