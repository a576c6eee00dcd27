"""How OpEvo's surrogate sees a configuration: a row of *atoms*, each compared by distance
(ordinal) or by equality (categorical), chosen by parameter type.

* ``factor``: each entry's log2 as a share of log2(C) (ordinal): tile sizes act in ratios;
* ``perm``: the item at each position (categorical): two orders share an atom where they place
  the same loop;
* ``choice``: the option (categorical);
* ``discrete``: the value's index (categorical) and its position across the set (ordinal; in
  log scale when every value is positive, else by rank); where the set mixes powers of two with
  other whole sizes, a third atom saying whether the value is one (categorical). The numbers of
  a tuning knob may perform smoothly in their order (a larger tile, a larger block) or not at
  all (a 48-wide block between two good powers of two can be ten times slower); hardware works
  in powers of two (warps and wavefronts, vector widths, memory banks), so a size that is not
  one often leaves lanes idle. The surrogate fits a relevance per atom, so it learns which of
  these holds for a knob;
* the other grids: the position on a bounded grid (ordinal), the grid index on an unbounded one
  (categorical); continuous types: the position across the set's width, in log space for the
  log types (ordinal).

A parameter's *meaning* says what its atoms stand for: two parameters of equal meaning encode a
value alike, so the surrogate may learn from measurements on either (a network's layers of one
template). A factor's atoms are shares of C, so the same loop tiled nu ways means the same for
any extent; any other parameter means its type and its whole ``_value``.
"""
from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from ..space.parameters import (
    ChoiceParameter,
    ContinuousParameter,
    DiscreteParameter,
    FactorParameter,
    GridParameter,
    Parameter,
    PermParameter,
    Value,
)
from ..space.search_space import Config, SearchSpace

PROJECTION_LIMIT = 4096
"""Most values of one parameter compared when carrying a value over from another space (``project``)."""


@dataclass(frozen=True)
class Encoder:
    """One parameter's atoms: which are ordinal, what they mean, and the row part of a value."""

    ordinal: tuple[bool, ...]
    meaning: Hashable
    encode: Callable[[Value], tuple[float, ...]]


def _spec_meaning(param: Parameter) -> Hashable:
    return param.type_name, json.dumps(param.spec_value, sort_keys=True, default=str)


@functools.singledispatch
def encoder(param: Parameter) -> Encoder:
    """The encoder of ``param``'s type (see the module docstring)."""
    raise TypeError(f"no atoms for {type(param).__name__}")


@encoder.register
def _(param: FactorParameter) -> Encoder:
    scale = math.log2(param.product) or 1.0
    return Encoder((True,) * param.nu, (param.type_name, param.nu),
                   lambda value: tuple(math.log2(a) / scale for a in value))


@encoder.register
def _(param: PermParameter) -> Encoder:
    return Encoder((False,) * param.n, _spec_meaning(param), lambda value: tuple(float(i) for i in value))


@encoder.register
def _(param: ChoiceParameter) -> Encoder:
    return Encoder((False,), _spec_meaning(param), lambda value: (float(value),))


@encoder.register
def _(param: GridParameter) -> Encoder:
    low, high = param.k_low, param.k_high
    if math.isfinite(low) and math.isfinite(high) and high > low:
        encode: Callable[[Value], tuple[float, ...]] = lambda value: ((value - low) / (high - low),)  # noqa: E731
    else:
        encode = lambda value: (float(value),)  # noqa: E731
    return Encoder((math.isfinite(low) and math.isfinite(high),), _spec_meaning(param), encode)


def positions(values: list[float | int]) -> tuple[float, ...]:
    """Each value's position in [0, 1] across a sorted set: in log scale when every value is
    positive (sizes act in ratios: 64 is as far from 32 as from 128), else by rank."""
    if len(values) == 1:
        return (0.0,)
    if values[0] > 0:
        logs = np.log2(np.array(values, dtype=float))
        return tuple(((logs - logs[0]) / (logs[-1] - logs[0])).tolist())
    return tuple((np.arange(len(values)) / (len(values) - 1)).tolist())


def powers_of_two(values: list[float | int]) -> tuple[bool, ...] | None:
    """Whether each value is a power of two, for a set of whole numbers >= 1 that holds both
    kinds (block sizes 16, 32, 48, ..., 256; tiles 1-4); None otherwise."""
    if not all(float(v).is_integer() and v >= 1 for v in values):
        return None
    flags = tuple(int(v) & (int(v) - 1) == 0 for v in values)
    return flags if any(flags) and not all(flags) else None


@encoder.register
def _(param: DiscreteParameter) -> Encoder:
    where, flags = positions(param.values), powers_of_two(param.values)
    if flags is None:
        return Encoder((False, True), _spec_meaning(param), lambda value: (float(value), where[value]))
    return Encoder((False, True, False), _spec_meaning(param),
                   lambda value: (float(value), where[value], float(flags[value])))


@encoder.register
def _(param: ContinuousParameter) -> Encoder:
    low = param.lo_in if math.isfinite(param.lo_in) else param.mu - 2 * param.sigma  # type: ignore[attr-defined]

    def encode(value: Value) -> tuple[float, ...]:
        x = math.log(value) if param.log else value  # type: ignore[arg-type]
        return ((x - low) / param.width,)

    return Encoder((True,), _spec_meaning(param), encode)


class Atoms:
    """A search space's atoms: every parameter's in space order, NaN where one is inactive."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.encoders = {slot.key: encoder(slot.param) for slot in space.slots}
        self.ordinal = np.array([o for e in self.encoders.values() for o in e.ordinal], dtype=bool)
        """Which columns are ordinal (compared by distance) rather than categorical."""
        self.meaning: Hashable = tuple((key, e.meaning) for key, e in self.encoders.items())
        """What the columns stand for: two spaces of equal meaning give rows a surrogate can
        learn from together."""

    def __call__(self, config: Config) -> np.ndarray:
        out = np.full(len(self.ordinal), np.nan)
        i = 0
        for key, e in self.encoders.items():
            width = len(e.ordinal)
            if key in config:
                out[i : i + width] = e.encode(config[key])
            i += width
        return out

    def project(self, config: Config, source: Atoms) -> Config | None:
        """``config``, a configuration of ``source``'s space (of equal meaning: a network's other
        layer of this template), carried into this space: each value kept where it is one of this
        parameter's, else this parameter's value of the nearest atoms (a factor's tiles as the
        same log-shares of this extent: a 27-wide row tile of a 27-wide loop becomes a 13-wide one
        of a 13-wide loop). None where a value would have to be found among more than
        ``PROJECTION_LIMIT``."""
        out: Config = {}
        for slot in self.space.slots:
            if not slot.active_in(out):
                continue
            theirs, value = source.space.by_key[slot.key].param, config[slot.key]
            try:
                out[slot.key] = slot.param.from_trial(theirs.to_trial(value))
                continue
            except ValueError:
                pass
            if slot.param.size > PROJECTION_LIMIT:
                return None
            target = np.asarray(source.encoders[slot.key].encode(value))
            mine = self.encoders[slot.key].encode
            out[slot.key] = min(slot.param.enumerate(), key=lambda v: float(np.sum((np.asarray(mine(v)) - target) ** 2)))
        return out
