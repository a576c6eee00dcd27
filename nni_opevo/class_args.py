"""Checks for tuner classArgs, shared by every tuner's constructor and ClassArgsValidator.

NNI 3.0's ``nnictl create`` does not call a registered ClassArgsValidator, so constructors
run the same checks: a bad classArg fails the experiment at once with a message that names
it, instead of surfacing as an odd error deep in the search.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

OPTIMIZE_MODES = ("maximize", "minimize")


def _fail(name: str, rule: str, value: Any) -> ValueError:
    return ValueError(f"classArg '{name}' {rule}, got {value!r}")


def optimize_mode(value: Any) -> str:
    if value not in OPTIMIZE_MODES:
        raise _fail("optimize_mode", "must be 'maximize' or 'minimize'", value)
    return str(value)


def positive_int(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise _fail(name, "must be an integer >= 1", value)
    return int(value)


def open_unit(name: str, value: Any) -> float:
    """A rate strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value < 1:
        raise _fail(name, "must be a number strictly between 0 and 1", value)
    return float(value)


def seed(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise _fail("seed", "must be a non-negative integer or null", value)
    return int(value)


def reject_unknown(known: set[str], given: dict[str, Any]) -> None:
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"classArg '{unknown[0]}' is not known; known classArgs: {', '.join(sorted(known))}")


def unit(name: str, value: Any) -> float:
    """A probability in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
        raise _fail(name, "must be a number between 0 and 1", value)
    return float(value)


def positive_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not value > 0:
        raise _fail(name, "must be a number > 0", value)
    return float(value)
