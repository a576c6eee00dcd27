"""Files written where a planted link may wait: under a temporary name, then renamed into place;
and a set of files that replaces an earlier set whole (``assembled``)."""
from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def user_cache() -> str:
    """``$XDG_CACHE_HOME/nni-opevo`` (``~/.cache/nni-opevo`` by default): where the project keeps
    what it can make again (trial inputs, benchmark rows), created by whoever writes there."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nni-opevo")


def replace_file(path: str, write: Callable[[str], Any]) -> None:
    """``write(temporary)`` then rename it onto ``path``: a link planted at ``path`` is replaced,
    never followed, and a reader never sees half a file. An error writing the temporary file
    (a full disk) names ``path``, the file the user knows."""
    folder, name = os.path.split(os.path.abspath(path))
    # A name no other writer, nor one killed before its rename, has left there.
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as e:
        if e.filename not in (None, temporary):  # a source read by ``write``: its own name
            raise
        raise OSError(e.errno, e.strerror, path) from e
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def replace_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` written onto ``path`` through ``replace_file``: a kill or a full disk mid-write
    leaves the earlier file whole (a run's records, read back when it resumes)."""
    replace_file(os.fspath(path), lambda temporary: _write_new(temporary, text))


def _write_new(path: str, text: str) -> None:
    """``text`` into a file that must not exist yet, a link at ``path`` never followed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def copy_file(source: str, destination: str) -> None:
    """``source`` copied onto ``destination`` through ``replace_file``."""
    replace_file(destination, lambda temporary: shutil.copyfile(source, temporary))


class FolderBusy(RuntimeError):
    """Another process is assembling the same folder."""


@contextmanager
def assembled(folder: str) -> Iterator[str]:
    """A scratch folder beside ``folder`` to write a whole set of files into. When the block
    ends, the scratch replaces ``folder`` whole (an earlier one removed); when it raises, or is
    interrupted, the scratch is removed and ``folder`` is as it was, so a reader never finds a
    mix of two sets. An exclusive lock on ``.<name>.lock`` beside it (``fcntl``: the OS drops it
    when its holder dies) keeps two writers apart: FolderBusy for the second."""
    folder = os.path.abspath(folder)
    parent, name = os.path.split(folder)
    os.makedirs(parent, exist_ok=True)
    with open(os.path.join(parent, f".{name}.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(f"another process is writing {folder}: wait for it to finish") from None
        scratch = tempfile.mkdtemp(prefix=f".{name}.", suffix=".new", dir=parent)
        try:
            yield scratch
            # The two renames run with SIGINT and SIGTERM held back: an interrupt lands after them.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                earlier = None
                if os.path.lexists(folder):
                    earlier = scratch.removesuffix(".new") + ".old"
                    os.rename(folder, earlier)
                os.rename(scratch, folder)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            if earlier:
                shutil.rmtree(earlier, ignore_errors=True)
        finally:
            if os.path.lexists(scratch):
                shutil.rmtree(scratch, ignore_errors=True)
