"""Kernel Tuner cache files (brute-forced GPU tuning spaces) as search spaces with a constraint.

A cache (``../shared/data/benchmark_hub/README.md``; the public FAIR benchmark hub holds many,
plain JSON or gzip-compressed) records every configuration of a real GPU kernel that passed the
kernel's restrictions, each compiled and timed on real hardware. Read as a tuning problem:

* the search space has one parameter per tunable: ``discrete`` when all its values are
  numbers (the topology then follows their order), ``choice`` otherwise;
* a configuration missing from the cache broke the kernel's restrictions: ``feasible`` says so,
  and is what a tuner's ``constraint`` classArg names (``nni_opevo_bench.tuning_cache:feasible`` with
  ``constraint_args: {cache: <path>}``), so restricted configurations never cost an evaluation,
  as Kernel Tuner's own strategies are told them; a tuner run without the constraint (a user with
  no static check) pays an evaluation for one instead, as long as ``restricted_seconds`` (the
  kernel is compiled before it fails);
* a recorded failure (a string such as "InvalidConfig" where the time should be) is a failed
  trial;
* the score is GFLOP/s where the cache records it, else 1/time (every configuration of a cache
  does the same work, so the two rank alike); ``optimum`` is the best score of the whole cache,
  so a tuner's result reads as a fraction of the brute-forced optimum.

A cache is named by its folder and file (``gemm/RTX_3090``): the hub's files repeat their names
across kernels.
"""
from __future__ import annotations

import functools
import gzip
import json
import math
import os
import statistics
from dataclasses import dataclass
from typing import Any

Key = tuple
"""A configuration as the tuple of its parameter values, in the cache's key order."""


@dataclass(frozen=True)
class Entry:
    score: float | None  # None: a recorded failure
    seconds: float  # compile + verify + benchmark, what measuring it cost
    status: str
    compile_seconds: float


@dataclass(frozen=True)
class TuningCache:
    path: str
    name: str
    device: str
    kernel: str
    keys: tuple[str, ...]
    values: dict[str, list[Any]]
    entries: dict[Key, Entry]

    @property
    def space(self) -> dict[str, Any]:
        """The NNI search space (see the module docstring)."""
        space = {}
        for name in self.keys:
            options = self.values[name]
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in options)
            space[name] = {"_type": "discrete" if numeric else "choice", "_value": list(options)}
        return space

    def key(self, params: dict[str, Any]) -> Key:
        return tuple(params[name] for name in self.keys)

    def feasible(self, params: dict[str, Any]) -> bool:
        """Whether the configuration passed the kernel's restrictions (it is in the cache)."""
        return self.key(params) in self.entries

    @functools.cached_property
    def optimum(self) -> float:
        return max(e.score for e in self.entries.values() if e.score is not None)

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.values.values())

    @functools.cached_property
    def restricted_seconds(self) -> float:
        """What trying a restricted configuration costs: the median compile time of the cache's
        configurations (the kernel is built before its launch fails)."""
        return statistics.median(e.compile_seconds for e in self.entries.values())


def _entry(record: dict[str, Any]) -> Entry:
    seconds = sum(float(record.get(k) or 0.0) for k in ("compile_time", "verification_time", "benchmark_time")) / 1e3
    compile_seconds = float(record.get("compile_time") or 0.0) / 1e3
    time = record.get("time")
    if not isinstance(time, (int, float)) or isinstance(time, bool) or not math.isfinite(time) or time <= 0:
        return Entry(None, seconds, str(time), compile_seconds)
    gflops = record.get("GFLOP/s")
    score = float(gflops) if isinstance(gflops, (int, float)) and not isinstance(gflops, bool) else 1.0 / float(time)
    return Entry(score, seconds, "NO_ERROR", compile_seconds)


def cache_name(path: str) -> str:
    """A cache's name, ``<folder>/<file>`` without ``.json(.gz)``: the folder names the kernel
    (``gemm/RTX_2080_Ti``, ``convolution_kt/RTX_2080_Ti``), as ``../shared/data/benchmark_hub`` does."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return f"{folder}/{os.path.basename(path).removesuffix('.gz').removesuffix('.json')}"


@functools.cache
def load(path: str) -> TuningCache:
    """Read a cache file (``.json`` or ``.json.gz``); ValueError naming what is missing."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        data = json.load(handle)
    for field in ("tune_params_keys", "tune_params", "cache"):
        if field not in data:
            raise ValueError(f"{path} is not a Kernel Tuner cache: it has no '{field}'")
    keys = tuple(data["tune_params_keys"])
    entries = {}
    for record in data["cache"].values():
        entries[tuple(record[k] for k in keys)] = _entry(record)
    return TuningCache(path, cache_name(path), str(data.get("device_name") or ""), str(data.get("kernel_name") or ""), keys,
                       {k: list(data["tune_params"][k]) for k in keys}, entries)


def feasible(params: dict[str, Any], cache: str) -> bool:
    """The constraint hook for a cache: ``constraint: nni_opevo_bench.tuning_cache:feasible`` with
    ``constraint_args: {cache: <path>}``."""
    return load(cache).feasible(params)
