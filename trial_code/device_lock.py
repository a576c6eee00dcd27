"""One measurement at a time per device, across trial processes.

Concurrent trials build in parallel but must not time kernels on the same GPU (or CPU) at the
same time. An advisory ``flock`` on a per-device file does this without a server, and the OS
releases it when a killed trial's process dies, so a hung kernel never blocks the others.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def lock_path(device: str) -> str:
    folder = os.environ.get("NNI_OPEVO_LOCK_DIR") or os.path.join(tempfile.gettempdir(), "nni_opevo_locks")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{device}.lock")


@contextmanager
def exclusive(device: str) -> Iterator[None]:
    with open(lock_path(device), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
