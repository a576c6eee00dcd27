"""G-BFS, the greedy best-first search of Zhang et al., "Compiler-Level Matrix Multiplication
Optimization for Deep Learning" (2019), as run in the OpEvo paper (appendix B: rho = 5,
starting from the configuration without multi-level tiling).

The search keeps a priority queue of evaluated configurations, best first. It starts from
``SearchSpace.origin`` (every factor (C, 1, ..., 1), every perm the identity). Each step pops
the best configuration not yet expanded and measures rho of its neighbours drawn at random
among those never sampled. The original handles power-of-two MatMul tilings only; here a
neighbour is one move of any parameter's topology (``SearchSpace.moves``: a prime factor
between two tiling levels, a swap of two loops, another choice, the next grid value, a step
of a continuous value), so it runs on every space.

NNI asks for a configuration whenever a worker frees up, and it must get one at once. When no
evaluated configuration is left to expand (at the start, or while the results of the last
expansion are still running), the best configuration known so far, the origin at first, is
expanded again: rho more of its unsampled neighbours. A configuration whose neighbours are
all sampled hands over to the nearest unsampled configuration (``base``).
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any

from ..base import PopulationTuner
from ..class_args import SearchArgs, arg, int_in
from ..space.search_space import Config, ConfigKey


@dataclass(frozen=True)
class GBFSArgs(SearchArgs):
    num_samples: int = arg(5, int_in(1, 1024), "rho, the random neighbours measured per expanded configuration (paper: 5)")



class GBFSTuner(PopulationTuner):
    """G-BFS for NNI (see the module docstring)."""

    algorithm = "G-BFS"
    Args = GBFSArgs
    args: GBFSArgs

    def __init__(self, **class_args: Any) -> None:
        super().__init__(**class_args)
        self._queue: list[tuple[float, int, ConfigKey]] = []  # (-score, arrival, key): best first
        self._arrival = itertools.count()
        self._expanded: set[ConfigKey] = set()
        self._pending: list[Config] = []  # neighbours chosen by the last expansion, to propose

    def _rebuild(self) -> None:
        _, population = self.require_space()
        self._queue, self._expanded, self._pending = [], set(), []
        for key in population.evaluated():
            self._observe(key)

    def _observe(self, key: ConfigKey) -> None:
        _, population = self.require_space()
        if key not in self._expanded:
            score = population.fitness.score(population.records[key].objective)
            heapq.heappush(self._queue, (-score, next(self._arrival), key))

    def _propose(self) -> Config:
        space, population = self.require_space()
        origin = space.origin()
        if not self.seen(origin):
            return origin
        while not self._pending:
            state, popped = self._next_state(origin)
            self._pending = self.expand(state)
            if not self._pending and not popped:
                return state  # saturated: base finds the nearest unsampled configuration
        return self._pending.pop(0)

    def _next_state(self, origin: Config) -> tuple[Config, bool]:
        """The best evaluated configuration not yet expanded (popped from the queue), or, with
        none left, the best known one (expanded again)."""
        _, population = self.require_space()
        while self._queue:
            _, _, key = heapq.heappop(self._queue)
            if key not in self._expanded:
                self._expanded.add(key)
                return population.records[key].config, True
        best = population.best()
        return (best[0] if best is not None else origin), False

    def expand(self, state: Config) -> list[Config]:
        """Up to rho unsampled neighbours of ``state``, drawn uniformly: the moves are tried in a
        random order until rho of them reach usable configurations (each move reaches a
        different neighbour, so this is a uniform draw without listing them all)."""
        space, _ = self.require_space()
        order = (space.moves[int(i)] for i in self.rng.permutation(len(space.moves)))
        reached = (space.apply_move(state, action, self.rng) for action in order)
        return self.fresh((m for m in reached if m is not None), self.args.num_samples)
