"""N-A2C, the neighbourhood actor advantage critic of Zhang et al., "Compiler-Level Matrix
Multiplication Optimization for Deep Learning" (2019), as run in the OpEvo paper (appendix
B: at most T = 3 search steps, starting from the configuration without multi-level tiling).

An actor-critic network (``actor_critic``) sees a configuration's features and picks a
neighbour move: its action set is ``SearchSpace.moves`` (a prime factor between two tiling
levels, a swap of two loops, another choice, the next grid value, a continuous step), fixed
for the whole space, with the moves that do not apply to the current configuration masked
out. Episodes start from the best configuration measured so far (the origin, every factor
(C, 1, ..., 1), before any) and walk at most T moves; every unsampled configuration reached is
proposed for measurement, and its measured fitness, divided by the best so far, is the
reward for the move that reached it (advantage = reward - V(state before the move)). A move
onto an already-measured configuration is rewarded at once with the known fitness, so the
network learns from it without a measurement. With probability ``epsilon`` the move is
uniform instead of drawn from the policy (0.1, as in the NNI reference implementation).

NNI-wise, every request walks the current episode on until it reaches an unsampled
configuration, and the network learns from each result as it arrives, so nothing waits
for a batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import PopulationTuner
from ..class_args import SearchArgs, arg, int_in, open_unit, unit
from ..space.parameters import SpaceError
from ..space.search_space import Config, ConfigKey, SearchSpace
from .actor_critic import ActorCritic
from .features import Features

STEPS_PER_PROPOSAL = 64
"""Moves tried for one proposal before handing over to ``base``'s nearest unsampled configuration."""
MAX_ACTIONS = 50_000
"""Most moves of a space N-A2C takes on: its policy head has one output per move."""


@dataclass(frozen=True)
class NA2CArgs(SearchArgs):
    max_steps: int = arg(3, int_in(1, 64), "T, the moves of one episode from the best configuration (paper: 3)")
    epsilon: float = arg(0.1, unit, "probability of a uniform move instead of the policy's")
    hidden_size: int = arg(128, int_in(1, 1024), "hidden units of the actor-critic network")
    learning_rate: float = arg(1e-3, open_unit, "Adam step size")



@dataclass
class _Step:
    """A move waiting for the measurement of the configuration it reached."""

    x: np.ndarray
    mask: np.ndarray
    action: int


class NA2CTuner(PopulationTuner):
    """N-A2C for NNI (see the module docstring)."""

    algorithm = "N-A2C"
    Args = NA2CArgs
    args: NA2CArgs

    def __init__(self, **class_args: Any) -> None:
        super().__init__(**class_args)
        self.network: ActorCritic | None = None
        self.features: Features | None = None
        self._waiting: dict[ConfigKey, _Step] = {}
        self._state: Config | None = None
        self._steps = 0

    def _check_space(self, space: SearchSpace) -> None:
        if len(space.moves) > MAX_ACTIONS:
            counts: dict[tuple, int] = {}
            for key, _ in space.moves:
                counts[key] = counts.get(key, 0) + 1
            worst = max(counts, key=counts.__getitem__)
            path = ".".join(str(k) for k in worst if isinstance(k, str))
            raise SpaceError(path, f"N-A2C takes at most {MAX_ACTIONS:,} moves (one network output each); this space "
                             f"has {len(space.moves):,}, {counts[worst]:,} of them for this parameter")

    def _rebuild(self) -> None:
        space, _ = self.require_space()
        self.features = Features(space)
        self.network = ActorCritic(self.features.width, len(space.moves), self.args.hidden_size, self.args.learning_rate,
                                   self.rng)
        self._waiting, self._state, self._steps = {}, None, 0

    def _observe(self, key: ConfigKey) -> None:
        step = self._waiting.pop(key, None)
        if step is not None:
            self._learn(step, key)

    def _propose(self) -> Config:
        space, population = self.require_space()
        for _ in range(STEPS_PER_PROPOSAL):
            if self._state is None or self._steps >= self.args.max_steps:
                best = population.best()
                self._state, self._steps = (best[0] if best is not None else space.origin()), 0
                if not self.seen(self._state):
                    return self._state  # the origin, first of all
            step, reached = self._move(self._state)
            if reached is None:
                self._steps = self.args.max_steps  # no move applies here: start a new episode
                continue
            self._state, self._steps = reached, self._steps + 1
            key = space.identity(reached)
            record = population.records.get(key)
            if record is None:
                self._waiting[key] = step
                return reached
            if record.evaluated:
                self._learn(step, key)
        return self._state

    def _move(self, state: Config) -> tuple[_Step, Config | None]:
        """One move from ``state`` by the epsilon-greedy policy."""
        space, _ = self.require_space()
        assert self.network is not None
        results = [space.apply_move(state, action, self.rng) for action in space.moves]
        mask = np.array([r is not None for r in results])
        x = _inputs(self.features(state))
        if not mask.any():
            return _Step(x, mask, -1), None
        if self.rng.random() < self.args.epsilon:
            valid = np.flatnonzero(mask)
            action = int(valid[self.rng.integers(len(valid))])
        else:
            pi, _, _ = self.network.forward(x, mask)
            action = int(self.rng.choice(len(pi), p=pi))
        return _Step(x, mask, action), results[action]

    def _learn(self, step: _Step, key: ConfigKey) -> None:
        """One actor-critic update, the reward being the fitness relative to the best so far."""
        _, population = self.require_space()
        assert self.network is not None
        best = population.best()
        top = population.weight(population.space.identity(best[0])) if best is not None else 0.0
        reward = population.weight(key) / top if top > 0 else 0.0
        self.network.update(step.x, step.mask, step.action, reward)


def _inputs(features: np.ndarray) -> np.ndarray:
    """Network inputs: signed log of the features, so tile sizes from 1 to 2^20 stay in range."""
    return np.sign(features) * np.log2(1.0 + np.abs(features))
