"""AutoTVM's model optimizer (Chen et al. 2018, sec. 3.3): parallel simulated annealing over a
cost model, collecting the best unsampled configurations it meets.

Like AutoTVM's ``SimulatedAnnealingOptimizer``: ``chains`` Markov chains step together; a step
redraws one parameter of each chain at random (``operators.redraw_one``); a step to a lower
predicted score s' < s is accepted with probability exp((s' - s) / T), the temperature T
falling linearly from 1 to 0 over ``steps``; the chains' states persist from one call to the
next, as the model is refitted; the search stops early when the best set has not changed for
``early_stop`` steps.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from ..space.search_space import Config, ConfigKey, SearchSpace
from ..space.steps import redraw_one

Score = Callable[[list[Config]], np.ndarray]


class Annealer:
    def __init__(self, space: SearchSpace, chains: int, steps: int, early_stop: int, rng: np.random.Generator) -> None:
        self.space = space
        self.steps = steps
        self.early_stop = early_stop
        self.rng = rng
        self.points = [space.sample(rng) for _ in range(chains)]

    def best(self, score: Score, n: int, seen: Callable[[Config], bool]) -> list[tuple[float, Config]]:
        """Up to ``n`` distinct unsampled configurations with the highest predicted scores met,
        best first."""
        top: list[tuple[float, int, ConfigKey, Config]] = []  # min-heap of the n best
        members: set[ConfigKey] = set()
        counter = 0

        def offer(points: list[Config], scores: np.ndarray) -> bool:
            nonlocal counter
            changed = False
            for config, s in zip(points, scores):
                key = self.space.identity(config)
                if key in members or seen(config):
                    continue
                if len(top) < n:
                    heapq.heappush(top, (float(s), counter, key, config))
                elif s > top[0][0]:
                    members.discard(heapq.heapreplace(top, (float(s), counter, key, config))[2])
                else:
                    continue
                members.add(key)
                counter += 1
                changed = True
            return changed

        scores = score(self.points)
        offer(self.points, scores)
        last_change = 0
        for k in range(self.steps):
            temperature = 1.0 - k / self.steps
            moved = [redraw_one(self.space, p, self.rng) for p in self.points]
            moved_scores = score(moved)
            accept = self.rng.random(len(moved)) < np.exp(np.minimum((moved_scores - scores) / (temperature + 1e-5), 1.0))
            self.points = [m if a else p for p, m, a in zip(self.points, moved, accept)]
            scores = np.where(accept, moved_scores, scores)
            if offer(moved, moved_scores):
                last_change = k
            elif k - last_change >= self.early_stop:
                break
        return [(s, config) for s, _, _, config in sorted(top, key=lambda t: (-t[0], t[1]))]
