"""OpEvo's default variant: the paper's operators, with the departures below, each measured on
brute-forced tuning spaces (docs/tuners.md; the chosen values: ``settings``).

* **Screening by expected improvement.** For every proposal it breeds ``screen`` children of the
  current parents (eq. 2 and the q-random walk; a share ``explore`` of them uniform random
  instead), adds the neighbours of the epoch's best configuration (``ring``), keeps those that
  are unseen and feasible, and proposes the one a Gaussian-process surrogate (``surrogate``)
  expects to improve most on the best so far. Budgets are small, and a child is a guess: the
  surrogate learns from every measurement which guesses pay, and the best's neighbours make
  sure no single step from it is left to chance.
* **Failures learned apart.** Without a constraint, a configuration that cannot run costs a
  trial. The surrogate learns speed from the kernels that ran, and a second model
  (``feasibility``) whether a configuration runs, with relevances of its own: a candidate's
  expected improvement is weighed by its chance of running (``improvement_that_runs``).
* **Sizes step by doubling too.** The walk over a ``discrete`` set of numbers may also step to
  the value's double or half (``operators.scaled_step``): tile and block sizes act
  multiplicatively, and a value between two good ones (a 3-wide tile between 2 and 4, a
  48-wide block between 32 and 64) can be far worse than both.
* **Restarts.** After ``restart`` measurements without improving the best of the current
  ``Epoch``, a new epoch starts: lambda new random configurations and parents drawn only from
  the new epoch's measurements, while the surrogate keeps learning from all of them. An
  evolutionary search converges on one basin; a good kernel is often in another.
* **Local steps.** A share ``local`` of the proposals (every other one at 0.5) is the unmeasured
  neighbour of the epoch's best that the surrogate is least sure of (``local_step``), whatever
  it expects of it. A surrogate fitted on a few dozen kernels learns main effects ("shared
  memory off is slow", "a 3-wide tile is awful, so 4 is too"), while kernels interact: the
  best kernel of a space is often one such step from a plateau the surrogate keeps refining,
  and expected improvement then never proposes that step (among the steps likely to run,
  ``uncertainty_that_runs``). The steps include diagonal ones,
  one size doubled and another halved (the ``diagonal`` neighbourhood of
  ``SearchSpace.neighbours``): the hardware's limits bind on products of sizes (threads per
  block, a tile's area), so fast kernels lie along ridges that no step in one size can follow.
* **Toward a kernel.** While nothing of the epoch has run (no constraint, and the failures of
  the random start came back before any kernel did), a proposal is a neighbour of the origin
  or of a configuration still in flight rather than a uniform draw (``toward_a_kernel``).
* **Kin.** Inside a network (the network tuner with ``transfer``), the surrogate also learns
  from the other layers of the same template, screens half of the random start with what they
  measured (a layer's ten or twenty trials need not start blind, and the other half keeps the
  family exploring), and screens the kin's best kernels beside its own children (``kin``).
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..base import PopulationTuner
from ..population import Population
from ..scores import first_best
from ..space.search_space import Config, ConfigKey
from ..space.steps import nudge
from . import settings
from .args import OpEvoArgs
from .atoms import Atoms
from .feasibility import Feasibility
from .kin import Kin, Relative
from .operators import Parents, breed, scaled_step
from .surrogate import Surrogate, TrainingSet
from .variant import Variant

_logger = logging.getLogger(__name__)


@dataclass
class Epoch:
    """The stretch of search since the last restart."""

    start: int
    """Index, in measurement order, of the epoch's first measurement."""
    opened_at: int = 0
    """Trials proposed when the epoch opened: its first lambda trials are random. Counted in trials,
    not in candidates, so that a candidate the constraint refuses does not shorten the random start
    (on a space where most configurations are restricted it would shrink to one draw)."""
    best: float = -np.inf
    best_at: int = 0
    """The best score measured in this epoch, and the measurement count when it was found."""

    def stale(self, measured: int, restart: int) -> bool:
        """``restart`` measurements in a row that did not improve this epoch's best."""
        return restart > 0 and measured - max(self.best_at, self.start) >= restart


Acquisition = Callable[[Surrogate, Feasibility, np.ndarray], np.ndarray]
"""A candidate's score from the speed and feasibility models, given the candidates' atom rows."""


def improvement_that_runs(speed: Surrogate, feasibility: Feasibility, rows: np.ndarray) -> np.ndarray:
    """Expected improvement times the chance of running: a failure improves nothing."""
    return speed.expected_improvement(rows) * feasibility.probability(rows)


def uncertainty_that_runs(speed: Surrogate, feasibility: Feasibility, rows: np.ndarray) -> np.ndarray:
    """The speed model's posterior standard deviation among the candidates at least
    ``LIKELY_TO_RUN`` to run (all of them when none is): a local step teaches most where the
    model knows least, but a step it knows little of because nothing there runs teaches nothing.
    A gate, not a weight: weighing by the chance steered the steps off the ridges along the
    hardware's limits, where fast kernels lie (docs/decisions.md)."""
    spread = speed.predict(rows)[1]
    likely = feasibility.probability(rows) >= settings.LIKELY_TO_RUN
    return np.where(likely, spread, -np.inf) if likely.any() else spread


class Screened(Variant):
    """The screened search (see the module docstring)."""

    step = staticmethod(scaled_step)

    def __init__(self, host: PopulationTuner, args: OpEvoArgs) -> None:
        super().__init__(host, args)
        self.epoch = Epoch(start=0)
        self.epochs = 1
        self.atoms: Atoms | None = None
        """How the surrogate sees a configuration (set with the search space)."""
        self.surrogate: Surrogate | None = None
        self.feasibility: Feasibility | None = None
        self.measured = TrainingSet()
        self.kin = Kin()

    @property
    def population(self) -> Population | None:
        return self.host.population

    # ------------------------------------------------------------------ the variant's hooks

    def kinship(self) -> Hashable | None:
        """The meaning of this search's atoms: kin see configurations alike."""
        return self.atoms.meaning if self.atoms is not None else None

    def learn_from(self, kin: Sequence[Variant]) -> None:
        self.kin = Kin([k for k in kin if isinstance(k, Screened)], self.args.migrants)
        if self.atoms is not None:
            self.models()

    def rebuild(self) -> None:
        space, population = self.host.require_space()
        self.atoms = Atoms(space)
        self.epoch, self.epochs = Epoch(start=0), 1
        self.measured = TrainingSet()
        self.kin.reset()
        self.models()
        for key, record in population.records.items():
            if record.evaluated and not record.rejected:
                self.observe(key)

    def observe(self, key: ConfigKey) -> None:
        _, population = self.host.require_space()
        record = population.records[key]
        if record.rejected:
            return  # refusals cost no trial: the surrogate learns from measurements only
        assert self.atoms is not None
        self.measured.put(key, self.atoms(record.config), record.objective)
        score = population.fitness.score(record.objective)
        if score > self.epoch.best and self.measured.index(key) >= self.epoch.start:
            self.epoch.best, self.epoch.best_at = score, len(self.measured)

    def propose(self) -> Config:
        space, _ = self.host.require_space()
        rng = self.host.rng
        if self.epoch.stale(len(self.measured), self.args.restart):
            self.epoch = Epoch(start=len(self.measured), opened_at=self.host.n_proposed)
            self.epochs += 1
            _logger.info("OpEvo: no better kernel in %d measurements; restart %d from new random configurations",
                         self.args.restart, self.epochs - 1)
        if self.in_random_start():  # each epoch's random initial population
            return self.start()
        parents = self.epoch_parents()
        if not any(w > 0 for _, w in parents):
            return self.toward_a_kernel()
        if self.local_turn():
            step = self.local_step(parents[0][0])
            if step is not None:
                return step
        prepared = Parents(space, parents)
        bred = self.host.fresh(self.candidates(prepared), self.args.screen, learn=False)
        assert self.atoms is not None
        others = [*self.ring(parents[0][0]), *self.kin.migrants_into(self.atoms)]
        candidates = bred + self.host.fresh(others, learn=False, besides=bred)
        if not candidates:
            return breed(space, prepared, self.args.mutate_rate, rng, self.step)
        return self.most_promising(candidates)

    # ------------------------------------------------------------------ its parts

    def models(self) -> None:
        """Fresh speed and feasibility models of this search's atoms (with kin, theirs too)."""
        assert self.atoms is not None
        ordinal = self.kin.ordinal(self.atoms.ordinal)
        self.surrogate = Surrogate(settings.SURROGATE_CAPACITY, ordinal)
        self.feasibility = Feasibility(settings.SURROGATE_CAPACITY, ordinal)

    def start(self) -> Config:
        """A member of the random start: a uniform draw; with kin that have measured, every other
        member (the first, third, ...) is instead the most promising of ``screen`` uniform draws
        by the surrogate that has learned from theirs, so a layer starts where its kin's kernels
        ran well instead of blind. Only every other: a screened draw goes where the kin have been,
        and a family of layers whose starts were all screened stopped exploring (on AlexNet's
        convolutions, the fast kernels were never measured in 4 of 6 seeds; docs/tuners.md).

        A search that knows nothing yet (its first trial, no kin measured) measures the space's
        origin first: every parameter's first value, every loop untiled. A space's author lists
        the usual value first, and an untiled loop is the configuration most likely to run, so
        the first trial is the one most likely to return a kernel; without a constraint, where a
        configuration that cannot run costs a trial, that first kernel is what the surrogate and
        the parents start from (docs/decisions.md). Refused by the constraint, it is replaced by
        a usable configuration near it (what the tuner does with any proposal it cannot make)."""
        space, _ = self.host.require_space()
        rng = self.host.rng
        if self.epochs == 1 and self.start_position() == 0 and not self.kin.have_measured():
            return space.origin()
        uniform = self.start_position() % 2 == 1
        if uniform or not self.kin.have_measured():
            return space.sample(rng)
        draws = (space.sample(rng) for _ in range(settings.SCREEN_ATTEMPTS * self.args.screen))
        candidates = self.host.fresh(draws, self.args.screen, learn=False)
        return self.most_promising(candidates) if candidates else space.sample(rng)

    def toward_a_kernel(self) -> Config:
        """A proposal while nothing of the epoch has run: an unmeasured neighbour (``ring``),
        drawn at random, of the first configuration not known to fail that has one: in the first
        epoch the origin, then the configurations in flight, oldest first; with none, a uniform
        draw. Without a constraint most of a tiled space cannot run, and with trials in flight
        the failures come back first (they fail before any kernel is timed): uniform draws
        meanwhile are mostly more failures, each an evaluation spent, while one knob away from
        a configuration that runs, most configurations run (a space's restrictions rule out
        regions, not scattered points). A trial still in flight while later ones failed is
        likely running: the oldest has been out longest (docs/decisions.md)."""
        space, population = self.host.require_space()
        rng = self.host.rng
        sources = [space.origin()] if self.epochs == 1 else []
        sources += population.in_flight_configs()
        for source in sources:
            near = self.host.fresh(self.ring(source), learn=False)
            if near:
                return near[int(rng.integers(len(near)))]
        return space.sample(rng)

    def most_promising(self, candidates: list[Config], by: Acquisition = improvement_that_runs) -> Config:
        """The candidate of the highest score ``by`` (``improvement_that_runs``) under the speed
        and feasibility models refitted now, the first of equal ones (``scores.first_best``); the
        first candidate while the speed model cannot be fitted."""
        if len(candidates) < 2:
            return candidates[0]
        assert self.surrogate is not None and self.feasibility is not None and self.atoms is not None
        training = self.training()
        self.surrogate.fit(*training)
        if not self.surrogate.ready:
            return candidates[0]
        self.feasibility.fit(*training)
        scores = by(self.surrogate, self.feasibility, np.stack([self.kin.row(self.atoms(c)) for c in candidates]))
        return candidates[first_best(scores)]

    def training(self) -> tuple[np.ndarray, np.ndarray]:
        """(atoms, eq. 2 weights) the surrogate fits: this search's measurements, and with kin
        theirs too (``Kin.training``)."""
        _, population = self.host.require_space()
        if not self.kin:
            return self.measured.arrays(population.fitness)
        assert self.atoms is not None
        own: Relative = self
        return self.kin.training(own, population.fitness.mode, len(self.kin.ordinal(self.atoms.ordinal)))

    def start_position(self) -> int:
        """The next trial's place among the current epoch's trials (0 for its first)."""
        return self.host.n_proposed - self.epoch.opened_at

    def in_random_start(self) -> bool:
        """Whether the next trial belongs to the current epoch's lambda random ones."""
        return self.start_position() < self.args.parents_size

    def ring(self, best: Config) -> list[Config]:
        """The epoch best's neighbours (one scaled step in one parameter), all of them up to
        ``RING_FACTOR * screen``; past that (a choice of many options), ``screen`` single steps
        drawn at random."""
        space, _ = self.host.require_space()
        limit = settings.RING_FACTOR * self.args.screen
        ring = list(itertools.islice(space.neighbours(best, kind="scaled"), limit + 1))
        if len(ring) <= limit:
            return ring
        return [nudge(space, best, self.host.rng, self.step) for _ in range(self.args.screen)]

    def local_turn(self) -> bool:
        """Whether the next proposal is a local step: paced evenly, ``local`` of every proposal
        (at 0.5 the odd-numbered ones)."""
        share, n = self.args.local, self.host.n_proposed
        return int((n + 1) * share) > int(n * share)

    def local_step(self, best: Config) -> Config | None:
        """The unmeasured, feasible neighbour of the epoch's best (``ring`` and the diagonal
        neighbourhood) of the largest posterior standard deviation; None when every one is
        measured or in flight. Not the expected improvement, whose ranking is what leaves such
        steps unmeasured: the step the surrogate knows least about is the one that teaches it
        most. A step drawn uniformly instead did better on one brute-forced space and worse on
        two (docs/tuners.md)."""
        space, _ = self.host.require_space()
        limit = settings.RING_FACTOR * self.args.screen
        diagonals = space.neighbours(best, kind="diagonal", rng=self.host.rng, limit=limit)
        ring = self.host.fresh([*self.ring(best), *diagonals], learn=False)
        return self.most_promising(ring, by=uncertainty_that_runs) if ring else None

    def epoch_parents(self) -> list[tuple[Config, float]]:
        """The top-lambda measurements of the current epoch with their eq. 2 weights."""
        _, population = self.host.require_space()
        mine = self.measured.keys_since(self.epoch.start)
        ranked = (key for key in population.evaluated() if key in mine)
        top = [key for _, key in zip(range(self.args.parents_size), ranked)]
        return [(population.records[key].config, population.weight(key)) for key in top]

    def candidates(self, parents: Parents) -> Iterator[Config]:
        space, _ = self.host.require_space()
        rng = self.host.rng
        for _ in range(settings.SCREEN_ATTEMPTS * self.args.screen):
            if rng.random() < self.args.explore:
                yield space.sample(rng)
            else:
                yield breed(space, parents, self.args.mutate_rate, rng, self.step)
