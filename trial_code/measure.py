"""Check a built kernel against a float64 reference, then time it.

Inputs are seeded random numbers; the output buffer is poisoned with NaN first, so a kernel
that skips part of its output is caught even where it is not sampled. Values are compared on
sampled output elements (always including the first and last) against float64 sums computed
from the inputs, with a tolerance scaled by each element's sum of absolute products; this
keeps verification cheap for shapes whose full reference would take minutes (C1 is 35 GFLOP).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

from .targets import Target
from .templates import for_workload
from .templates.base import sample_indices
from .workloads import Workload

SAMPLES = 1024
# float32 accumulation error is far below this; a wrong tile misses whole partial sums.
RELATIVE_TOLERANCE = 1e-3


class WrongAnswer(Exception):
    """The kernel's output differs from the reference (status WRONG_ANSWER)."""


@dataclass
class Timing:
    latency_s: float  # median over repeats
    repeats_s: list[float]


def device_of(target: Target) -> Any:
    return tvm.cuda(0) if target.kind == "cuda" else tvm.cpu(0)


def arguments(workload: Workload, device: Any, seed: int) -> tuple[list[np.ndarray], list[Any]]:
    """Random inputs (host copies and device tensors) and a NaN-poisoned output tensor."""
    rng = np.random.default_rng(seed)
    tensors = for_workload(workload).compute(workload)
    host = [(rng.random([int(d) for d in t.shape], dtype=np.float32) * 2 - 1) for t in tensors[:-1]]
    out_shape = [int(d) for d in tensors[-1].shape]
    output = np.full(out_shape, np.nan, dtype=np.float32)
    return host, [tvm.runtime.tensor(a, device) for a in host] + [tvm.runtime.tensor(output, device)]


def verify(workload: Workload, function: Any, host: list[np.ndarray], args: list[Any], device: Any,
           seed: int) -> None:
    """Run once and compare; raises WrongAnswer with the worst element's numbers."""
    function(*args)
    device.sync()
    out = args[-1].numpy()
    unwritten = int(np.count_nonzero(~np.isfinite(out)))
    if unwritten:
        raise WrongAnswer(f"{unwritten} of {out.size} output elements were not written (still NaN) or not finite")
    index = sample_indices(out.shape, SAMPLES, np.random.default_rng(seed + 1))
    expected, magnitude = for_workload(workload).reference(workload, host, index)
    got = out[tuple(index.T)].astype(np.float64)
    error = np.abs(got - expected)
    allowed = RELATIVE_TOLERANCE * magnitude + 1e-6
    worst = int(np.argmax(error - allowed))
    if error[worst] > allowed[worst]:
        raise WrongAnswer(f"output{tuple(int(i) for i in index[worst])} = {got[worst]:.6g}, "
                          f"reference {expected[worst]:.6g} (|error| {error[worst]:.3g} > {allowed[worst]:.3g})")


def time_kernel(executable_module: Any, args: list[Any], device: Any, repeat: int, min_repeat_ms: int) -> Timing:
    """TVM's time evaluator: each repeat runs the kernel enough times to last ``min_repeat_ms``."""
    evaluator = executable_module.time_evaluator("main", device, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    result = evaluator(*args)
    return Timing(float(np.median(result.results)), [float(r) for r in result.results])
