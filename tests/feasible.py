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


def runs_and_matches(workload: Workload, target: Target, seed: int) -> None:
    """An admitted configuration of ``workload`` (drawn with ``seed``) built, run on ``target`` and
    checked against its reference: NO_ERROR, at a positive speed."""
    from trial_code.evaluate import Limits, evaluate

    params, _ = draw(workload, target, seed)
    result = evaluate(workload, params, target, Limits(repeat=2, min_repeat_ms=5))
    assert result.status.name == "NO_ERROR" and result.tflops > 0, (params, result.error)


def exported(workload: Workload, target: Target, path: str) -> Any:
    """The first admitted configuration of ``workload`` built for this CPU into the library at
    ``path``, loaded as a program loads it (``trial_code.library.Kernel``)."""
    from trial_code import kernel, library

    host = kernel.for_host(target)
    params, _ = draw(workload, target, 0)
    kernel.build(kernel.scheduled(workload, params, host), host).export_library(path)
    return library.load(path, workload, "cpu")
