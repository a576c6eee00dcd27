"""Synthetic tiled-MatMul objectives with the structure the OpEvo paper assumes.

TFLOPS-like and cheap to evaluate, for tests and CI benchmarks where no GPU is available:
smooth (a Gaussian bump in the log2 tile sizes around an optimum), with invalid regions that
score 0 (too many threads per block, too many virtual threads, too much shared memory, the
classic GPU constraints), and a loop order that changes the score by a smooth factor.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..space.parameters import FactorParameter


def tiled_matmul(
    n: int = 1024, m: int = 1024, k: int = 1024, seed: int = 0, peak: float = 30.0, with_order: bool = True
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], float]]:
    """(search space, objective) for an N x K @ K x M MatMul tiled as in paper appendix B.1:
    N and M in 4 (blocks, virtual threads, threads, per-thread tile), K in 3. ``seed`` moves the
    optimum, so each seed is a different landscape."""
    rng = np.random.default_rng(seed)
    space: dict[str, Any] = {
        "tile_n": {"_type": "factor", "_value": [n, 4]},
        "tile_m": {"_type": "factor", "_value": [m, 4]},
        "tile_k": {"_type": "factor", "_value": [k, 3]},
    }
    if with_order:
        space["order"] = {"_type": "perm", "_value": ["k_outer", "k_inner", "tile"]}
    # The optimum: a valid configuration drawn at random, in log2 coordinates.
    while True:
        target = {name: FactorParameter(name, spec["_value"]).sample(rng) for name, spec in space.items() if name != "order"}
        if _valid(target["tile_n"], target["tile_m"], target["tile_k"]):
            break
    centre = {name: np.log2(v) for name, v in target.items()}
    best_order = [int(i) for i in rng.permutation(3)]
    width = 1.6

    def objective(params: dict[str, Any]) -> float:
        tn, tm, tk = params["tile_n"], params["tile_m"], params["tile_k"]
        if not _valid(tn, tm, tk):
            return 0.0
        d2 = sum(float(np.sum((np.log2(params[name]) - c) ** 2)) for name, c in centre.items())
        score = peak * math.exp(-d2 / (2 * width**2))
        if with_order:
            names = space["order"]["_value"]
            misplaced = sum(names.index(a) != b for a, b in zip(params["order"], best_order))
            score *= 1.0 - 0.1 * misplaced
        return score

    return space, objective


def _valid(tn: Any, tm: Any, tk: Any) -> bool:
    threads = tn[2] * tm[2]
    vthreads = tn[1] * tm[1]
    shared_floats = (tn[1] * tn[2] * tn[3] + tm[1] * tm[2] * tm[3]) * tk[1] * tk[2]
    return 32 <= threads <= 1024 and vthreads <= 64 and shared_floats * 4 <= 48 * 1024
