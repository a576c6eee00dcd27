"""OpEvoTuner: Algorithm 1 of Gao et al., "OpEvo: An Evolutionary Method for Tensor Operator
Optimization" (AAAI 2021), as a steady-state NNI 3.0 tuner.

Mapping from the paper to NNI's calls:

* Lines 1-2: the first lambda proposals are uniform random configurations.
* Lines 4-5: afterwards every proposal is a child of the current top-lambda evaluated
  configurations: per parameter, a parent drawn with probability proportional to fitness
  (eq. 2), then the q-random walk (eq. 3). ``offspring_size`` (rho) children are bred from one
  selection of parents; the selection is refreshed after every rho children, and sooner while
  fewer than lambda results exist and new ones arrived. With trialConcurrency = rho this is the
  paper's generation, minus its barrier: NNI asks for a configuration whenever a worker frees
  up, and always gets one at once, so no worker idles waiting for a generation to finish.
* Until some evaluated configuration has positive fitness there is nothing to inherit (sec.
  4.2: zero-fitness traits are never inherited), so proposals stay uniform random.
* No configuration is proposed twice (sec. 4.4): a child that is evaluated or in flight is
  mutated again, up to ``REMUTATIONS`` times; if it still lands on sampled configurations its
  neighbourhood is saturated, and it becomes the nearest unseen configuration in the topology
  (breadth-first, ``SEARCH_EXPANSIONS`` at most); failing that, a random draw, and for spaces of
  at most ``ENUMERATION_LIMIT`` configurations an unseen one found by listing. When none is
  left the tuner raises NoMoreTrialError and NNI ends the experiment.
* Line 6 / fitness: see ``fitness`` for how reported values, failures and minimize mode map
  to weights.
"""
from __future__ import annotations

import json
import logging
import math
from typing import Any

import numpy as np
from nni import ClassArgsValidator, NoMoreTrialError
from nni.tuner import Tuner

from . import class_args, fatal
from .fitness import Fitness
from .operators import breed, nearest_unseen
from .population import Population
from .search_space import Config, SearchSpace

_logger = logging.getLogger(__name__)

REMUTATIONS = 64
SEARCH_EXPANSIONS = 500
RANDOM_DRAWS = 256
ENUMERATION_LIMIT = 200_000


def _validate(kwargs: dict[str, Any]) -> dict[str, Any]:
    class_args.reject_unknown({"optimize_mode", "parents_size", "offspring_size", "mutate_rate", "seed"}, kwargs)
    return {
        "optimize_mode": class_args.optimize_mode(kwargs.get("optimize_mode", "maximize")),
        "parents_size": class_args.positive_int("parents_size", kwargs.get("parents_size", 8)),
        "offspring_size": class_args.positive_int("offspring_size", kwargs.get("offspring_size", 8)),
        "mutate_rate": class_args.open_unit("mutate_rate", kwargs.get("mutate_rate", 0.5)),
        "seed": class_args.seed(kwargs.get("seed")),
    }


class OpEvoClassArgsValidator(ClassArgsValidator):
    """Validates OpEvo's classArgs for ``nnictl`` (named in the registration meta)."""

    def validate_class_args(self, **kwargs: Any) -> None:
        _validate(kwargs)


class OpEvoTuner(Tuner):
    """OpEvo for NNI.

    Parameters
    ----------
    optimize_mode
        'maximize' (default; e.g. TFLOPS) or 'minimize' (e.g. latency).
    parents_size
        lambda, the number of top configurations recombined (paper default 8).
    offspring_size
        rho, the children bred from one selection of parents (paper default 8).
    mutate_rate
        q in (0, 1): the probability of each further step of the q-random walk (paper default 0.5).
        Near 0 children stay close to their parents; near 1 they wander far.
    seed
        Seeds every random choice; the same seed and the same results give the same proposals.
        When omitted a seed is drawn and logged.
    """

    def __init__(
        self,
        optimize_mode: str = "maximize",
        parents_size: int = 8,
        offspring_size: int = 8,
        mutate_rate: float = 0.5,
        seed: int | None = None,
    ) -> None:
        args = _validate(
            dict(
                optimize_mode=optimize_mode,
                parents_size=parents_size,
                offspring_size=offspring_size,
                mutate_rate=mutate_rate,
                seed=seed,
            )
        )
        self.optimize_mode = args["optimize_mode"]
        self.parents_size = args["parents_size"]
        self.offspring_size = args["offspring_size"]
        self.mutate_rate = args["mutate_rate"]
        self.seed = args["seed"] if args["seed"] is not None else int(np.random.default_rng().integers(2**31))
        _logger.info("OpEvo seed %d", self.seed)
        self.rng = np.random.default_rng(self.seed)
        self.space: SearchSpace | None = None
        self.population: Population | None = None
        self._parents: list[tuple[Config, float]] = []
        self._parents_version = -1
        self._brood_left = 0
        self._proposed = 0  # proposals and imported results: the first lambda are the random initial population
        self._accept_customized_trials()

    # ------------------------------------------------------------------ NNI interface

    def update_search_space(self, search_space: dict[str, Any]) -> None:
        """Validate the space (ValueError naming the parameter) and keep the history that fits it."""
        try:
            space = SearchSpace(search_space)
        except ValueError as e:
            fatal.fail(e)
            raise
        old, self.space = self.population, space
        self.population = Population(space, Fitness(self.optimize_mode))
        self._brood_left = 0
        if old is None:
            return
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

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        space, population = self._require_space()
        if len(population) >= space.size:
            raise NoMoreTrialError("every configuration of the search space has been proposed")
        config = self._unique(self._candidate())
        population.propose(parameter_id, config)
        self._proposed += 1
        return space.to_trial(config)

    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        _, population = self._require_space()
        if population.report(parameter_id, value):
            return
        # Unknown id (a customized trial, or ids NNI mixed up): learn from the parameters it ran.
        config = self._convert(parameters)
        if config is not None:
            population.add(config, value)

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        if self.population is not None:
            self.population.end(parameter_id)

    def import_data(self, data: Any) -> None:
        """Rebuild the population from earlier trials (``nnictl resume`` / ``experiment import``)."""
        _, population = self._require_space()
        if isinstance(data, str):
            data = json.loads(data)
        imported = 0
        for entry in data:
            if isinstance(entry, str):
                entry = json.loads(entry)
            config = self._convert(entry.get("parameter")) if isinstance(entry, dict) else None
            if config is None:
                continue
            population.add(config, entry.get("value"))
            imported += 1
        self._proposed += imported
        _logger.info("imported %d of %d earlier trials", imported, len(data))

    # ------------------------------------------------------------------ evolution

    def _require_space(self) -> tuple[SearchSpace, Population]:
        if self.space is None or self.population is None:
            raise RuntimeError("OpEvoTuner: update_search_space must be called before any other call")
        return self.space, self.population

    def _convert(self, parameters: Any) -> Config | None:
        assert self.space is not None
        try:
            return self.space.from_trial(parameters)
        except ValueError as e:
            _logger.warning("ignoring parameters outside the search space (%s): %r", e, parameters)
            return None

    def _select_parents(self) -> list[tuple[Config, float]]:
        population = self.population
        assert population is not None
        stale = self._brood_left <= 0 or (
            len(self._parents) < self.parents_size and population.version != self._parents_version
        )
        if stale:
            self._parents = population.parents(self.parents_size)
            self._parents_version = population.version
            self._brood_left = self.offspring_size
        return self._parents

    def _candidate(self) -> Config:
        assert self.space is not None
        if self._proposed < self.parents_size:
            return self.space.sample(self.rng)
        parents = self._select_parents()
        if not any(w > 0 for _, w in parents):
            return self.space.sample(self.rng)
        self._brood_left -= 1
        return breed(self.space, parents, self.mutate_rate, self.rng)

    def _unique(self, config: Config) -> Config:
        space, population = self._require_space()
        child = config
        for _ in range(REMUTATIONS):
            if not population.seen(space.identity(config)):
                return config
            config = breed(space, [(config, 1.0)], self.mutate_rate, self.rng)
        if not population.seen(space.identity(config)):
            return config
        near = nearest_unseen(space, child, lambda c: population.seen(space.identity(c)), self.rng, SEARCH_EXPANSIONS)
        if near is not None:
            return near
        for _ in range(RANDOM_DRAWS):
            config = space.sample(self.rng)
            if not population.seen(space.identity(config)):
                return config
        if space.size <= ENUMERATION_LIMIT:
            unseen = [c for c in space.enumerate() if not population.seen(space.identity(c))]
            if unseen:
                return unseen[int(self.rng.integers(len(unseen)))]
            raise NoMoreTrialError("every configuration of the search space has been proposed")
        _logger.warning(
            "no unseen configuration in %d mutations and %d random draws of a space of %s; ending",
            REMUTATIONS,
            RANDOM_DRAWS,
            "infinite size" if math.isinf(space.size) else f"{space.size:.3g} configurations",
        )
        raise NoMoreTrialError("no unseen configuration could be found")
