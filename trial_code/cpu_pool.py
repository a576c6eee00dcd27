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

_ran_in: set[int] = set()
"""The threads of this process that have run a CPU kernel (``run``), and so have a pool."""
_stale_in: int | None = None
"""The thread whose pool a fork left without workers, or None."""
_stand_in: ThreadPoolExecutor | None = None
"""The thread of this process that runs the kernels of ``_stale_in``, once one has run."""


def _forked() -> None:
    """In the child: the thread that forked has a pool without workers if it ran a kernel (or had
    one so left by an earlier fork); no other thread or stand-in came along."""
    global _stale_in, _stand_in
    me = threading.get_ident()
    _stale_in = me if me in _ran_in or me == _stale_in else None
    _ran_in.clear()
    _stand_in = None


os.register_at_fork(after_in_child=_forked)


def run(kernel: Callable[..., Any], *arguments: Any) -> Any:
    """``kernel(*arguments)`` for a CPU kernel, on a thread whose pool has its workers."""
    global _stand_in
    me = threading.get_ident()
    if me != _stale_in:
        _ran_in.add(me)
        return kernel(*arguments)
    if _stand_in is None:
        _stand_in = ThreadPoolExecutor(1, thread_name_prefix="cpu-kernels-after-fork")
    return _stand_in.submit(run, kernel, *arguments).result()
