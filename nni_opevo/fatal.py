"""Make a fatal tuner error end the experiment visibly under NNI 3.0.

NNI 3.0's dispatcher catches an exception raised while it handles a command, stops its
worker thread, and waits for the next command, which for ``Initialize`` never comes: the
experiment then sits in RUNNING forever with no trial and no error. The NNI manager does
notice the dispatcher process ending ("Dispatcher stream error, tuner may have crashed"),
sets the experiment to ERROR, and its web UI opens the dispatcher log. So a tuner running
inside NNI's dispatcher logs the error there and ends the process; anywhere else (in-process
use, tests) the exception is simply raised.
"""
from __future__ import annotations

import logging
import os
import sys

_logger = logging.getLogger(__name__)


def in_nni_dispatcher() -> bool:
    return "NNI_TUNER_COMMAND_CHANNEL" in os.environ


def fail(error: Exception) -> None:
    """Raise ``error``, or, inside NNI's dispatcher, log it and end the dispatcher process."""
    if not in_nni_dispatcher():
        raise error
    _logger.error("%s: %s", type(error).__name__, error)
    print(f"nni-opevo: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    for handler in logging.getLogger().handlers + logging.getLogger("nni").handlers:
        handler.flush()
    os._exit(1)
