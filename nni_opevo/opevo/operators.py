"""OpEvo's variation operators: recombination (paper eq. 2) and the q-random walk (eq. 3).

Both work parameter by parameter on the flat keyed configurations of ``search_space``. The
walk steps to a uniformly drawn neighbour of the parameter's topology (paper, sec. 3);
``scaled_step`` is the step of OpEvo's default variant, which for a ``discrete`` set of numbers
may also double or halve the value (``space.neighbourhoods.scaled``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..space import neighbourhoods
from ..space.parameters import DiscreteParameter, Parameter, Value
from ..space.search_space import Config, SearchSpace, Slot
from ..space.steps import Step, topology_step


def scaled_step(param: Parameter, value: Value, rng: np.random.Generator) -> Value | None:
    """``topology_step``, except that a ``discrete`` value may also step to its double or half
    (uniformly among the values just below and above and those)."""
    if isinstance(param, DiscreteParameter):
        options = neighbourhoods.scaled(param, value)
        return options[int(rng.random() * len(options))] if options else None
    return param.random_neighbour(value, rng)


def q_random_walk(param: Parameter, start: Value, q: float, rng: np.random.Generator,
                  step: Step = topology_step) -> Value:
    """Walk from ``start``: at every step, with probability q move to a uniformly chosen
    neighbour (eq. 3), else stop. The stopping point follows S = (1-q)(I-Q)^-1 p0 (appendix A).
    An isolated value (a set of one) stays put."""
    value = start
    while rng.random() < q:
        nxt = step(param, value, rng)
        if nxt is None:
            break
        value = nxt
    return value


def walk(param: Parameter, start: Value, steps: int, rng: np.random.Generator, step: Step) -> Value:
    """``steps`` steps of the walk from ``start`` (stopping at an isolated value): with ``steps``
    drawn geometrically, P(k) = q^k (1 - q), this is the q-random walk."""
    value = start
    for _ in range(steps):
        nxt = step(param, value, rng)
        if nxt is None:
            break
        value = nxt
    return value


class Parents:
    """One selection of parents with their eq. 2 weights, prepared once for breeding many
    children: the cumulative weights and, per parameter, which parents have it active."""

    def __init__(self, space: SearchSpace, parents: Sequence[tuple[Config, float]]) -> None:
        self.space = space
        self.configs = [config for config, _ in parents]
        weights = np.array([w for _, w in parents], dtype=float)
        # If every parent weighs 0, they are drawn uniformly (the limit of eq. 2).
        self.cumulative = np.cumsum(weights if weights.sum() > 0 else np.ones(len(weights)))
        self.everyone = {slot.key: all(slot.key in c for c in self.configs) for slot in space.slots}
        self.flat = all(slot.condition is None for slot in space.slots)

    def child(self, q: float, rng: np.random.Generator, step: Step) -> Config:
        """Eq. 2 recombination and the q-random walk of every parameter: ``inherit`` with
        ``q_random_walk``, with the draws of a flat space made all at once."""
        if not self.flat:
            return self.inherit(rng, lambda slot, value: q_random_walk(slot.param, value, q, rng, step))
        slots = self.space.slots
        picks = np.minimum(np.searchsorted(self.cumulative, rng.random(len(slots)) * self.cumulative[-1],
                                           side="right"), len(self.configs) - 1)
        steps = rng.geometric(1.0 - q, len(slots)) - 1
        child: Config = {}
        for slot, pick, k in zip(slots, picks.tolist(), steps.tolist()):
            value = self.configs[pick][slot.key]
            child[slot.key] = walk(slot.param, value, k, rng, step) if k else value
        return child

    def draw(self, rng: np.random.Generator) -> int:
        i = int(np.searchsorted(self.cumulative, rng.random() * self.cumulative[-1], side="right"))
        return min(i, len(self.configs) - 1)

    def inherit(self, rng: np.random.Generator, mutate: Callable[[Slot, Value], Value] | None = None) -> Config:
        """Eq. 2 recombination: each active parameter from a parent drawn in proportion to its
        weight, then ``mutate``d at once. Parameters are visited parents-first, so a nested
        choice is settled (inherited and mutated) before its sub-parameters; a sub-parameter is
        inherited only from parents that chose the same option (drawn among them by weight),
        and from its prior when none did."""
        child: Config = {}
        for slot in self.space.slots:
            if not slot.active_in(child):
                continue
            if self.everyone[slot.key]:
                value = self.configs[self.draw(rng)][slot.key]
            else:
                eligible = [i for i, c in enumerate(self.configs) if slot.key in c]
                if not eligible:
                    value = slot.param.sample(rng)
                else:
                    weights = np.diff(self.cumulative, prepend=0.0)[eligible]
                    cumulative = np.cumsum(weights if weights.sum() > 0 else np.ones(len(weights)))
                    j = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
                    value = self.configs[eligible[min(j, len(eligible) - 1)]][slot.key]
            child[slot.key] = value if mutate is None else mutate(slot, value)
        return child


def breed(
    space: SearchSpace,
    parents: Sequence[tuple[Config, float]] | Parents,
    q: float,
    rng: np.random.Generator,
    step: Step = topology_step,
) -> Config:
    """One child of the paper's Algorithm 1: eq. 2 recombination (``Parents.inherit``), then
    every parameter mutated by the q-random walk. With a single parent of weight 1 this is
    plain mutation: every parameter walked again."""
    prepared = parents if isinstance(parents, Parents) else Parents(space, parents)
    return prepared.child(q, rng, step)
