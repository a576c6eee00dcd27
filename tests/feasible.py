"""Draw statically feasible configurations of a template, for tests of real kernels."""
from __future__ import annotations

from typing import Any

import numpy as np

from nni_opevo import SearchSpace
from trial_code.targets import Target
from trial_code.templates import Infeasible, for_workload
from trial_code.workloads import Workload


def feasible(workload: Workload, target: Target, seed: int = 0, tries: int = 100_000) -> dict[str, Any]:
    template = for_workload(workload)
    space = SearchSpace(template.space(workload, target.kind))
    rng = np.random.default_rng(seed)
    for _ in range(tries):
        params = space.to_trial(space.sample(rng))
        try:
            template.check(workload, params, target)
            return params
        except Infeasible:
            continue
    raise AssertionError(f"no feasible configuration of {workload.name} in {tries} draws")
