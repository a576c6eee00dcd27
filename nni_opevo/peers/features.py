"""How the feature-vector models of the peers (AutoTVM's XGBoost, NoSE's k-NN, N-A2C's network)
see a configuration: a fixed-width vector, each parameter's numbers in space order and zeros
where a parameter is inactive. Discrete types give ordinal numbers >= 1, so that 0 can stand for
an inactive parameter:

* ``factor``: its entries; ``perm``: the position (from 1) of each item, so nearby orders give
  nearby numbers; ``choice``: the option's number from 1;
* a grid: the ordinal position from 1 on a bounded grid, the value itself on an unbounded one;
  a continuous type: the value.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ..space.parameters import (
    ChoiceParameter,
    ContinuousParameter,
    FactorParameter,
    GridParameter,
    Parameter,
    PermParameter,
    Value,
)
from ..space.search_space import Config, SearchSpace

Encode = Callable[[Value], tuple[float, ...]]


@functools.singledispatch
def encoder(param: Parameter) -> tuple[int, Encode]:
    """(how many numbers, the encoding) of ``param``'s type (see the module docstring)."""
    raise TypeError(f"no features for {type(param).__name__}")


@encoder.register
def _(param: FactorParameter) -> tuple[int, Encode]:
    return param.nu, lambda value: tuple(float(a) for a in value)


@encoder.register
def _(param: PermParameter) -> tuple[int, Encode]:
    def encode(value: Value) -> tuple[float, ...]:
        position = [0.0] * param.n
        for pos, item in enumerate(value):  # type: ignore[arg-type]
            position[item] = float(pos + 1)
        return tuple(position)

    return param.n, encode


@encoder.register
def _(param: ChoiceParameter) -> tuple[int, Encode]:
    return 1, lambda value: (float(value + 1),)  # type: ignore[operator]


@encoder.register
def _(param: GridParameter) -> tuple[int, Encode]:
    if math.isfinite(param.k_low):
        return 1, lambda value: (float(value - param.k_low + 1),)  # type: ignore[operator]
    return 1, lambda value: (float(param.value_at(value)),)  # type: ignore[arg-type]


@encoder.register
def _(param: ContinuousParameter) -> tuple[int, Encode]:
    return 1, lambda value: (float(value),)  # type: ignore[arg-type]


class Features:
    """A search space's feature vectors (see the module docstring)."""

    def __init__(self, space: SearchSpace) -> None:
        self.encoders = [(slot.key, *encoder(slot.param)) for slot in space.slots]
        self.width = sum(width for _, width, _ in self.encoders)

    def __call__(self, config: Config) -> np.ndarray:
        out = np.zeros(self.width)
        i = 0
        for key, width, encode in self.encoders:
            if key in config:
                out[i : i + width] = encode(config[key])
            i += width
        return out
