"""Code run in a child process forked from the test's thread, bounded in time."""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable


def in_a_child(work: Callable[[], bool], limit_s: float = 60.0) -> str:
    """``work`` run in a child forked from this thread: "right", "wrong", the error it raised, or
    "hung" where the child had not ended within ``limit_s`` (then killed)."""
    answers = ("right", "wrong")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of pytest's runs here, whatever happens
        code = 2
        try:
            os.close(read)
            code = answers.index("right" if work() else "wrong")
        except BaseException as e:  # noqa: B036 - reported to the parent, whatever it is
            os.write(write, f"{type(e).__name__}: {e}".encode()[:4000])
        finally:
            os._exit(code)
    os.close(write)
    reaped = False
    with os.fdopen(read, "rb") as said:
        try:
            deadline = time.monotonic() + limit_s
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    reaped, code = True, os.waitstatus_to_exitcode(status)
                    return answers[code] if code in (0, 1) else said.read().decode() or f"exit status {code}"
                time.sleep(0.05)
            return "hung"
        finally:
            if not reaped:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
