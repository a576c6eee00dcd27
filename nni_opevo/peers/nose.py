"""NoSE (Gatopoulos et al., "Non-parametric Surrogate model for Evolutionary optimizer
Tuner", sec. III.B): a genetic algorithm whose offspring are screened by a weighted k-NN
surrogate, so that only the elite among them is measured.

* P_0: the first N proposals are uniform random (N = 100).
* A generation: M = 1.5N parent pairs drawn by roulette wheel on measured fitness from the
  population P (the N best measured so far: adding the elite and dropping the worst back to N
  keeps exactly the N best); each pair gives one child by single-point crossover over the
  parameters in space order, then uniform mutation (each parameter redrawn from its prior with
  probability p = 0.3). Children already sampled are dropped.
* The k-NN surrogate (``knn``: k = 9, Canberra distance) predicts every child's fitness; the E =
  0.3N best, the elite, are proposed for measurement, and only they. Each measurement joins
  the surrogate's knowledge base.

A new generation is bred when the last elite has been proposed, from the population as
measured by then; NNI's workers never wait for a generation's results.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base import PopulationTuner
from ..class_args import SearchArgs, arg, int_in, real_in, unit
from ..scores import best_first
from ..space.search_space import Config, ConfigKey
from ..space.steps import redraw
from .knn import KnnSurrogate

BREED_ATTEMPTS = 4
"""Children bred per wanted child at most, to find M unsampled ones late in a search."""


@dataclass(frozen=True)
class NoSEArgs(SearchArgs):
    population_size: int = arg(100, int_in(1, 10_000), "N (paper: 100); also the number of random initial configurations")
    offspring_ratio: float = arg(1.5, real_in(0, 100), "M/N, children bred per generation (paper: 1.5)")
    elite_ratio: float = arg(0.3, real_in(0, 100), "E/N, children measured per generation, the elite among the M "
                                                 "(paper: 0.3; below offspring_ratio)")
    mutate_rate: float = arg(0.3, unit, "p, the probability that a child's parameter is redrawn at random (paper: 0.3)")
    k: int = arg(9, int_in(1, 1000), "neighbours of the k-NN surrogate (paper: 9)")

    def check(self) -> None:
        if self.elite_ratio >= self.offspring_ratio:
            raise ValueError(f"classArg 'elite_ratio' must be below offspring_ratio ({self.offspring_ratio}): "
                             f"the elite E is chosen among the M offspring, got {self.elite_ratio}")



@dataclass
class Generation:
    """One generation's unsampled offspring, their predicted fitness and the elite chosen."""

    offspring: list[Config] = field(default_factory=list)
    predicted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    elite: list[Config] = field(default_factory=list)


class NoSETuner(PopulationTuner):
    """NoSE for NNI (see the module docstring)."""

    algorithm = "NoSE"
    Args = NoSEArgs
    args: NoSEArgs

    def __init__(self, **class_args: Any) -> None:
        super().__init__(**class_args)
        size = self.args.population_size
        self.n_offspring = max(1, round(self.args.offspring_ratio * size))
        self.n_elite = max(1, min(self.n_offspring, round(self.args.elite_ratio * size)))
        self.surrogate: KnnSurrogate | None = None
        self.generation = Generation()
        self._queue: list[Config] = []

    def _rebuild(self) -> None:
        _, population = self.require_space()
        self.surrogate = KnnSurrogate(population, self.args.k)
        self._queue = []

    def _observe(self, key: ConfigKey) -> None:
        assert self.surrogate is not None
        self.surrogate.observe(key)

    def _propose(self) -> Config:
        space, population = self.require_space()
        if self.n_proposed < self.args.population_size or population.n_evaluated == 0:
            return space.sample(self.rng)
        if not self._queue:
            self.generation = self._breed()
            self._queue = list(self.generation.elite)
        return self._queue.pop(0) if self._queue else space.sample(self.rng)

    def _breed(self) -> Generation:
        space, population = self.require_space()
        assert self.surrogate is not None
        members = [population.records[k].config for k in list(population.evaluated())[: self.args.population_size]]
        weights = np.array([population.weight(space.identity(c)) for c in members])
        p = weights / weights.sum() if weights.sum() > 0 else np.full(len(members), 1 / len(members))

        def children():
            for _ in range(BREED_ATTEMPTS * self.n_offspring):
                i, j = self.rng.choice(len(members), size=2, p=p)  # roulette wheel, with replacement
                yield self._mutate(self._crossover(members[int(i)], members[int(j)]))

        offspring = self.fresh(children(), self.n_offspring)
        predicted = self.surrogate.predict(offspring)
        order = best_first(predicted)[: self.n_elite]
        return Generation(offspring, predicted, [offspring[int(i)] for i in order])

    def _crossover(self, a: Config, b: Config) -> Config:
        """Single-point crossover over the parameters in space order: a's before the point, b's from it."""
        space, _ = self.require_space()
        point = int(self.rng.integers(1, len(space.slots))) if len(space.slots) > 1 else 0
        child = {s.key: a[s.key] for s in space.slots[:point] if s.key in a}
        child.update({s.key: b[s.key] for s in space.slots[point:] if s.key in b})
        return space.complete(child, self.rng)

    def _mutate(self, config: Config) -> Config:
        """Uniform mutation: each parameter redrawn from its prior with probability p."""
        space, _ = self.require_space()
        out = dict(config)
        for slot in space.slots:
            if slot.key in out and self.rng.random() < self.args.mutate_rate:
                out[slot.key] = redraw(slot.param, out[slot.key], self.rng)
                out = space.complete(out, self.rng)
        return out
