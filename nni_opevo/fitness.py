"""From what a trial reports to the fitness OpEvo selects and recombines with.

The paper's fitness is TFLOPS: non-negative, higher is better, 0 for invalid kernels, and
eq. 2 draws parents in proportion to it. NNI experiments report anything, so:

* The objective is the reported number, or ``value["default"]`` for a dict. Anything else
  (missing, non-numeric, NaN, +-inf) is a *failure*: a broken measurement, not a record.
  A trial that ends without a result is a failure too.
* Ranking (top-lambda parents) uses the objective, best first; failures rank last.
* The eq. 2 weight of a configuration with objective v is
    - maximize: ``v - min(0, v_min)``: exactly the paper's weight when every value seen is
      >= 0 (TFLOPS); with negative values, shifted so the worst value seen weighs 0;
    - minimize: ``1 / v`` while every value seen is > 0 (minimizing latency then weighs
      parents exactly as maximizing throughput would), else ``v_max - v``;
    - 0 for failures, so their traits are never inherited (paper sec. 4.2).
  ``v_min`` / ``v_max`` are the extremes over every valid value received so far.

Weights are computed divided by a constant of the history's magnitude (``v_min`` for
``1/v``, the largest ``|v|`` seen otherwise): eq. 2 and every model use only their ratios or
their order, and finite but extreme results (1e308, 5e-324, a mix of both signs) then give
finite weights, where the plain formulas overflow to inf and turn selection probabilities and
model labels into NaN.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Literal

import numpy as np

OptimizeMode = Literal["maximize", "minimize"]


def objective(value: Any) -> float | None:
    """The number a trial reported, or None when it is a failure."""
    if isinstance(value, dict):
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars are Real
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class Fitness:
    """Ranks objectives and turns them into eq. 2 weights (see the module docstring)."""

    def __init__(self, mode: OptimizeMode) -> None:
        self.mode = mode
        self.v_min = math.inf
        self.v_max = -math.inf

    def observe(self, v: float | None) -> None:
        if v is not None:
            self.v_min = min(self.v_min, v)
            self.v_max = max(self.v_max, v)

    def score(self, v: float | None) -> float:
        """Higher is better; failures are -inf."""
        if v is None:
            return -math.inf
        return v if self.mode == "maximize" else -v

    def weight(self, v: float | None) -> float:
        return float(self.weights(np.array([np.nan if v is None else v]))[0])

    def weights(self, values: np.ndarray) -> np.ndarray:
        """``weight`` of many objectives at once (NaN stands for a failure), scaled by a
        constant of the history (see the module docstring)."""
        magnitude = max(abs(self.v_min), abs(self.v_max)) if math.isfinite(self.v_min) else 1.0
        scale = magnitude if magnitude > 0 else 1.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.mode == "maximize":
                w = values / scale - min(0.0, self.v_min) / scale
            elif self.v_min > 0:
                w = self.v_min / values
            else:
                w = self.v_max / scale - values / scale
        return np.where(np.isnan(values), 0.0, np.clip(w, 0.0, None))
