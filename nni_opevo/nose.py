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
from nni import ClassArgsValidator

from . import class_args
from .base import PopulationTuner
from .knn import KnnSurrogate
from .operators import redraw
from .search_space import Config, ConfigKey

BREED_ATTEMPTS = 4
"""Children bred per wanted child at most, to find M unsampled ones late in a search."""


def _validate(kwargs: dict[str, Any]) -> dict[str, Any]:
    class_args.reject_unknown({"optimize_mode", "population_size", "offspring_ratio", "elite_ratio",
                               "mutate_rate", "k", "seed"}, kwargs)
    args = {
        "optimize_mode": class_args.optimize_mode(kwargs.get("optimize_mode", "maximize")),
        "population_size": class_args.positive_int("population_size", kwargs.get("population_size", 100)),
        "offspring_ratio": class_args.positive_real("offspring_ratio", kwargs.get("offspring_ratio", 1.5)),
        "elite_ratio": class_args.positive_real("elite_ratio", kwargs.get("elite_ratio", 0.3)),
        "mutate_rate": class_args.unit("mutate_rate", kwargs.get("mutate_rate", 0.3)),
        "k": class_args.positive_int("k", kwargs.get("k", 9)),
        "seed": class_args.seed(kwargs.get("seed")),
    }
    if args["elite_ratio"] >= args["offspring_ratio"]:
        raise ValueError(f"classArg 'elite_ratio' must be below offspring_ratio ({args['offspring_ratio']}): "
                         f"the elite E is chosen among the M offspring, got {args['elite_ratio']}")
    return args


class NoSEClassArgsValidator(ClassArgsValidator):
    def validate_class_args(self, **kwargs: Any) -> None:
        _validate(kwargs)


@dataclass
class Generation:
    """One generation's unsampled offspring, their predicted fitness and the elite chosen."""

    offspring: list[Config] = field(default_factory=list)
    predicted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    elite: list[Config] = field(default_factory=list)


class NoSETuner(PopulationTuner):
    """NoSE for NNI.

    Parameters
    ----------
    optimize_mode
        'maximize' (default) or 'minimize'.
    population_size
        N (paper: 100); also the number of random initial configurations.
    offspring_ratio, elite_ratio
        M/N (1.5) children per generation, of which E/N (0.3) are measured.
    mutate_rate
        p, the probability that a child's parameter is redrawn at random (0.3).
    k
        Neighbours of the k-NN surrogate (9).
    seed
        Seeds every random choice; drawn and logged when omitted.
    """

    algorithm = "NoSE"

    def __init__(
        self,
        optimize_mode: str = "maximize",
        population_size: int = 100,
        offspring_ratio: float = 1.5,
        elite_ratio: float = 0.3,
        mutate_rate: float = 0.3,
        k: int = 9,
        seed: int | None = None,
    ) -> None:
        args = _validate(dict(optimize_mode=optimize_mode, population_size=population_size,
                              offspring_ratio=offspring_ratio, elite_ratio=elite_ratio,
                              mutate_rate=mutate_rate, k=k, seed=seed))
        super().__init__(args["optimize_mode"], args["seed"])
        self.population_size = args["population_size"]
        self.n_offspring = max(1, round(args["offspring_ratio"] * self.population_size))
        self.n_elite = max(1, min(self.n_offspring, round(args["elite_ratio"] * self.population_size)))
        self.mutate_rate = args["mutate_rate"]
        self.k = args["k"]
        self.surrogate: KnnSurrogate | None = None
        self.generation = Generation()
        self._queue: list[Config] = []

    def _rebuild(self) -> None:
        _, population = self.require_space()
        self.surrogate = KnnSurrogate(population, self.k)
        self._queue = []

    def _observe(self, key: ConfigKey) -> None:
        assert self.surrogate is not None
        self.surrogate.observe(key)

    def _propose(self) -> Config:
        space, population = self.require_space()
        if self.n_proposed < self.population_size or population.n_evaluated == 0:
            return space.sample(self.rng)
        if not self._queue:
            self.generation = self._breed()
            self._queue = list(self.generation.elite)
        return self._queue.pop(0) if self._queue else space.sample(self.rng)

    def _breed(self) -> Generation:
        space, population = self.require_space()
        assert self.surrogate is not None
        members = [population.records[k].config for k in list(population.evaluated())[: self.population_size]]
        weights = np.array([population.weight(space.identity(c)) for c in members])
        p = weights / weights.sum() if weights.sum() > 0 else np.full(len(members), 1 / len(members))

        def children():
            for _ in range(BREED_ATTEMPTS * self.n_offspring):
                i, j = self.rng.choice(len(members), size=2, p=p)  # roulette wheel, with replacement
                yield self._mutate(self._crossover(members[int(i)], members[int(j)]))

        offspring = self.fresh(children(), self.n_offspring)
        predicted = self.surrogate.predict(offspring)
        order = np.argsort(-predicted, kind="stable")[: self.n_elite]
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
            if slot.key in out and self.rng.random() < self.mutate_rate:
                out[slot.key] = redraw(slot.param, out[slot.key], self.rng)
                out = space.complete(out, self.rng)
        return out
