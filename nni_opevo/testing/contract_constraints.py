"""The constraint functions the contract suite gives tuners (``contract``), importable wherever the
package is: each takes the layer a network's tuner adds, and ignores it."""
from __future__ import annotations

from typing import Any

from .landscapes import _valid


def tiled_limits(params: dict[str, Any], layer: str | None = None) -> bool:
    """The synthetic tiled MatMul's launch limits (``landscapes``), as a kernel's restrictions."""
    return _valid(params["tile_n"], params["tile_m"], params["tile_k"])


def first_factor_at_most(params: dict[str, Any], most: int = 4, layer: str | None = None) -> bool:
    return params["f"][0] <= most


def raises(params: dict[str, Any], layer: str | None = None) -> bool:
    raise KeyError("no such knob")


def not_a_bool(params: dict[str, Any], layer: str | None = None) -> Any:
    return "yes"
