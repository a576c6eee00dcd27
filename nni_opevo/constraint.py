"""The constraint hook: which configurations may be measured at all, asked before NNI spends a
trial on one.

A kernel's restrictions (threads per block, shared memory, divisibility of tiles ...) rule out
much of a search space; measuring such a configuration costs a whole trial to learn what
arithmetic could tell in microseconds. Every tuner of this package therefore takes
``constraint: "package.module:function"`` (importable where the tuner runs: NNI puts the
tuner's ``codeDirectory`` on ``sys.path``) and ``constraint_args: {...}``; the function receives
the parameters exactly as a trial would (``nni.get_next_parameter()``) and the args as keyword
arguments, and returns True when the configuration may be measured.

A configuration it refuses never becomes a trial: the tuner counts it as a failed
configuration (it learns from it as from a failure, and never proposes it again). A
constraint that raises, or returns something other than a bool, is a bug in the experiment:
the tuner stops with that error (``ConstraintError``), which ends the experiment visibly.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np

SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class ConstraintError(RuntimeError):
    """The constraint function raised, or returned something other than a bool."""


def spec_rule(name: str, value: Any) -> str | None:
    """classArg rule: None, or ``"package.module:function"``."""
    if value is None:
        return None
    if not isinstance(value, str) or not SPEC.match(value):
        raise ValueError(f"classArg '{name}' must be \"package.module:function\" (or null), got {value!r}")
    return value


class Constraint:
    """A loaded constraint: ``constraint(params) -> bool`` (see the module docstring)."""

    def __init__(self, spec: str, args: dict[str, Any]) -> None:
        module_name, _, function_name = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # ImportError, or the module failing as it loads
            raise ValueError(f"classArg 'constraint': cannot import {module_name!r} ({type(e).__name__}: {e}); it "
                             "must be importable where the tuner runs (NNI adds the tuner's codeDirectory)") from e
        function = getattr(module, function_name, None)
        if not callable(function):
            raise ValueError(f"classArg 'constraint': {module_name!r} has no function {function_name!r}")
        self.spec, self.args = spec, dict(args)
        self.function: Callable[..., Any] = function
        self.calls = 0
        self.rejected = 0

    def __call__(self, params: dict[str, Any]) -> bool:
        self.calls += 1
        try:
            answer = self.function(params, **self.args)
        except Exception as e:
            raise ConstraintError(f"the constraint {self.spec} raised {type(e).__name__}: {e} "
                                  f"on parameters {params!r}") from e
        if not isinstance(answer, (bool, np.bool_)):
            raise ConstraintError(f"the constraint {self.spec} must return True or False, returned {answer!r} "
                                  f"on parameters {params!r}")
        if not answer:
            self.rejected += 1
        return bool(answer)


def load(spec: str | None, args: dict[str, Any]) -> Constraint | None:
    if spec is None:
        if args:
            raise ValueError("classArg 'constraint_args' is given but no 'constraint' to pass them to")
        return None
    return Constraint(spec, args)
