"""The worker's watcher (``python -m trial_code.watcher FD``): kills the worker's whole session
when its trial ends.

The worker (``worker``) runs in a session of its own, so that its compilers die with it; the
trial holds the only writer of a pipe whose reader is this process, forked by the worker into
that session. When the trial ends, however (NNI's SIGINT and SIGKILL, ``kill -9``, an error),
the kernel closes the pipe, this process's read returns, and it sends SIGKILL to the session:
the worker, whatever native code it is in, its compilers, and itself. It needs nothing from
the worker, which may be inside an LLVM build or a kernel that never returns.
"""
from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    fd = int(sys.argv[1])
    os.closerange(0, fd)  # no copy of the worker's pipes, which the trial waits to see closed
    os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
    try:
        while os.read(fd, 4096):
            pass
    finally:
        os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    main()
