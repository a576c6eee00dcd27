"""An NNI search space (with ``factor`` and ``perm``) as a flat list of keyed parameters.

Every tuner of this package works on this one representation. A configuration is a dict
from parameter key to internal value, holding only the parameters that are active: a
parameter nested in a choice option is active only while that option is chosen (NNI's
nested choice). Parameters are stored parents-first, so walking them in order and skipping
inactive ones always sees a choice before the parameters it enables.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from . import neighbourhoods
from .parameters import ChoiceParameter, DiscreteParameter, Parameter, SpaceError, parse_parameter

MAX_DEPTH = 32
"""Deepest nesting of choices."""
MAX_PARAMETERS = 10_000
"""Most parameters in a space, nested ones included."""
NEIGHBOURHOODS = ("topology", "scaled", "diagonal")
"""The named neighbourhoods of ``SearchSpace.neighbours``."""

Key = tuple  # e.g. ("tile_x",) or ("model", 1, "depth"): name path with option indices, as NNI keys them
Config = dict  # Key -> internal value, active parameters only
ConfigKey = tuple  # hashable identity of a configuration


@dataclass(frozen=True)
class Slot:
    """A parameter at its place in the space: ``condition`` is (choice key, option index) or None."""

    key: Key
    param: Parameter
    condition: tuple[Key, int] | None

    def active_in(self, config: Config) -> bool:
        return self.condition is None or config.get(self.condition[0]) == self.condition[1]


class SearchSpace:
    """A validated search space. Raises ``SpaceError`` (a ValueError) naming the bad parameter."""

    def __init__(self, space: Any) -> None:
        if not isinstance(space, dict):
            raise SpaceError("<root>", f"the search space must be a JSON object of parameters, got {type(space).__name__}")
        if not space:
            raise SpaceError("<root>", "the search space has no parameters")
        self.raw = space
        self.slots: list[Slot] = []
        self._top: list[Slot] = self._parse(space, (), None, 0)
        self.by_key = {slot.key: slot for slot in self.slots}

    def _parse(self, space: dict, prefix: Key, condition: tuple[Key, int] | None, depth: int) -> list[Slot]:
        level = []
        if depth > MAX_DEPTH:
            path = ".".join(str(k) for k in prefix if isinstance(k, str))
            raise SpaceError(path, f"choices may nest at most {MAX_DEPTH} deep")
        if len(self.slots) + len(space) > MAX_PARAMETERS:
            raise SpaceError("<root>", f"the search space may have at most {MAX_PARAMETERS:,} parameters")
        for name, spec in space.items():
            if name == "_name" and prefix:
                continue
            key = (*prefix, name)
            path = ".".join(str(k) for k in key if isinstance(k, str))
            if not isinstance(name, str) or not name:
                raise SpaceError(path or "<root>", "parameter names must be non-empty strings")
            slot = Slot(key, parse_parameter(path, spec), condition)
            self.slots.append(slot)
            level.append(slot)
            if isinstance(slot.param, ChoiceParameter) and slot.param.nested:
                for i, option in enumerate(slot.param.options):
                    if not isinstance(option["_name"], str):
                        raise SpaceError(path, f"choice: nested option _name must be a string, got {option['_name']!r}")
                    slot.param.subspaces.append(self._parse(option, (*key, i), (key, i), depth + 1))
        return level

    # ------------------------------------------------------------------ size

    @cached_property
    def size(self) -> float:
        """Number of distinct configurations (``math.inf`` when any active set is infinite);
        computed once."""
        return self._size(self._top)

    def _size(self, level: list[Slot]) -> float:
        total: float = 1
        for slot in level:
            p = slot.param
            if isinstance(p, ChoiceParameter) and p.nested:
                total *= sum(self._size(sub) for sub in p.subspaces)
            else:
                total *= p.size
            total = min(float(total), math.inf)  # exact integers could grow without bound
        return total

    # ------------------------------------------------------------------ configurations

    def sample(self, rng: np.random.Generator) -> Config:
        """A configuration drawn from every parameter's prior."""
        config: Config = {}
        for slot in self.slots:
            if slot.active_in(config):
                config[slot.key] = slot.param.sample(rng)
        return config

    def origin(self) -> Config:
        """The configuration of every parameter's ``origin``: for a kernel space, every loop
        untiled and in its written order (where G-BFS and N-A2C start)."""
        config: Config = {}
        for slot in self.slots:
            if slot.active_in(config):
                config[slot.key] = slot.param.origin()
        return config

    def complete(self, config: Config, rng: np.random.Generator) -> Config:
        """``config`` made whole after a change to a nested choice: parameters it no longer
        enables are dropped, and ones it newly enables are drawn from their prior."""
        out: Config = {}
        for slot in self.slots:
            if slot.active_in(out):
                out[slot.key] = config[slot.key] if slot.key in config else slot.param.sample(rng)
        return out

    def active_slots(self, config: Config) -> Iterator[Slot]:
        return (slot for slot in self.slots if slot.key in config)

    def identity(self, config: Config) -> ConfigKey:
        """Hashable identity of a configuration: its active (key, value) pairs in space order."""
        return tuple((slot.key, config[slot.key]) for slot in self.slots if slot.key in config)

    def enumerate(self) -> Iterator[Config]:
        """Every configuration; only for finite spaces small enough to list."""
        yield from self._enumerate(0, {})

    def _enumerate(self, i: int, partial: Config) -> Iterator[Config]:
        while i < len(self.slots) and not self.slots[i].active_in(partial):
            i += 1
        if i == len(self.slots):
            yield dict(partial)
            return
        slot = self.slots[i]
        for value in slot.param.enumerate():
            partial[slot.key] = value
            yield from self._enumerate(i + 1, partial)
            del partial[slot.key]

    def neighbours(self, config: Config, kind: str = "topology", rng: np.random.Generator | None = None,
                   limit: int | None = None) -> Iterator[Config]:
        """Configurations one step away, by neighbourhood ``kind`` (``NEIGHBOURHOODS``):

        * ``topology``: one step of one parameter's topology (paper, sec. 3);
        * ``scaled``: the same, and a ``discrete`` size's double and half too
          (``neighbourhoods.scaled``: sizes act in ratios);
        * ``diagonal``: one ``discrete`` size (a whole number) doubled and another halved, where
          both sets hold the new values; every one up to ``limit``, else ``limit`` drawn with
          ``rng``. Such a step keeps the two sizes' product (threads per block, a tile's area, a
          thread's work), and the hardware's limits bind on products (registers, threads, shared
          memory): fast kernels lie along a ridge of the product, and a step in one size falls off
          it (on the MI250X convolution a 4 x 2 tile runs at 0.67 of the optimum, 4 x 4 at 0.07,
          and the optimum is 2 x 4).

        Continuous parameters and nested-choice switches are left out of the first two: their
        moves have no finite neighbour list."""
        if kind == "diagonal":
            if rng is None or limit is None:
                raise TypeError("the diagonal neighbourhood draws: give rng and limit")
            return iter(self._diagonal(config, rng, limit))
        if kind not in NEIGHBOURHOODS:
            raise ValueError(f"unknown neighbourhood {kind!r}; known: {', '.join(NEIGHBOURHOODS)}")
        return self._steps(config, kind == "scaled")

    def _steps(self, config: Config, scale: bool) -> Iterator[Config]:
        for slot in self.active_slots(config):
            p = slot.param
            if isinstance(p, ChoiceParameter) and p.nested:
                continue
            try:
                if scale and isinstance(p, DiscreteParameter):
                    values = list(neighbourhoods.scaled(p, config[slot.key]))
                else:
                    values = p.neighbours(config[slot.key])
            except TypeError:
                continue
            for value in values:
                yield {**config, slot.key: value}

    def _diagonal(self, config: Config, rng: np.random.Generator, limit: int) -> list[Config]:
        ups: list[tuple[Key, int]] = []
        downs: list[tuple[Key, int]] = []
        for slot in self.active_slots(config):
            if isinstance(slot.param, DiscreteParameter):
                value = config[slot.key]
                up, down = neighbourhoods.times(slot.param, value, 2), neighbourhoods.times(slot.param, value, 0.5)
                if up is not None:
                    ups.append((slot.key, up))
                if down is not None:
                    downs.append((slot.key, down))
        pairs = [(u, d) for u in ups for d in downs if u[0] != d[0]] if len(ups) * len(downs) <= 2 * limit \
            else self._draw_pairs(ups, downs, rng, limit)
        if len(pairs) > limit:
            pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), limit, replace=False).tolist())]
        return [{**config, up[0]: up[1], down[0]: down[1]} for up, down in pairs]

    @staticmethod
    def _draw_pairs(ups: list[tuple[Key, int]], downs: list[tuple[Key, int]], rng: np.random.Generator,
                    limit: int) -> list[tuple[tuple[Key, int], tuple[Key, int]]]:
        """``limit`` distinct (up, down) pairs of two different parameters, drawn uniformly
        without listing them all (a space of a thousand sizes has a million)."""
        picked: set[int] = set()
        while len(picked) < limit:
            u, d = divmod(int(rng.integers(len(ups) * len(downs))), len(downs))
            if ups[u][0] != downs[d][0]:
                picked.add(u * len(downs) + d)
        return [(ups[u], downs[d]) for u, d in (divmod(i, len(downs)) for i in sorted(picked))]

    @cached_property
    def moves(self) -> list[tuple[Key, Hashable]]:
        """Every (parameter key, move) pair: a fixed action set over all configurations."""
        return [(slot.key, move) for slot in self.slots for move in slot.param.moves]

    def apply_move(self, config: Config, action: tuple[Key, Hashable], rng: np.random.Generator) -> Config | None:
        """``config`` after one move, or None when the move does not apply (its parameter is
        inactive, or the move leaves the set). A nested-choice switch draws the sub-parameters
        it enables (``complete``)."""
        key, move = action
        if key not in config:
            return None
        value = self.by_key[key].param.apply_move(config[key], move)
        if value is None:
            return None
        moved = {**config, key: value}
        return self.complete(moved, rng) if self._switches[key] else moved

    @cached_property
    def _switches(self) -> dict[Key, bool]:
        return {slot.key: isinstance(slot.param, ChoiceParameter) and slot.param.nested for slot in self.slots}

    # ------------------------------------------------------------------ trial format

    def to_trial(self, config: Config) -> dict[str, Any]:
        """The parameters as the trial receives them from ``nni.get_next_parameter()``."""
        out: dict[str, Any] = {}
        for slot in self.active_slots(config):
            target = out
            names = [k for k in slot.key if isinstance(k, str)]
            for name in names[:-1]:
                target = target[name]
            target[names[-1]] = slot.param.to_trial(config[slot.key])
        return out

    def from_trial(self, params: Any) -> Config:
        """Inverse of ``to_trial`` (for imported and customized trials); ValueError if off the space."""
        if not isinstance(params, dict):
            raise ValueError(f"trial parameters must be an object, got {params!r}")
        config: Config = {}
        for slot in self.slots:
            if not slot.active_in(config):
                continue
            raw: Any = params
            for name in (k for k in slot.key if isinstance(k, str)):
                if not isinstance(raw, dict) or name not in raw:
                    raise ValueError(f"trial parameters lack '{'.'.join(k for k in slot.key if isinstance(k, str))}'")
                raw = raw[name]
            config[slot.key] = slot.param.from_trial(raw)
        return config

    def contains(self, config: Config) -> bool:
        """Whether ``config`` has exactly the active parameters, each with a valid value."""
        try:
            return self.from_trial(self.to_trial(config)) == config
        except (ValueError, KeyError, IndexError, TypeError):
            return False

