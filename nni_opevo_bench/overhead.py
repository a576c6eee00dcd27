"""Tuner overhead benchmark: time per proposal and per result, and memory, against history size.

Prints figures; it asserts nothing (timings belong here, not in timed tests). It feeds the
tuner the calls NNI's dispatcher makes for one trial at a time (``generate_parameters`` then
``receive_trial_result`` and ``trial_end``) and reports, once the history holds each
checkpoint's number of results, the median and p99 of the next ``--window`` calls and the
traced Python memory the tuner holds. The space is

* ``synthetic`` (default): the tiled-MatMul landscape's factor and perm parameters, well over
  10^7 configurations, with its objective;
* ``MM1``: MM1's CUDA space as the shipped experiment has it, with the trial code's static
  check as the constraint (H100 limits: most of the space refused), so the time includes the
  constraint hook's; results are pseudo-random values of the configuration.

    python -m nni_opevo_bench.overhead                         # every tuner, 1k and 10k
    python -m nni_opevo_bench.overhead --tuner opevo nose --checkpoints 1000 10000 50000
    python -m nni_opevo_bench.overhead --space MM1 --tuner opevo opevo-paper

A learner's cost comes in bursts (AutoTVM refits and anneals once per 64 results, NoSE breeds
once per 30 proposals), so the median shows the common call and the p99 and the mean the
bursts: the mean is the overhead per trial that adds to an experiment's wall-clock time.
"""
from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from nni.tuner import Tuner

from nni_opevo import SearchSpace, catalog
from nni_opevo.testing.landscapes import tiled_matmul
from trial_code import cli
from trial_code.cli import add_number, bounded

TUNERS = list(catalog.CATALOG)


def _one_trial(tuner: Tuner, parameter_id: int, objective: Callable[[dict[str, Any]], float]) -> tuple[float, float]:
    """Seconds spent in (generate_parameters, receive_trial_result + trial_end) for one trial."""
    start = time.perf_counter()
    params = tuner.generate_parameters(parameter_id)
    proposed = time.perf_counter()
    value = objective(params)
    received = time.perf_counter()
    tuner.receive_trial_result(parameter_id, params, value)
    tuner.trial_end(parameter_id, True)
    return proposed - start, time.perf_counter() - received


def problem(name: str, seed: int) -> tuple[dict[str, Any], Callable[[dict[str, Any]], float], dict[str, Any], str]:
    """(space, objective, constraint classArgs, description) of ``--space``."""
    if name == "synthetic":
        space, objective = tiled_matmul(1024, 1024, 1024, seed=seed)
        return space, objective, {}, "tiled-MatMul 1024^3"
    from trial_code import constraint, workloads
    from trial_code.templates import for_workload

    workload = workloads.lookup(name)
    space = for_workload(workload).space(workload, "cuda")

    def objective(params: dict[str, Any]) -> float:  # a value per configuration: cheap, and no two alike
        return float(np.random.default_rng(abs(hash(json.dumps(params, sort_keys=True))) % 2**32).random())

    return space, objective, constraint.class_args(workload, "cuda"), f"{name} CUDA with the static-check constraint"


def measure(name: str, checkpoints: list[int], window: int, seed: int, space_name: str = "synthetic") -> None:
    space, objective, constraint_args, description = problem(space_name, seed)
    print(f"tuner {name}: {description}, a space of {SearchSpace(space).size:.3g} configurations")
    print(f"{'history':>8} {'propose med':>12} {'propose p99':>12} {'report med':>11} {'report p99':>11}"
          f" {'both med':>9} {'both p99':>9} {'both mean':>10} {'memory':>9} {'per result':>10}")
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tuner = catalog.build(name, seed, extra=constraint_args)
    tuner.update_search_space(space)
    done = 0
    for checkpoint in checkpoints:
        while done < checkpoint:
            _one_trial(tuner, done, objective)
            done += 1
        held = tracemalloc.get_traced_memory()[0] - base
        # Time the next window with tracing off: tracemalloc slows allocation-heavy code.
        tracemalloc.stop()
        timings = np.array([_one_trial(tuner, done + i, objective) for i in range(window)]) * 1e3
        done += window
        both = timings.sum(axis=1)
        print(f"{checkpoint:>8} {np.median(timings[:, 0]):>10.3f}ms {np.percentile(timings[:, 0], 99):>10.3f}ms"
              f" {np.median(timings[:, 1]):>9.3f}ms {np.percentile(timings[:, 1], 99):>9.3f}ms"
              f" {np.median(both):>7.3f}ms {np.percentile(both, 99):>7.3f}ms {np.mean(both):>8.3f}ms"
              f" {held / 2**20:>7.1f}MB {held / checkpoint:>8.0f} B")
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0] - held
    tracemalloc.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    parser.add_argument("--tuner", nargs="+", default=TUNERS, help="catalog names (nni_opevo.catalog)")
    parser.add_argument("--checkpoints", type=bounded(int, 1, 10_000_000), nargs="+", default=[1000, 10000],
                        help="history sizes (results received) at which to measure")
    add_number(parser, "--window", int, 1, 1_000_000, "calls timed at each checkpoint", default=500)
    add_number(parser, "--seed", int, 0, 2**32 - 1, "the tuners' seed", default=0)
    parser.add_argument("--space", default="synthetic", help="synthetic (default) or a named workload, e.g. MM1")
    args = parser.parse_args(argv)
    for name in args.tuner:
        measure(name, sorted(args.checkpoints), args.window, args.seed, args.space)


if __name__ == "__main__":
    main()
