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

Looking for one trial's configuration is bounded in time: while the constraint refuses, the
tuner logs how many it refused every ``LOG_EVERY_S`` seconds, and after ``PROPOSAL_S`` it gives
up (``ConstraintGaveUp``, which ends the experiment as NNI ends one whose space is exhausted)
with the count and the constraint's time per call in the message.
"""
from __future__ import annotations

import importlib
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from nni import NoMoreTrialError

SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
PROPOSAL_S = 300.0
"""Seconds one proposal may spend asking the constraint before the tuner gives up."""
LOG_EVERY_S = 15.0
"""Seconds between two log lines while one proposal is still looking."""

_logger = logging.getLogger(__name__)


class ConstraintError(RuntimeError):
    """The constraint function raised, or returned something other than a bool."""


class ConstraintGaveUp(NoMoreTrialError):
    """One proposal asked the constraint for ``PROPOSAL_S`` seconds and found nothing it accepts."""


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
        self._clock: tuple[float, int, int] | None = None  # a proposal's start: time, calls, refusals
        self._next_log = 0.0

    @contextmanager
    def proposing(self) -> Iterator[None]:
        """The span of one proposal, whose asking is bounded (see the module docstring)."""
        self._clock, self._next_log = (time.monotonic(), self.calls, self.rejected), LOG_EVERY_S
        try:
            yield
        finally:
            self._clock = None

    def _keep_time(self) -> None:
        if self._clock is None:
            return
        started, calls, rejected = self._clock
        elapsed = time.monotonic() - started
        if elapsed < self._next_log:
            return
        asked, refused = self.calls - calls, self.rejected - rejected
        if elapsed >= PROPOSAL_S:
            message = (f"the constraint {self.spec} refused {refused} of {asked} candidates in {elapsed:.0f} s while "
                       f"looking for one trial's configuration ({1e3 * elapsed / max(asked, 1):.1f} ms a call): "
                       "the search space is almost all infeasible, or the constraint too slow; narrow the space")
            _logger.warning(message)
            raise ConstraintGaveUp(message)
        _logger.info("still looking for one trial's configuration: the constraint %s refused %d of %d candidates "
                     "in %.0f s (giving up after %.0f s)", self.spec, refused, asked, elapsed, PROPOSAL_S)
        self._next_log += LOG_EVERY_S

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
            self._keep_time()
        return bool(answer)


def load(spec: str | None, args: dict[str, Any]) -> Constraint | None:
    if spec is None:
        if args:
            raise ValueError("classArg 'constraint_args' is given but no 'constraint' to pass them to")
        return None
    return Constraint(spec, args)
