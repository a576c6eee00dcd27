"""Make a fatal tuner error end the experiment at once, with its message where the user looks.

NNI 3.0's dispatcher catches an exception raised while it handles a command, stops its
worker thread, and waits for the next command, which for ``Initialize`` never comes: the
experiment then sits in RUNNING forever with no trial and no error. So a tuner running inside
NNI's dispatcher reports the error to the NNI manager itself, as NNI does when a tuner cannot
even be built (``MsgDispatcherBase.report_error``: the manager sets the experiment to ERROR and
shows the message in ``nnictl`` and the web UI), writes it to the dispatcher log and stderr,
and ends the dispatcher process. Anywhere else (in-process use, tests) the exception is
simply raised.
"""
from __future__ import annotations

import functools
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_logger = logging.getLogger(__name__)

REPORT_GRACE_S = 2.0
"""Seconds for the error report to reach the NNI manager before the dispatcher process ends."""


def in_nni_dispatcher() -> bool:
    return "NNI_TUNER_COMMAND_CHANNEL" in os.environ


def _dispatcher() -> Any:
    """The running NNI dispatcher (NNI keeps it in a local variable of ``nni.__main__``)."""
    try:
        from nni.runtime.msg_dispatcher_base import MsgDispatcherBase
    except ImportError:
        return None
    return next((o for o in gc.get_objects() if isinstance(o, MsgDispatcherBase)), None)


def fail(error: BaseException) -> None:
    """Raise ``error``, or, inside NNI's dispatcher, report it to NNI and end the process."""
    if not in_nni_dispatcher():
        raise error
    message = f"{type(error).__name__}: {error}"
    _logger.error("%s", message)
    print(f"nni-opevo: {message}", file=sys.stderr, flush=True)
    dispatcher = _dispatcher()
    if dispatcher is not None:
        dispatcher.report_error(f"nni-opevo tuner stopped the experiment: {message}")
        time.sleep(REPORT_GRACE_S)  # the report goes out on the channel's own thread; let it leave
    for handler in logging.getLogger().handlers + logging.getLogger("nni").handlers:
        handler.flush()
    os._exit(1)


def guard(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a tuner method NNI calls: any exception but NoMoreTrialError (NNI's own signal) goes
    through ``fail``, so inside NNI it ends the experiment with its message instead of leaving
    it stuck. A classArg error deferred at construction (``defer``) is raised at the first call."""
    from nni import NoMoreTrialError

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            deferred = getattr(self, "_deferred_error", None)
            if deferred is not None:
                raise deferred
            return method(self, *args, **kwargs)
        except NoMoreTrialError:
            raise
        except Exception as e:
            fail(e)
            raise

    return guarded


def parse_or_defer(tuner: Any, parse: Callable[[], T], placeholder: Callable[[], T]) -> T:
    """A tuner's construction from its classArgs: ``parse()``, whose ValueError names the bad
    classArg; inside NNI's dispatcher that error is kept for the first call (``defer``) and
    ``placeholder()`` stands in meanwhile."""
    try:
        return parse()
    except ValueError as e:
        if not defer(tuner, e):
            raise
        return placeholder()


def defer(tuner: Any, error: Exception) -> bool:
    """Inside NNI's dispatcher, keep a construction error for the first call (the dispatcher,
    which reports it to NNI, does not exist yet while NNI builds the tuner); whether deferred."""
    if not in_nni_dispatcher():
        return False
    tuner._deferred_error = error
    return True
