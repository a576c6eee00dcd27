"""Operator templates, one per family, looked up by workload family."""
from __future__ import annotations

from ..workloads import Workload
from .base import Infeasible, NotInSpace, Template
from .conv2d import Conv2dTemplate
from .gemm import GemmTemplate

_TEMPLATES: list[Template] = [GemmTemplate(), Conv2dTemplate()]


def for_workload(workload: Workload) -> Template:
    for template in _TEMPLATES:
        if workload.family in template.families:
            return template
    raise ValueError(f"no template for operator family {workload.family!r}")


__all__ = ["Infeasible", "NotInSpace", "Template", "for_workload"]
