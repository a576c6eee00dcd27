"""What every tuner of this package shares: the NNI 3.0 tuner interface over one search space
and one population, written once.

A subclass says only how it proposes (``_propose``) and, if it learns, what it does with a
new result (``_observe``) or a rebuilt history (``_rebuild``). This class does the rest, the
same way for every algorithm, so that comparisons between them measure the algorithms:

* the search space is parsed by ``search_space`` (a bad one ends the experiment with the
  parameter named, see ``fatal``); a space update keeps the history that fits it;
* no configuration is proposed twice: a proposal that is evaluated or in flight goes through
  the subclass's own re-variations (``_variations``), then the nearest unseen configuration in
  the topology, then random draws, then, for small spaces, listing; when nothing is left the
  tuner raises NoMoreTrialError and NNI ends the experiment;
* the constraint hook (``constraint``): a proposal the constraint refuses is recorded as a
  failed configuration that no trial ran (``Population.reject``), the algorithm learns from it
  as from a failure (``_observe``) and is asked for another proposal; every fallback above
  proposes only configurations the constraint accepts, so the tuner ends with NoMoreTrialError
  once every feasible configuration is used. How many candidates the constraint refused is
  logged. A constraint that raises ends the experiment with its error (``fatal``);
* results are read by ``fitness`` (a number or ``{"default": ...}``; anything else, or a trial
  that ends without a result, is a failure) and ``population`` tolerates unknown, repeated and
  mismatched parameter ids (microsoft/nni#5726) and customized trials;
* ``optimize_mode`` and ``seed`` mean the same everywhere; ``import_data`` rebuilds the history
  for ``nnictl resume`` and ``experiment import``, and the proposal ``journal`` (in the
  experiment's checkpoint folder) keeps a configuration whose trial a stop cancelled from
  being proposed again after the resume.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
from abc import abstractmethod
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, ClassVar, TypeVar

import numpy as np
from nni import NoMoreTrialError
from nni.tuner import Tuner

from . import constraint, fatal
from .class_args import ConstraintArgs, SearchArgs, document, seed_or_drawn
from .fitness import Fitness
from .journal import Journal
from .population import Population
from .space.search_space import Config, ConfigKey, SearchSpace
from .space.steps import nearest_usable

_logger = logging.getLogger(__name__)

A = TypeVar("A", bound=ConstraintArgs)

SEARCH_EXPANSIONS = 500
RANDOM_DRAWS = 256
ENUMERATION_LIMIT = 200_000
PROPOSALS_PER_TRIAL = 100
"""Proposals the algorithm may make for one trial while the constraint refuses them, before the
fallbacks (random feasible draws, listing) take over."""
EXHAUSTED = "every configuration of the search space has been proposed or refused by the constraint"
"""NoMoreTrialError's message, however the exhaustion was found (NNI then ends the experiment)."""
REPORT_EVERY = 64
"""Trials between two log lines counting the constraint's refusals (after the 1st, 2nd, 4th ... 64th)."""


class PopulationTuner(Tuner):
    """Base of the package's tuners (see the module docstring)."""

    algorithm = "tuner"  # for log lines
    Args: ClassVar[type[SearchArgs]] = SearchArgs
    """The tuner's classArgs declaration (``class_args``): the constructor takes exactly these."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Args" in cls.__dict__:
            document(cls, cls.Args)

    def __init__(self, **class_args: Any) -> None:
        self.args, self.constraint = fatal.parse_or_defer(self, lambda: parse_class_args(self.Args, class_args),
                                                          lambda: (self.Args.parse({}), None))
        self.optimize_mode = self.args.optimize_mode
        self.seed = seed_or_drawn(self.args.seed)
        _logger.info("%s seed %d", self.algorithm, self.seed)
        self.rng = np.random.default_rng(self.seed)
        self.space: SearchSpace | None = None
        self.population: Population | None = None
        self.n_proposed = 0  # proposals and imported results
        self.importing = False  # True while import_data observes its records (``_imported``)
        self.journal = Journal(self.get_checkpoint_path())
        self._resumed: list[dict[str, Any]] = []  # journalled proposals of the run before a resume
        self._accept_customized_trials()

    # ------------------------------------------------------------------ what subclasses give

    @abstractmethod
    def _propose(self) -> Config:
        """The algorithm's next configuration; may be one already seen (``_unique`` fixes that)."""

    def _variations(self, config: Config) -> Iterator[Config]:
        """Algorithm-specific alternatives to a proposal that was already seen, tried in order."""
        return iter(())

    def _observe(self, key: ConfigKey) -> None:
        """A configuration of the population was just evaluated (or re-evaluated)."""

    def _imported(self) -> None:
        """Called once after ``import_data`` added its records (``importing`` was True while each
        was observed): a tuner whose model is costly to fit fits it here, once, not per record."""

    def _rebuild(self) -> None:
        """The population was replaced (new search space): rebuild the algorithm's state from it."""

    def kinship(self) -> Hashable | None:
        """What this tuner's measurements stand for, where a model of its can pool them with other
        tuners' of the same kinship (a network's layers of one template; ``learn_from``); None for
        a tuner that tunes alone."""
        return None

    def learn_from(self, kin: list[PopulationTuner]) -> None:
        """Tuners of the same ``kinship`` whose measurements this one may learn from as they
        arrive (their populations, ``population``, and whatever their ``kinship`` exposes)."""

    # ------------------------------------------------------------------ NNI interface

    @fatal.guard
    def update_search_space(self, search_space: dict[str, Any]) -> None:
        """Validate the space (ValueError naming the parameter) and keep the history that fits it."""
        space = SearchSpace(search_space)
        self._check_space(space)
        old, self.space = self.population, space
        self.population = Population(space, Fitness(self.optimize_mode))
        if old is not None:
            for pid, key in old.ids.items():
                record = old.records[key]
                config = self._convert(old.space.to_trial(record.config))
                if config is None:
                    continue
                if pid in old.in_flight:
                    self.population.propose(pid, config)
                elif record.evaluated:
                    self.population.add(config, {"default": record.objective})
            _logger.info("search space updated; %d configurations of the history fit it", len(self.population))
        self._rebuild()
        if self._resumed:
            self._replay_journal()

    def load_checkpoint(self) -> None:
        """NNI calls this when the experiment is resumed: read the proposal journal back."""
        proposals = self.journal.read()
        _logger.info("resume: %d proposals in the journal %s", len(proposals), self.journal.path)
        self.resume(proposals)

    def resume(self, proposals: list[dict[str, Any]]) -> None:
        """Proposals (trial parameters) handed out before a resume: each counts as a failure
        until a result for it is imported, so none is proposed again. Marked at once, or when
        the search space arrives."""
        self._resumed = list(proposals)
        if self.space is not None:
            self._replay_journal()

    def embed(self) -> None:
        """This tuner runs inside another that journals the proposals (the network tuner): it
        keeps no journal of its own."""
        self.journal = Journal(None)

    def _replay_journal(self) -> None:
        """Every journalled configuration counts as a failure until a result for it is imported:
        a trial the stop cancelled is never proposed again."""
        _, population = self.require_space()
        marked = 0
        for parameters in self._resumed:
            config = self._convert(parameters)
            if config is not None and not self.seen(config):
                self._observe(population.add(config, None))
                marked += 1
        self.n_proposed += marked
        _logger.info("resume: %d journalled configurations had no result yet and are not proposed again", marked)
        self._resumed = []

    def _check_space(self, space: SearchSpace) -> None:
        """Reject a space this algorithm cannot search (via ``fatal``), naming the parameter."""

    @fatal.guard
    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        space, population = self.require_space()
        try:
            with self.constraint.proposing() if self.constraint is not None else contextlib.nullcontext():
                config = self._next()
        except NoMoreTrialError:
            self._report_constraint(final=True)
            raise
        population.propose(parameter_id, config)
        self.n_proposed += 1
        params = space.to_trial(config)
        self.journal.append(parameter_id, params)
        n = self.n_proposed
        if n % REPORT_EVERY == 0 or (n < REPORT_EVERY and n & (n - 1) == 0):
            self._report_constraint()
        return params

    def _next(self) -> Config:
        """The algorithm's next proposal that is unseen and feasible (see the module docstring)."""
        space, population = self.require_space()
        for _ in range(PROPOSALS_PER_TRIAL):
            if len(population) >= space.size:
                raise NoMoreTrialError(EXHAUSTED)
            config = self._propose()
            if not self.seen(config):
                if self.feasible(config):
                    return config
                continue  # refused: learnt as a failure; the algorithm proposes again
            return self._unique(config) or self._fallback()
        return self._fallback()

    def _report_constraint(self, final: bool = False) -> None:
        if self.constraint is not None and (self.constraint.rejected or final):
            _logger.info("%s: the constraint refused %d of %d candidates (%d trials proposed)%s", self.algorithm,
                         self.constraint.rejected, self.constraint.calls, self.n_proposed,
                         "; no feasible configuration is left" if final else "")

    @fatal.guard
    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        _, population = self.require_space()
        key = population.report(parameter_id, value)
        if key is None:
            # Unknown id (a customized trial, or ids NNI mixed up): learn from the parameters it ran.
            config = self._convert(parameters)
            if config is None:
                return
            key = population.add(config, value)
        self._observe(key)

    @fatal.guard
    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        if self.population is not None:
            key = self.population.end(parameter_id)
            if key is not None:
                self._observe(key)

    @fatal.guard
    def import_data(self, data: Any) -> None:
        """Rebuild the history from earlier trials (``nnictl resume`` / ``experiment import``).
        A record that is not JSON, not ``{"parameter": ..., "value": ...}``, or off the space
        is skipped and counted; it never aborts the import."""
        _, population = self.require_space()
        records, skipped = parse_records(data)
        imported = 0
        self.importing = True
        try:
            for entry in records:
                config = self._convert(entry.get("parameter"))
                if config is None:
                    skipped += 1
                    continue
                self._observe(population.add(config, entry.get("value")))
                imported += 1
        finally:
            self.importing = False
        self._imported()
        self.n_proposed += imported
        _logger.info("imported %d earlier trials; skipped %d malformed or off-space records", imported, skipped)

    # ------------------------------------------------------------------ shared helpers

    def require_space(self) -> tuple[SearchSpace, Population]:
        if self.space is None or self.population is None:
            raise RuntimeError(f"{type(self).__name__}: update_search_space must be called before any other call")
        return self.space, self.population

    def seen(self, config: Config) -> bool:
        """Evaluated, in flight, or refused by the constraint."""
        space, population = self.require_space()
        return population.seen(space.identity(config))

    def feasible(self, config: Config, learn: bool = True) -> bool:
        """Whether the constraint accepts ``config`` (always, without one), asked of an unseen
        configuration. A refused one is recorded as a failure and observed by the algorithm,
        unless ``learn`` is False (a model screening many candidates only asks)."""
        if self.constraint is None:
            return True
        space, population = self.require_space()
        if self.constraint(space.to_trial(config)):
            return True
        if learn:
            self._observe(population.reject(config))
        return False

    def usable(self, config: Config, learn: bool = True) -> bool:
        """Unseen and feasible: a configuration that may be proposed (``learn``: see ``feasible``)."""
        return not self.seen(config) and self.feasible(config, learn)

    def _convert(self, parameters: Any) -> Config | None:
        assert self.space is not None
        try:
            return self.space.from_trial(parameters)
        except ValueError as e:
            _logger.warning("ignoring parameters outside the search space (%s): %r", e, parameters)
            return None

    def _unique(self, config: Config) -> Config | None:
        """A usable alternative to ``config``, which was already seen: the algorithm's own
        variations, then the nearest usable configuration in the topology; None when neither
        finds one."""
        space, _ = self.require_space()
        for variant in self._variations(config):
            if self.usable(variant):
                return variant
        return nearest_usable(space, config, self.usable, self.rng, SEARCH_EXPANSIONS)

    def _fallback(self) -> Config:
        """A usable configuration when the algorithm found none: a random draw, or, in a space
        small enough to list, any left; NoMoreTrialError when none is."""
        space, _ = self.require_space()
        for _ in range(RANDOM_DRAWS):
            candidate = space.sample(self.rng)
            if self.usable(candidate):
                return candidate
        if space.size <= ENUMERATION_LIMIT:
            left = [c for c in space.enumerate() if self.usable(c)]
            if left:
                return left[int(self.rng.integers(len(left)))]
            raise NoMoreTrialError(EXHAUSTED)
        _logger.warning(
            "no usable configuration near the proposal nor in %d random draws of a space of %s; ending",
            RANDOM_DRAWS,
            "infinite size" if math.isinf(space.size) else f"{space.size:.3g} configurations",
        )
        raise NoMoreTrialError("no unseen feasible configuration could be found")

    def fresh(self, proposals: Iterable[Config], limit: int | None = None, learn: bool = True,
              besides: Iterable[Config] = ()) -> list[Config]:
        """Up to ``limit`` (None: every one) distinct usable configurations from ``proposals``,
        in order, other than those ``besides`` (``learn``: whether refused ones are recorded,
        see ``feasible``)."""
        space, _ = self.require_space()
        listed = {space.identity(config) for config in besides}
        out: dict[ConfigKey, Config] = {}
        for config in proposals:
            key = space.identity(config)
            if key not in out and key not in listed and self.usable(config, learn):
                out[key] = config
                if len(out) == limit:
                    break
        return list(out.values())


def parse_class_args(declaration: type[A], class_args: dict[str, Any]) -> tuple[A, constraint.Constraint | None]:
    """The classArgs checked against their declaration, and the constraint they name loaded;
    ValueError naming the bad one."""
    args = declaration.parse(class_args)
    return args, constraint.load(args.constraint, args.constraint_args)


def parse_records(data: Any) -> tuple[list[dict[str, Any]], int]:
    """``import_data``'s records as dicts, and how many could not be read (not JSON, not an object)."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError:
            return [], 1
    if not isinstance(data, list):
        return [], 1
    records, skipped = [], 0
    for entry in data:
        if isinstance(entry, str):
            try:
                entry = json.loads(entry)
            except json.JSONDecodeError:
                skipped += 1
                continue
        if isinstance(entry, dict) and "parameter" in entry:
            records.append(entry)
        else:
            skipped += 1
    return records, skipped
