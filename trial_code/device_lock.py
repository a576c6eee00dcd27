"""One measurement at a time per device, across trial processes, with a bounded wait.

Concurrent trials build in parallel but must not time kernels on the same GPU (or CPU) at the
same time. An advisory ``flock`` on a per-device file does this without a server, and the OS
releases it when a killed holder's process dies, so a hung kernel never blocks the others
for longer than its own trial lives.

Waiting is bounded per holder: ``exclusive(device, timeout)`` raises ``DeviceBusy`` when one
other process keeps the device that long (another user's job, a stuck process), and the trial
reports it as a failure instead of waiting forever. Each holder writes a token of its own into the
lock file, so a waiter sees the device pass from one trial to the next and starts its wait again:
behind a queue of trials that each measure within their limits it waits its turn, however many
trials are in flight.

The lock files live in a folder of the user's own, created with mode 0700 and checked to be
a real directory the user owns (not a link planted in a shared ``/tmp``), and each file is
opened without following links: ``$NNI_OPEVO_LOCK_DIR`` when set (then the same checks apply;
point several users' experiments at one shared device through it on purpose), else
``$XDG_RUNTIME_DIR/nni-opevo-locks``, else ``<tmp>/nni-opevo-locks-<uid>``.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POLL_S = 0.05
TOKEN_BYTES = 64
"""A holder's token (its pid and when it took the device) fits in this many bytes."""


class DeviceBusy(RuntimeError):
    """The device's measurement lock stayed taken for the whole wait."""


class UnsafeLockFolder(RuntimeError):
    """The lock folder is a link, not a directory, or someone else's: refusing to use it."""


def lock_folder() -> str:
    override = os.environ.get("NNI_OPEVO_LOCK_DIR")
    if override:
        return own_folder(override)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(runtime, "nni-opevo-locks") if runtime and os.path.isdir(runtime) else \
        os.path.join(tempfile.gettempdir(), f"nni-opevo-locks-{os.getuid()}")
    return own_folder(base)


def own_folder(folder: str) -> str:
    """``folder``, created with mode 0700 if missing; UnsafeLockFolder when it is a link, not a
    directory, someone else's (a folder planted in a shared place), or writable by others (who
    could plant links or files in it)."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeLockFolder(f"the folder {folder} is a link or not a directory; remove it (for the device locks, "
                               "or set NNI_OPEVO_LOCK_DIR to a folder of your own)")
    if info.st_uid != os.getuid():
        raise UnsafeLockFolder(f"the folder {folder} belongs to user {info.st_uid}, not to you ({os.getuid()}); for "
                               "the device locks set NNI_OPEVO_LOCK_DIR to a folder of your own")
    if info.st_mode & 0o022:
        raise UnsafeLockFolder(f"the folder {folder} may be written by others (mode {stat.S_IMODE(info.st_mode):04o}): "
                               f"`chmod go-w {folder}`, or use another")
    return folder


def lock_path(device: str) -> str:
    if not device or "/" in device or device.startswith("."):
        raise ValueError(f"device name {device!r} cannot name a lock file")
    return os.path.join(lock_folder(), f"{device}.lock")


@contextmanager
def exclusive(device: str, timeout: float | None = None,
              on_turn: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold ``device``'s measurement lock; ``DeviceBusy`` when one other holder keeps it for
    ``timeout`` seconds of waiting (None: wait as long as it takes). ``on_turn`` is called each
    time the device passes to another holder while this one waits (its wait starts again)."""
    fd = os.open(lock_path(device), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        holder = os.pread(fd, TOKEN_BYTES, 0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if deadline is not None else 0))
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                now = os.pread(fd, TOKEN_BYTES, 0)
                if now != holder:  # another holder's turn: the wait is per holder
                    holder, deadline = now, time.monotonic() + timeout
                    if on_turn is not None:
                        on_turn()
                elif time.monotonic() >= deadline:
                    raise DeviceBusy(f"device {device} stayed busy (its measurement lock {lock_path(device)} held "
                                     f"by one other process) for {timeout:g} s") from None
                time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {time.time_ns()}".encode(), 0)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
