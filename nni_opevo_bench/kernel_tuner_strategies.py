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
import functools
import gzip
import io
import itertools
import json
import os
import random
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .tuning_cache import TuningCache, load

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


@dataclass(frozen=True)
class _Replay:
    """What every run of one cache in one mode shares: the text of Kernel Tuner's plain ``.json`` copy
    (unconstrained, with every restricted configuration of the grid recorded as invalid), the
    arguments Kernel Tuner infers from it, and the configurations the cache measured."""
    text: str
    args: dict[str, Any]
    measured: frozenset[tuple]


@functools.lru_cache(maxsize=2)
def _replay(path: str, constrained: bool) -> _Replay:
    """Built once per process for a cache file and mode (a hub job runs every strategy and seed of one),
    since writing and re-reading the grid takes seconds a run, more than most strategies spend searching."""
    from kernel_tuner import util

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as source:
        text = source.read()
    if not constrained:
        cache = load(path)
        data = json.loads(text)
        for values in itertools.product(*(cache.values[k] for k in cache.keys)):
            if values not in cache.entries:
                data["cache"][",".join(map(str, values))] = {
                    **dict(zip(cache.keys, values)), "time": "InvalidConfig", "compile_time": 0.0,
                    "verification_time": 0.0, "benchmark_time": 0.0, "strategy_time": 0.0, "framework_time": 0.0}
        text = json.dumps(data)
    with tempfile.TemporaryDirectory(prefix="nni-opevo-kt-") as folder:
        copy_path = os.path.join(folder, "cache.json")
        with open(copy_path, "w") as copy:
            copy.write(text)
        recorded = util.read_cache(copy_path, open_cache=False)
    measured = frozenset(tuple(record[k] for k in recorded["tune_params_keys"]) for record in recorded["cache"].values())
    return _Replay(text, util.infer_args_from_cache(recorded), measured)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Kernel Tuner accepts ``tune_kernel(seed=...)`` but its strategies never read it: they draw from
    Python's and NumPy's global generators. Seeding both for the run (and putting their state back
    after) makes a run repeat exactly, as every other tuner's does."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def run(cache: TuningCache, spec: str, seed: int, budget: int, constrained: bool = True) -> list[Evaluation]:
    """The distinct configurations the strategy evaluated, in order, at most ``budget``."""
    kernel_tuner = import_kernel_tuner()
    from constraint import FunctionConstraint

    replay = _replay(cache.path, constrained)
    restrictions = [FunctionConstraint(lambda *values: values in replay.measured)] if constrained else None
    # Kernel Tuner reads only a plain ``.json`` cache, and appends to one it opens: a private copy a run.
    with tempfile.TemporaryDirectory(prefix="nni-opevo-kt-") as folder:
        path = os.path.join(folder, "cache.json")
        with open(path, "w") as copy:
            copy.write(replay.text)
        # Kernel Tuner prints its progress, and warns that a cache names no thread-block sizes.
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), _seeded(seed):
            warnings.simplefilter("ignore", UserWarning)
            results, _ = kernel_tuner.tune_kernel(**replay.args, cache=path, restrictions=restrictions,
                                                  simulation_mode=True, strategy=spec.removeprefix(PREFIX),
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
