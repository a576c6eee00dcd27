"""What a ``discrete`` set of sizes adds to its topology: its values doubled and halved.

A parameter's own topology steps to the adjacent values. Sizes (tiles, blocks, unroll steps) act
multiplicatively on performance: a 64-wide block is as near to a 128-wide one as to a 112-wide
one, and a 3-wide tile between 2 and 4 can be far worse than both. The search space's ``scaled``
neighbourhood therefore also steps to a size's double and half, and its ``diagonal`` one doubles
one size while halving another (``SearchSpace.neighbours``); these are the per-parameter parts.
"""
from __future__ import annotations

from weakref import WeakKeyDictionary

from .parameters import DiscreteParameter

_SCALED: WeakKeyDictionary[DiscreteParameter, dict[int, tuple[int, ...]]] = WeakKeyDictionary()
"""``scaled`` per parameter and value, listed once."""


def doubled_and_halved(param: DiscreteParameter, value: int) -> list[int]:
    """Indices of the value doubled and halved, where the set holds them and they are not
    already the values just below or above."""
    v = float(param.values[value])
    found = (param.find(v * 2), param.find(v / 2)) if v != 0 else (None, None)
    return [k for k in found if k is not None and abs(k - value) > 1]


def scaled(param: DiscreteParameter, value: int) -> tuple[int, ...]:
    """The adjacent values, then the value doubled and halved (``doubled_and_halved``)."""
    table = _SCALED.setdefault(param, {})
    options = table.get(value)
    if options is None:
        options = table[value] = tuple(param.neighbours(value) + doubled_and_halved(param, value))
    return options


def times(param: DiscreteParameter, value: int, factor: float) -> int | None:
    """Index of the value times ``factor`` when both are whole numbers >= 1 and the set holds the
    product (a size doubled or halved). Sizes only: a set of fractions (a learning rate's 0.25,
    0.5, 1) is no tile or block."""
    v = float(param.values[value])
    product = v * factor
    if v < 1 or not (v.is_integer() and product.is_integer()):
        return None
    return param.find(product)
