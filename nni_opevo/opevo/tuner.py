"""OpEvoTuner: OpEvo (Gao et al., "OpEvo: An Evolutionary Method for Tensor Operator
Optimization", AAAI 2021) as a steady-state NNI 3.0 tuner, in two variants.

``variant: paper`` is Algorithm 1 as published, mapped to NNI's calls:

* Lines 1-2: the first lambda proposals are uniform random configurations.
* Lines 4-5: afterwards every proposal is a child of the current top-lambda evaluated
  configurations: per parameter, a parent drawn with probability proportional to fitness
  (eq. 2), then the q-random walk (eq. 3) over the parameter's topology. ``offspring_size``
  (rho) children are bred from one selection of parents, a ``Generation``; the next selection
  is made after rho children, and sooner while the selection is incomplete (see
  ``Generation.due``). With trialConcurrency = rho this is the paper's generation, minus its
  barrier: NNI asks for a configuration whenever a worker frees up, and always gets one at
  once, so no worker idles waiting for a generation.
* Until some evaluated configuration has positive fitness there is nothing to inherit (sec.
  4.2: zero-fitness traits are never inherited), so proposals stay uniform random.
* Line 6 / fitness: see ``fitness`` for how reported values, failures and minimize mode map
  to weights.

``variant: screened`` (the default) keeps the paper's operators and departs from it in the
ways below, each measured in docs/tuners.md on brute-forced tuning spaces:

* **Screening by expected improvement.** For every proposal it breeds ``screen`` children of the
  current parents (eq. 2 and the q-random walk; a share ``explore`` of them uniform random
  instead), adds the neighbours of the epoch's best configuration (``_ring``), keeps those that
  are unseen and feasible, and proposes the one a Gaussian-process surrogate (``surrogate``)
  expects to improve most on the best so far. Budgets are small, and a child is a guess: the
  surrogate learns from every measurement which guesses pay, and the best's neighbours make
  sure no single step from it is left to chance.
* **Sizes step by doubling too.** The walk over a ``discrete`` set of numbers may also step to
  the value's double or half (``operators.scaled_step``): tile and block sizes act
  multiplicatively, and a value between two good ones (a 3-wide tile between 2 and 4, a
  48-wide block between 32 and 64) can be far worse than both.
* **Restarts.** After ``restart`` measurements without improving the best of the current
  ``Epoch``, a new epoch starts: lambda new random configurations and parents drawn only from
  the new epoch's measurements, while the surrogate keeps learning from all of them. An
  evolutionary search converges on one basin; a good kernel is often in another.
* **Local steps.** A share ``local`` of the proposals (every other one at 0.5) is the unmeasured
  neighbour of the epoch's best that the surrogate is least sure of (``_local_step``), whatever
  it expects of it. A surrogate fitted on a few dozen kernels learns main effects ("shared
  memory off is slow", "a 3-wide tile is awful, so 4 is too"), while kernels interact: the
  best kernel of a space is often one such step from a plateau the surrogate keeps refining,
  and expected improvement then never proposes that step. The steps include diagonal ones,
  one size doubled and another halved (the ``diagonal`` neighbourhood of ``SearchSpace.neighbours``): the hardware's
  limits bind on products of sizes (threads per block, a tile's area), so fast kernels lie
  along ridges that no step in one size can follow.
* **Kin.** Inside a network (the network tuner with ``transfer``), the surrogate also learns
  from the other layers of the same template (``learn_from``), screens half of the random
  start with what they measured (a layer's ten or twenty trials need not start blind, and the
  other half keeps the family exploring), and screens the kin's best kernels beside its own
  children (``_migrants``), so what one layer found is tried on the others.

In both variants no configuration is proposed twice (sec. 4.4): a child that is evaluated or
in flight is mutated again, up to ``REMUTATIONS`` times, then ``base`` finds the nearest
unseen one. The NNI plumbing (history, failures, unknown ids, resume, no repeats, the
constraint hook) is ``base``'s.
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import PopulationTuner
from ..class_args import SearchArgs, arg, one_of, open_unit, positive_int, unit
from ..fitness import Fitness
from ..population import Population
from ..space.search_space import Config, ConfigKey
from ..space.steps import nudge
from .atoms import Atoms
from .operators import Parents, Step, breed, scaled_step, topology_step
from .surrogate import Surrogate, TrainingSet

_logger = logging.getLogger(__name__)

REMUTATIONS = 64
SCREEN_ATTEMPTS = 4
"""Candidates bred per wanted unseen feasible one when screening, before settling for fewer."""
RING_FACTOR = 4
"""The best configuration's neighbours are all screened when there are at most this many times ``screen``."""
SURROGATE_CAPACITY = 128
"""Measurements the surrogate trains on at most (the best half and the most recent half)."""


def non_negative_int(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"classArg '{name}' must be an integer >= 0, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class OpEvoArgs(SearchArgs):
    parents_size: int = arg(8, positive_int, "lambda, the top configurations recombined (paper: 8)")
    offspring_size: int = arg(8, positive_int, "rho, the children bred from one selection of parents (paper: 8; "
                                               "the paper variant)")
    mutate_rate: float = arg(0.5, open_unit, "q of the q-random walk: the probability of each further step "
                                             "(paper: 0.5); near 0 children stay close to their parents")
    variant: str = arg("screened", one_of("screened", "paper"), "'screened': children screened by a surrogate's "
                       "expected improvement, sizes stepping by doubling too, restarts (see docs/tuners.md); "
                       "'paper': Algorithm 1 exactly as published")
    screen: int = arg(32, positive_int, "children bred per proposal and ranked by the surrogate, beside the "
                                        "epoch best's neighbours (screened)")
    explore: float = arg(0.1, unit, "share of the screened candidates drawn uniformly at random instead of bred "
                                    "(screened)")
    restart: int = arg(25, non_negative_int, "measurements without improving the current epoch's best before a "
                                             "restart (screened; 0: never)")
    local: float = arg(0.5, unit, "share of the proposals (screened, past each random start) that measure an "
                                  "unmeasured neighbour of the epoch's best, the one the surrogate is least sure "
                                  "of, instead of its expected improvement's pick (0: none)")
    migrants: int = arg(2, non_negative_int, "inside a network with transfer: each kin layer's best kernels, carried "
                                             "into this layer's space, screened beside its children (0: none)")



@dataclass
class Generation:
    """One selection of parents (Algorithm 1, line 4) and the children still to breed from it
    (line 5): the paper variant's steady state."""

    parents: list[tuple[Config, float]]
    """The top-lambda evaluated configurations with their eq. 2 weights."""
    version: int
    """``Population.version`` when they were selected."""
    children_left: int
    """Children still to breed from these parents: rho at selection."""

    @property
    def fertile(self) -> bool:
        """Some parent has traits to inherit (sec. 4.2: zero-fitness traits never are)."""
        return any(w > 0 for _, w in self.parents)

    def due(self, population: Population, parents_size: int) -> bool:
        """Whether to select again: after rho children; and, while the selection is incomplete
        (fewer than lambda parents, or none fertile), at every new result, so that a first
        success is bred from at once."""
        complete = len(self.parents) >= parents_size and self.fertile
        return self.children_left <= 0 or (not complete and population.version != self.version)


@dataclass
class Epoch:
    """The screened variant's stretch of search since its last restart."""

    start: int
    """Index, in measurement order, of the epoch's first measurement."""
    opened_at: int = 0
    """``n_proposed`` (trials proposed so far) when the epoch opened: its first lambda trials are
    random. Trials, not calls of ``_propose``: a candidate the constraint refuses is no trial, and
    counting it would end the random start after its first feasible draw (on a space where four
    in five configurations are restricted, the "random" population was one configuration and
    its neighbours)."""
    best: float = -np.inf
    best_at: int = 0
    """The best score measured in this epoch, and the measurement count when it was found."""

    def stale(self, measured: int, restart: int) -> bool:
        """``restart`` measurements in a row that did not improve this epoch's best."""
        return restart > 0 and measured - max(self.best_at, self.start) >= restart


class OpEvoTuner(PopulationTuner):
    """OpEvo for NNI (Gao et al. 2021; see the module docstring)."""

    algorithm = "OpEvo"
    Args = OpEvoArgs
    args: OpEvoArgs

    def __init__(self, **class_args: Any) -> None:
        super().__init__(**class_args)
        self.generation: Generation | None = None
        self.epoch = Epoch(start=0)
        self.epochs = 1
        self.surrogate: Surrogate | None = None
        self.atoms: Atoms | None = None
        """How the surrogate sees this tuner's configurations (set with the search space)."""
        self.measured = TrainingSet()
        self.kin: list[OpEvoTuner] = []
        self.projected: dict[tuple[int, ConfigKey], Config | None] = {}
        """Kin's kernels carried into this space (``_migrants``), by (kin's place in ``kin``, its key)."""
        self.step: Step = scaled_step if self.args.variant == "screened" else topology_step

    def kinship(self) -> Hashable | None:
        """The meaning of this tuner's atoms: kin see configurations alike (``atoms``)."""
        return self.atoms.meaning if self.atoms is not None else None

    def learn_from(self, kin: list[PopulationTuner]) -> None:
        """The screened variant's surrogate also trains on ``kin``'s measurements (``_training``)
        and with them screens half of the random start (``_start``) and their best kernels
        (``_migrants``)."""
        self.kin = [k for k in kin if isinstance(k, OpEvoTuner) and k is not self]
        self.projected = {}
        if self.space is not None:
            self.surrogate = Surrogate(SURROGATE_CAPACITY, self._ordinal())

    def _ordinal(self) -> np.ndarray:
        """The surrogate's atom kinds: the space's, and with kin one categorical atom more, the
        tuner a measurement belongs to (``_training``)."""
        assert self.atoms is not None
        return np.append(self.atoms.ordinal, False) if self.kin else self.atoms.ordinal

    def _atoms(self, config: Config) -> np.ndarray:
        """``config`` as the surrogate sees it: its atoms, and with kin this tuner's own code."""
        assert self.atoms is not None
        atoms = self.atoms(config)
        return np.append(atoms, float(len(self.kin))) if self.kin else atoms

    # ------------------------------------------------------------------ base hooks

    def _rebuild(self) -> None:
        space, population = self.require_space()
        self.atoms = Atoms(space)
        self.generation, self.epoch, self.epochs = None, Epoch(start=0), 1
        self.measured, self.projected = TrainingSet(), {}
        self.surrogate = Surrogate(SURROGATE_CAPACITY, self._ordinal())
        for key, record in population.records.items():
            if record.evaluated and not record.rejected:
                self._observe(key)

    def _observe(self, key: ConfigKey) -> None:
        space, population = self.require_space()
        record = population.records[key]
        if record.rejected:
            return  # refusals cost no trial: the surrogate learns from measurements only
        assert self.atoms is not None
        self.measured.put(key, self.atoms(record.config), record.objective)
        score = population.fitness.score(record.objective)
        if score > self.epoch.best and self.measured.index(key) >= self.epoch.start:
            self.epoch.best, self.epoch.best_at = score, len(self.measured)

    def _propose(self) -> Config:
        if self.args.variant == "paper":
            return self._paper()
        return self._screened()

    def _variations(self, config: Config) -> Iterator[Config]:
        space, _ = self.require_space()
        for _ in range(REMUTATIONS):
            config = breed(space, [(config, 1.0)], self.args.mutate_rate, self.rng, self.step)
            yield config

    # ------------------------------------------------------------------ the paper's Algorithm 1

    def _paper(self) -> Config:
        space, population = self.require_space()
        if self.n_proposed < self.args.parents_size:  # line 2: the random initial population
            return space.sample(self.rng)
        if self.generation is None or self.generation.due(population, self.args.parents_size):
            self.generation = Generation(population.parents(self.args.parents_size), population.version,
                                         self.args.offspring_size)
        if not self.generation.fertile:
            return space.sample(self.rng)
        self.generation.children_left -= 1
        return breed(space, self.generation.parents, self.args.mutate_rate, self.rng)

    # ------------------------------------------------------------------ the screened variant

    def _screened(self) -> Config:
        space, population = self.require_space()
        if self.epoch.stale(len(self.measured), self.args.restart):
            self.epoch = Epoch(start=len(self.measured), opened_at=self.n_proposed)
            self.epochs += 1
            _logger.info("OpEvo: no better kernel in %d measurements; restart %d from new random configurations",
                         self.args.restart, self.epochs - 1)
        if self.in_random_start():  # each epoch's random initial population
            return self._start()
        parents = self._epoch_parents()
        if not any(w > 0 for _, w in parents):
            return space.sample(self.rng)
        if self._local_turn():
            step = self._local_step(parents[0][0])
            if step is not None:
                return step
        prepared = Parents(space, parents)
        bred = self.fresh(self._candidates(prepared), self.args.screen, learn=False)
        others = [*self._ring(parents[0][0]), *self._migrants()]
        candidates = bred + self.fresh(others, learn=False, besides=bred)
        if not candidates:
            return breed(space, prepared, self.args.mutate_rate, self.rng, self.step)
        return self._most_promising(candidates)

    def _start(self) -> Config:
        """A member of the random start: a uniform draw; with kin that have measured (a network's
        other layers of this template), every other member (the first, third, ...) is instead
        the most promising of ``screen`` uniform draws by a surrogate that has learned from
        theirs, so a layer starts where its kin's kernels ran well instead of blind. Only every
        other: a screened draw goes where the kin have been, and a family of layers whose starts
        were all screened stopped exploring (on AlexNet's convolutions, the fast kernels, one
        output row per step with a thin channel tile, were never measured in 4 of 6 seeds;
        docs/tuners.md)."""
        space, _ = self.require_space()
        uniform = self._start_position() % 2 == 1
        if uniform or not any(len(k.measured) for k in self.kin):
            return space.sample(self.rng)
        draws = (space.sample(self.rng) for _ in range(SCREEN_ATTEMPTS * self.args.screen))
        candidates = self.fresh(draws, self.args.screen, learn=False)
        return self._most_promising(candidates) if candidates else space.sample(self.rng)

    def _most_promising(self, candidates: list[Config],
                        by: Callable[[Surrogate, np.ndarray], np.ndarray] = Surrogate.expected_improvement) -> Config:
        """The candidate of the highest score ``by`` (expected improvement) under the surrogate
        refitted now (the first one while it cannot be fitted)."""
        if len(candidates) < 2:
            return candidates[0]
        assert self.surrogate is not None
        self.surrogate.fit(*self._training())
        if not self.surrogate.ready:
            return candidates[0]
        scores = by(self.surrogate, np.stack([self._atoms(c) for c in candidates]))
        return candidates[int(np.argmax(scores))]

    def _training(self) -> tuple[np.ndarray, np.ndarray]:
        """(atoms, eq. 2 weights) the surrogate fits. Alone: this tuner's measurements. With kin:
        theirs too, each row ending in a code of the tuner it belongs to (categorical, so the
        surrogate's fitted relevance of that atom says how far measurements carry from one
        layer to another), and all weighed on one scale of the pooled objectives: a layer's
        scores scaled to its own best would, after its first two or three trials, call a poor
        kernel its best. TFLOPS, what the trials report, compare across layers of one template;
        this tuner's own rows come last, the most recent, which the surrogate keeps first."""
        _, population = self.require_space()
        if not self.kin:
            return self.measured.arrays(population.fitness)
        members = [(code, t) for code, t in enumerate((*self.kin, self)) if len(t.measured)]
        if not members:
            return np.zeros((0, len(self._ordinal()))), np.zeros(0)
        pooled = Fitness(population.fitness.mode)
        values = np.concatenate([t.measured.objectives for _, t in members])
        if np.isfinite(values).any():
            pooled.observe(float(np.nanmin(values)))
            pooled.observe(float(np.nanmax(values)))
        parts = [(code, *t.measured.arrays(pooled)) for code, t in members]
        rows = [np.column_stack([atoms, np.full(len(atoms), float(code))]) for code, atoms, _ in parts]
        return np.concatenate(rows), np.concatenate([weights for _, _, weights in parts])

    def _start_position(self) -> int:
        """The next trial's place among the current epoch's trials (0 for its first)."""
        return self.n_proposed - self.epoch.opened_at

    def in_random_start(self) -> bool:
        """Whether the next trial belongs to the current epoch's lambda random ones."""
        return self._start_position() < self.args.parents_size

    def _ring(self, best: Config) -> list[Config]:
        """The epoch's best configuration's neighbours (one scaled step in one parameter), all of
        them up to ``RING_FACTOR * screen``; past that (a choice of many options), ``screen``
        single steps drawn at random."""
        space, _ = self.require_space()
        limit = RING_FACTOR * self.args.screen
        ring = list(itertools.islice(space.neighbours(best, kind="scaled"), limit + 1))
        if len(ring) <= limit:
            return ring
        return [nudge(space, best, self.rng, self.step) for _ in range(self.args.screen)]

    def _local_turn(self) -> bool:
        """Whether the next proposal is a local step: paced evenly, ``local`` of every proposal
        (at 0.5 the odd-numbered ones)."""
        share, n = self.args.local, self.n_proposed
        return int((n + 1) * share) > int(n * share)

    def _local_step(self, best: Config) -> Config | None:
        """The unmeasured, feasible neighbour of the epoch's best (``_ring``, and its diagonal
        neighbours: the ``diagonal`` neighbourhood of ``SearchSpace.neighbours``) of the largest posterior standard
        deviation; None when every one is measured or in flight. Not the
        expected improvement, whose ranking is what leaves such steps unmeasured: the step the
        surrogate knows least about is the one that teaches it most (and when a knob it has
        found relevant flips, the one farthest from what it has seen). A step drawn uniformly
        instead did better on one brute-forced space and worse on two (docs/tuners.md)."""
        space, _ = self.require_space()
        diagonals = space.neighbours(best, kind="diagonal", rng=self.rng, limit=RING_FACTOR * self.args.screen)
        ring = self.fresh([*self._ring(best), *diagonals], learn=False)
        return self._most_promising(ring, by=lambda model, atoms: model.predict(atoms)[1]) if ring else None

    def _migrants(self) -> list[Config]:
        """The ``migrants`` best measured kernels of each kin, carried into this space
        (``Atoms.project``). A layer past its random start breeds near its own parents, so
        a kernel that one layer of a template found would reach the others only by chance;
        screened beside their children, it is tried where the surrogate, which has learned from
        both layers, expects it to pay (the island model's migration; docs/tuners.md has the
        evidence)."""
        assert self.atoms is not None
        out = []
        for place, kin in enumerate(self.kin):
            if kin.atoms is None or kin.population is None:
                continue
            for key in itertools.islice(kin.population.evaluated(), self.args.migrants):
                if kin.population.weight(key) <= 0:
                    break
                if (place, key) not in self.projected:
                    self.projected[place, key] = self.atoms.project(kin.population.records[key].config, kin.atoms)
                migrant = self.projected[place, key]
                if migrant is not None:
                    out.append(migrant)
        return out

    def _epoch_parents(self) -> list[tuple[Config, float]]:
        """The top-lambda measurements of the current epoch with their eq. 2 weights."""
        _, population = self.require_space()
        mine = self.measured.keys_since(self.epoch.start)
        ranked = (key for key in population.evaluated() if key in mine)
        top = [key for _, key in zip(range(self.args.parents_size), ranked)]
        return [(population.records[key].config, population.weight(key)) for key in top]

    def _candidates(self, parents: Parents) -> Iterator[Config]:
        space, _ = self.require_space()
        for _ in range(SCREEN_ATTEMPTS * self.args.screen):
            if self.rng.random() < self.args.explore:
                yield space.sample(self.rng)
            else:
                yield breed(space, parents, self.args.mutate_rate, self.rng, self.step)
