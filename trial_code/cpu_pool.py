"""CPU kernels in a process forked from one that ran them (``run``).

Each thread that runs a parallel CPU kernel gets a pool of worker threads of its own from TVM's
runtime, started at its first call. A fork copies the thread that forked and none of its
workers, so in the child that thread's pool hands each call's work to workers that do not exist
and waits for them, spinning, forever: a program that calls a loaded kernel and then forks
(``multiprocessing``'s default on Linux, a PyTorch DataLoader's workers, a pre-forking server)
hung in the child. There, the thread that forked runs its kernels on a thread of the child's
own, whose pool TVM starts afresh, rather than through TVM's restart of the pool
(``ResetThreadPool``), which joins the copied workers' threads (the child has none, and glibc
hands their descriptors to the child's next threads) and takes their queues' locks (one of them
may have held one at the fork).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_thread = threading.local()
"""Per thread of this process: ``ran`` once it has run a CPU kernel (``run``; it has a pool), and
``stale`` once a fork left that pool without workers (in the child, the thread that forked)."""
_stand_in: ThreadPoolExecutor | None = None
"""The thread of this process that runs the kernels of the stale thread, once one has run."""


def _forked() -> None:
    """In the child, on the thread that forked: its pool has no workers if it ran a kernel (or had
    one so left by an earlier fork); no stand-in came along."""
    global _stand_in
    _thread.stale = getattr(_thread, "ran", False) or getattr(_thread, "stale", False)
    _stand_in = None


os.register_at_fork(after_in_child=_forked)


def run(kernel: Callable[..., Any], *arguments: Any) -> Any:
    """``kernel(*arguments)`` for a CPU kernel, on a thread whose pool has its workers."""
    global _stand_in
    if not getattr(_thread, "stale", False):
        _thread.ran = True
        return kernel(*arguments)
    if _stand_in is None:
        _stand_in = ThreadPoolExecutor(1, thread_name_prefix="cpu-kernels-after-fork")
    return _stand_in.submit(run, kernel, *arguments).result()
