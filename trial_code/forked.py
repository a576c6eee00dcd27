"""Workers forked from a process that has TVM loaded already, for a parent that evaluates many
configurations (the GPU campaign, ``nni-opevo benchmark``, export's re-measurement).

A worker started as a program (``python -m trial_code.worker``) pays for a Python start and
TVM's import before it builds anything: 1.2-1.4 s of CPU on the development machine (with the
ml_dtypes ``setup.py`` pins), more than the build of a GEMM tile, and most of a trial's time in
the GPU campaign's throughput stage.
Within ``workers()``, ``evaluate`` asks a server instead: one process per way of loading TVM
(``worker.load_tvm_without_torch`` for CPU kernels and builds, as it comes for GPU kernels),
started on first use, that has imported TVM and the trial code, and forks each worker from itself.

What a worker guarantees is kept: it runs in a session of its own (killed with its compilers),
its events come on a pipe, its stderr goes to the parent's file, and its watcher kills that
session when the parent ends (``worker``). The server forks a waiter per job, which leads the
job's session, forks the worker and writes its exit status on a pipe of the parent's: the parent
kills the session as it would a worker it started itself, and reads the same exit status.

The server needs nothing from the parent but its socket: it lives in a session of its own (a ^C
at the terminal reaches the parent, which ends its workers) and exits when the socket closes,
with the ``workers()`` block or with the parent, however that ends. Python's own forkserver
(``multiprocessing``) is not used: it imports the parent's main module into every child (a
harness command's, 2.6 s with NNI), and reports exit codes through its own Process objects.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any, BinaryIO

from . import worker

FDS = 4
"""What the parent passes with each job: the worker's stdout and stderr, the read end of its
watcher's pipe, and the write end of the pipe that carries its exit status."""
WATCHED_FD = 3
"""Where the worker finds its watcher's pipe (the descriptor its watcher is started on)."""
REPLY_TIMEOUT_S = 120.0
"""How long the parent waits for the server to say it forked: milliseconds, after its first
answer, which waits for its import of TVM. Past it, the server is taken for broken and the
evaluation starts its worker as a program."""

SWITCH = "NNI_OPEVO_FORK"
"""``NNI_OPEVO_FORK=0``: every worker a program of its own, ``workers()`` included (where forking
fails on a machine and starting programs does not: the GPU call script sets it when the
preflight's forked kernel fails)."""

_servers: dict[bool, _Server] | None = None
_lock = threading.Lock()


@contextlib.contextmanager
def workers() -> Iterator[None]:
    """Within this block, ``evaluate`` forks its workers from servers that have TVM loaded; the
    servers end with it. Nothing changes under ``NNI_OPEVO_FORK=0``."""
    global _servers
    if os.environ.get(SWITCH) == "0":
        yield
        return
    with _lock:
        outer, _servers = _servers, {} if _servers is None else _servers
    try:
        yield
    finally:
        if outer is None:
            with _lock:
                servers, _servers = _servers or {}, None
            for server in servers.values():
                server.close()


def active() -> bool:
    """Whether ``evaluate`` forks its workers here (within ``workers()``, and not switched off)."""
    return _servers is not None


class Forked:
    """A forked worker, read as ``evaluate`` reads a ``subprocess.Popen``: ``pid`` names its
    session, ``stdout`` carries its events, ``poll`` and ``wait`` give its exit status (negative: the
    signal that ended it; -SIGKILL when its session was killed before it could be read)."""

    stdin = None  # the job went with the fork

    def __init__(self, pid: int, stdout: BinaryIO, status: int) -> None:
        self.pid, self.stdout, self._status, self.returncode = pid, stdout, status, None

    def poll(self) -> int | None:
        return self.returncode if self.returncode is not None else self._read(0)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self._read(timeout) is None:
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def _read(self, timeout: float | None) -> int | None:
        ready, _, _ = select.select([self._status], [], [], timeout)
        if not ready:
            return None
        text = os.read(self._status, 64)
        os.close(self._status)
        self.returncode = int(text) if text.strip() else -signal.SIGKILL
        self.stdout.close()
        return self.returncode


def start(job: dict[str, Any], stderr: int, watch_read: int, env: dict[str, str]) -> Forked | None:
    """The worker of ``job`` forked by a server, or None outside ``workers()`` or where no server
    answers (the caller then starts the worker as a program)."""
    with _lock:
        if _servers is None:
            return None
        without_torch = worker.loads_tvm_without_torch(job)
        server = _servers.get(without_torch)
        if server is None or not server.alive():
            if server is not None:
                server.close()
            server = _servers[without_torch] = _Server(without_torch, env)
    return server.fork(job, stderr, watch_read, env)


class _Server:
    def __init__(self, without_torch: bool, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair()
        self.socket = ours
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trial_code.forked", str(theirs.fileno()), "without-torch" if without_torch else "torch"],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            start_new_session=True)
        theirs.close()
        ours.settimeout(REPLY_TIMEOUT_S)

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, job: dict[str, Any], stderr: int, watch_read: int, env: dict[str, str]) -> Forked | None:
        events_read, events_write = os.pipe()
        status_read, status_write = os.pipe()
        payload = json.dumps({"job": job, "env": env, "cwd": os.getcwd()}).encode()
        try:
            with self.lock:
                socket.send_fds(self.socket, [len(payload).to_bytes(8, "big")],
                                [events_write, stderr, watch_read, status_write])
                self.socket.sendall(payload)
                pid = int.from_bytes(_receive_exactly(self.socket, 8), "big")
        except (OSError, EOFError):  # the server died or hangs: the caller starts the worker itself
            self.close()
            for fd in (events_read, status_read):
                os.close(fd)
            return None
        finally:
            os.close(events_write)
            os.close(status_write)
        return Forked(pid, os.fdopen(events_read, "rb", buffering=0), status_read)

    def close(self) -> None:
        self.socket.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def serve(fd: int, without_torch: bool) -> None:
    """The server: load TVM and the trial code once, then fork a waiter per job until the parent's
    end of the socket closes."""
    from .targets import import_tvm

    if without_torch:
        worker.load_tvm_without_torch()
    else:
        import_tvm()
    from . import device_lock, files, kernel, measure, workloads  # noqa: F401  # what every worker imports

    # Python 3.12 warns on a fork with threads running; NumPy's OpenBLAS has its pool, which it
    # stops and restarts around a fork itself (pthread_atfork).
    warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded", category=DeprecationWarning)
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped as they end
    while True:
        try:
            header, fds, _, _ = socket.recv_fds(sock, 8, FDS)
            if not header:
                return
            header += _receive_exactly(sock, 8 - len(header))
            request = json.loads(_receive_exactly(sock, int.from_bytes(header, "big")))
        except (EOFError, OSError):
            return
        pid = os.fork()
        if pid == 0:
            sock.close()
            _wait_for_worker(request, fds)
        for received in fds:
            os.close(received)
        sock.sendall(pid.to_bytes(8, "big"))


def _wait_for_worker(request: dict[str, Any], fds: list[int]) -> None:
    """The waiter: lead the job's session, fork the worker into it, and report its exit status."""
    events, stderr, watch_read, status = fds
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            os.close(status)
            _become_worker(request, events, stderr, watch_read)
        for fd in (events, stderr, watch_read):
            os.close(fd)
        _, code = os.waitpid(pid, 0)
        os.write(status, f"{os.waitstatus_to_exitcode(code)}\n".encode())
    finally:
        os._exit(0)


def _become_worker(request: dict[str, Any], events: int, stderr: int, watch_read: int) -> None:
    code = 0
    try:
        # Copies above the targets first, so that no target overwrites a descriptor still to be moved.
        sources = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (os.open(os.devnull, os.O_RDONLY), events, stderr,
                                                               watch_read)]
        for fd, target in zip(sources, (0, 1, 2, WATCHED_FD)):
            os.dup2(fd, target)  # inheritable: the watcher is a program the worker starts on WATCHED_FD
        os.closerange(WATCHED_FD + 1, os.sysconf("SC_OPEN_MAX"))
        os.environ.clear()  # the parent's, as a worker program would inherit them
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        worker.serve(request["job"], WATCHED_FD)
    except BaseException:  # noqa: BLE001  # the exit status says it; the traceback is on stderr
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2] == "without-torch")
