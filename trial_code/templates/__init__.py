"""Operator templates: one per built-in family, and a user's operator (family ``operator``),
whose module names either a function returning an ``operators.Operator`` (the template is then
derived from its computation, ``derived``) or a ``Template`` subclass of its own."""
from __future__ import annotations

import functools
import inspect

from ..workloads import Workload
from .base import Infeasible, NotInSpace, Template
from .conv2d import Conv2dTemplate
from .derived import DerivedTemplate
from .gemm import GemmTemplate

_TEMPLATES: list[Template] = [GemmTemplate(), Conv2dTemplate()]


def for_workload(workload: Workload) -> Template:
    if workload.family == "operator":
        return _operator_template(workload.shape["operator"])
    for template in _TEMPLATES:
        if workload.family in template.families:
            return template
    raise ValueError(f"no template for operator family {workload.family!r}")


def loads_tvm(workload: Workload) -> bool:
    """Whether ``workload``'s template loads TVM, as a user's operator does (its module builds TE
    computations): a process that stays light (a trial's parent) leaves its check to the worker."""
    return workload.family == "operator"


@functools.cache
def _operator_template(spec: str) -> Template:
    """A hand-written template the spec names (a ``Template`` subclass or instance), else the
    template derived from the operator function it names."""
    from ..operators import resolve

    found = resolve(spec)
    if inspect.isclass(found) and issubclass(found, Template):
        try:
            return found()
        except Exception as e:
            raise ValueError(f"operator {spec}: the template {found.__name__}() raised {type(e).__name__}: {e}"
                             ) from None
    if isinstance(found, Template):
        return found
    return DerivedTemplate(spec)


__all__ = ["DerivedTemplate", "Infeasible", "NotInSpace", "Template", "for_workload", "loads_tvm"]
