"""Steps every tuner may take in a search space: a random neighbour of one parameter (``nudge``),
a prior redraw of one value (``redraw``, ``redraw_one``: uniform mutation, AutoTVM's walk), and the
nearest configuration still usable (``nearest_usable``: where a proposal that was already seen
goes)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .parameters import Parameter, Value
from .search_space import Config, SearchSpace

Step = Callable[[Parameter, Value, np.random.Generator], "Value | None"]
"""One step of a walk: a neighbour of the value, or None for an isolated value."""


def topology_step(param: Parameter, value: Value, rng: np.random.Generator) -> Value | None:
    """A neighbour drawn uniformly from the parameter's topology (paper, sec. 3)."""
    return param.random_neighbour(value, rng)


def nudge(space: SearchSpace, config: Config, rng: np.random.Generator, step: Step = topology_step) -> Config:
    """``config`` with one active parameter, chosen uniformly, moved one ``step`` (unchanged
    when that parameter's value is isolated); a nested choice's new option draws the
    sub-parameters it enables."""
    slots = list(space.active_slots(config))
    slot = slots[int(rng.integers(len(slots)))]
    value = step(slot.param, config[slot.key], rng)
    return config if value is None else space.complete({**config, slot.key: value}, rng)


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
