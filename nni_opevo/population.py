"""What a tuner knows about its trials: which configurations are evaluated or in flight,
their objectives, and the ranking that parent selection reads.

Bookkeeping is keyed by NNI parameter id but never trusts it blindly: NNI 3.0 may report a
mismatched id in ``trial_end`` (microsoft/nni#5726), so an end without a result only marks a
failure provisionally, and a result that arrives later, for any id, overrides it. Unknown
and repeated ids are ignored. Every operation is O(log n) or a short memmove, so a tuner stays
fast with tens of thousands of results.
"""
from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .fitness import Fitness, objective
from .space.search_space import Config, ConfigKey, SearchSpace

_logger = logging.getLogger(__name__)


@dataclass
class Record:
    config: Config
    objective: float | None = None  # None: failed, or not reported yet
    evaluated: bool = False
    rank_entry: tuple[float, int, ConfigKey] | None = None
    rejected: bool = False  # refused by the constraint: a failure that was never a trial


class Population:
    """Evaluated and in-flight configurations of one search space."""

    def __init__(self, space: SearchSpace, fitness: Fitness) -> None:
        self.space = space
        self.fitness = fitness
        self.records: dict[ConfigKey, Record] = {}  # every configuration proposed or imported
        self.ids: dict[int, ConfigKey] = {}  # parameter id -> configuration, kept after the trial ends
        self.in_flight: set[int] = set()
        self._ranked: list[tuple[float, int, ConfigKey]] = []  # (-score, arrival, key): best first
        self._arrivals = 0
        self.version = 0  # bumped whenever the ranking changes
        self.n_rejected = 0

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        """Configurations evaluated or in flight (never to be proposed again)."""
        return len(self.records)

    def seen(self, key: ConfigKey) -> bool:
        return key in self.records

    @property
    def n_evaluated(self) -> int:
        """Configurations with a verdict: measured, failed, or refused by the constraint."""
        return len(self._ranked)

    @property
    def n_measured(self) -> int:
        """Configurations whose trial ended (the evaluated ones the constraint did not refuse)."""
        return len(self._ranked) - self.n_rejected

    def parents(self, k: int) -> list[tuple[Config, float]]:
        """The top-k evaluated configurations with their eq. 2 weights."""
        return [(self.records[key].config, self.weight(key)) for _, _, key in self._ranked[:k]]

    def in_flight_configs(self) -> list[Config]:
        """The configurations of the trials in flight, oldest first (by parameter id, which NNI
        hands out in proposal order)."""
        return [self.records[self.ids[pid]].config for pid in sorted(self.in_flight)]

    def best(self) -> tuple[Config, float | None] | None:
        if not self._ranked:
            return None
        record = self.records[self._ranked[0][2]]
        return record.config, record.objective

    # ------------------------------------------------------------------ updates

    def propose(self, parameter_id: int, config: Config) -> None:
        key = self.space.identity(config)
        self.records.setdefault(key, Record(config))
        self.ids[parameter_id] = key
        self.in_flight.add(parameter_id)

    def report(self, parameter_id: int, value: Any) -> ConfigKey | None:
        """Record a trial's final result; returns its configuration, None when the id is unknown."""
        key = self.ids.get(parameter_id)
        if key is None:
            return None
        self.in_flight.discard(parameter_id)
        self._evaluate(key, objective(value))
        return key

    def end(self, parameter_id: int) -> ConfigKey | None:
        """A trial ended: if it has no result yet it counts as a failure until one arrives.
        Returns the configuration when it was just marked failed."""
        if parameter_id not in self.in_flight:
            _logger.debug("trial_end for parameter id %s that is not in flight: ignored", parameter_id)
            return None
        self.in_flight.discard(parameter_id)
        key = self.ids[parameter_id]
        if self.records[key].evaluated:
            return None
        self._evaluate(key, None)
        return key

    def reject(self, config: Config) -> ConfigKey:
        """A configuration the constraint refused: a failure that no trial ran."""
        key = self.space.identity(config)
        record = self.records.setdefault(key, Record(config))
        if not record.rejected:
            record.rejected = True
            self.n_rejected += 1
            self._evaluate(key, None)
        return key

    def add(self, config: Config, value: Any) -> ConfigKey:
        """An evaluated configuration from outside the tuner (import_data, customized trials)."""
        key = self.space.identity(config)
        self.records.setdefault(key, Record(config))
        self._evaluate(key, objective(value))
        return key

    def evaluated(self) -> Iterator[ConfigKey]:
        """Evaluated configurations, best first."""
        return (key for _, _, key in self._ranked)

    def weight(self, key: ConfigKey) -> float:
        """The eq. 2 weight of an evaluated configuration (0 for a failure): every tuner's
        non-negative, higher-is-better fitness."""
        return self.fitness.weight(self.records[key].objective)

    def _evaluate(self, key: ConfigKey, v: float | None) -> None:
        record = self.records[key]
        if record.rank_entry is not None:
            i = bisect.bisect_left(self._ranked, record.rank_entry)
            del self._ranked[i]
        self.fitness.observe(v)
        record.objective, record.evaluated = v, True
        self._arrivals += 1
        record.rank_entry = (-self.fitness.score(v), self._arrivals, key)
        bisect.insort(self._ranked, record.rank_entry)
        self.version += 1
