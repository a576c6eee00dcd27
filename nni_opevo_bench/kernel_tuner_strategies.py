"""Kernel Tuner's own search strategies as peers, run by the ``kernel_tuner`` package itself.

Kernel Tuner replays a cache file in its simulation mode: a configuration absent from the cache
is restricted, so its strategies, like our tuners given the cache's constraint, never spend an
evaluation on one. ``kernel_tuner.tune_cache`` would also count a *recorded failure* (a
configuration that failed to compile or run) as restricted, so its strategies would never pay
for one while ours pay an evaluation, as on real hardware. ``run`` therefore calls what
``tune_cache`` calls with one change: the restriction admits every configuration the cache
records, failures included. A failure is then served from the cache as Kernel Tuner serves a
failed evaluation when tuning for real (an error result, one evaluation of the budget). A strategy is named
``kt:<strategy>`` in a benchmark (``kt:genetic_algorithm``, ``kt:bayes_opt`` ...), run with the
same budget (``max_fevals``) and seed as every other tuner, and scored the same way: its
evaluations are read in order, each configuration counted once (a strategy that revisits a
configuration gets the cached result for free, as in Kernel Tuner), and looked up in the same
``tuning_cache``. Some strategies stop before the budget; their run is then shorter.

Run without the restrictions (``constrained=False``, a user with no static check), a strategy
searches the whole grid, and a restricted configuration is a failure that costs an evaluation:
the private copy of the cache records each as ``InvalidConfig``, which Kernel Tuner serves as an
evaluation that failed (its simulation mode refuses a configuration absent from the cache).

Kernel Tuner is an optional dependency: ``pip install -e '.[kerneltuner]'``.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any

from .tuning_cache import TuningCache

PREFIX = "kt:"
STRATEGIES = ("random_sample", "genetic_algorithm", "diff_evo", "simulated_annealing", "pso", "firefly_algorithm",
              "bayes_opt", "mls", "greedy_ils", "dual_annealing")
"""The strategies the published comparison runs; any other name Kernel Tuner knows works too."""


def is_strategy(spec: str) -> bool:
    return spec.startswith(PREFIX)


@dataclass(frozen=True)
class Evaluation:
    parameters: dict[str, Any]
    strategy_ms: float  # the strategy's own time before this evaluation, as Kernel Tuner records it


def import_kernel_tuner() -> Any:
    try:
        import kernel_tuner
    except ImportError as e:
        raise ImportError("Kernel Tuner's strategies need the kernel_tuner package: "
                          "pip install -e '.[kerneltuner]'") from e
    return kernel_tuner


def check(spec: str) -> None:
    """ValueError naming an unknown strategy (before anything runs)."""
    name = spec.removeprefix(PREFIX)
    import_kernel_tuner()
    from kernel_tuner.interface import strategy_map

    if name not in strategy_map:
        raise ValueError(f"unknown Kernel Tuner strategy {name!r}; known: {', '.join(sorted(strategy_map))}")


def _plain_json(cache: TuningCache, folder: str, constrained: bool) -> str:
    """Kernel Tuner reads only a plain ``.json`` cache, and appends to one it opens: a private
    copy; unconstrained, with every restricted configuration of the grid recorded as invalid."""
    path = os.path.join(folder, "cache.json")
    opener = gzip.open if cache.path.endswith(".gz") else open
    if constrained:
        with opener(cache.path, "rb") as source, open(path, "wb") as copy:
            shutil.copyfileobj(source, copy)
        return path
    with opener(cache.path, "rt") as source:
        data = json.load(source)
    for values in itertools.product(*(cache.values[k] for k in cache.keys)):
        if values not in cache.entries:
            data["cache"][",".join(map(str, values))] = {
                **dict(zip(cache.keys, values)), "time": "InvalidConfig", "compile_time": 0.0,
                "verification_time": 0.0, "benchmark_time": 0.0, "strategy_time": 0.0, "framework_time": 0.0}
    with open(path, "w") as copy:
        json.dump(data, copy)
    return path


def run(cache: TuningCache, spec: str, seed: int, budget: int, constrained: bool = True) -> list[Evaluation]:
    """The distinct configurations the strategy evaluated, in order, at most ``budget``."""
    kernel_tuner = import_kernel_tuner()
    from constraint import FunctionConstraint
    from kernel_tuner import util

    with tempfile.TemporaryDirectory(prefix="nni-opevo-kt-") as folder:
        path = _plain_json(cache, folder, constrained)
        recorded = util.read_cache(path, open_cache=False)
        args = util.infer_args_from_cache(recorded)
        measured = {tuple(record[k] for k in recorded["tune_params_keys"]) for record in recorded["cache"].values()}
        restrictions = [FunctionConstraint(lambda *values: values in measured)] if constrained else None
        # Kernel Tuner prints its progress, and warns that a cache names no thread-block sizes.
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            results, _ = kernel_tuner.tune_kernel(**args, cache=path, restrictions=restrictions, simulation_mode=True,
                                                  strategy=spec.removeprefix(PREFIX),
                                                  strategy_options={"max_fevals": budget}, seed=seed,
                                                  quiet=True, verbose=False)
    seen: set[tuple] = set()
    out = []
    for record in results:
        params = {name: record[name] for name in cache.keys}
        key = cache.key(params)
        if key in seen:
            continue
        seen.add(key)
        out.append(Evaluation(params, float(record.get("strategy_time") or 0.0)))
        if len(out) == budget:
            break
    return out
