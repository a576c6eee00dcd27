"""Draw statically feasible configurations of a template, for tests of real kernels."""
from __future__ import annotations

from typing import Any

from trial_code.constraint import draw
from trial_code.targets import Target
from trial_code.workloads import Workload


def feasible(workload: Workload, target: Target, seed: int = 0, tries: int = 100_000) -> dict[str, Any]:
    params, _ = draw(workload, target, seed, tries=tries)
    if params is None:
        raise AssertionError(f"no feasible configuration of {workload.name} in {tries} draws")
    return params
