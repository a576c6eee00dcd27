"""Constraint functions for the tests, importable as ``constraints:<name>`` (tests/ is on the path)."""
from __future__ import annotations

from typing import Any


def first_factor_at_most(params: dict[str, Any], name: str = "f", most: int = 4) -> bool:
    """Feasible while the first entry of factor ``name`` is at most ``most``."""
    return params[name][0] <= most


def tiled_limits(params: dict[str, Any]) -> bool:
    """The synthetic tiled MatMul's launch limits (nni_opevo.testing.landscapes), as a kernel's restrictions."""
    from nni_opevo.testing.landscapes import _valid

    return _valid(params["tile_n"], params["tile_m"], params["tile_k"])


def below(params: dict[str, Any], name: str = "x", limit: int = 200) -> bool:
    """Feasible while parameter ``name`` is below ``limit``."""
    return params[name] < limit


def raises(params: dict[str, Any]) -> bool:
    raise KeyError("no such knob")


def not_a_bool(params: dict[str, Any]) -> Any:
    return "yes"


SEEN_LAYERS: list[str] = []


def layer_limit(params: dict[str, Any], layer: str, most: int = 4) -> bool:
    """A network's constraint: records which layer asked, feasible while the first factor is small."""
    SEEN_LAYERS.append(layer)
    return params["t"][0] <= most


def slow_refusal(params: dict[str, Any], seconds: float = 0.002) -> bool:
    """A slow constraint that refuses everything: a space the static check rules out almost whole."""
    import time

    time.sleep(seconds)
    return False
