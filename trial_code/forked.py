"""Workers forked from a process that has TVM loaded already: for a parent that evaluates many
configurations (the GPU campaign, ``nni-opevo benchmark``, export's re-measurement), and for the
trials of one NNI experiment, which share the experiment's servers.

A worker started as a program (``python -m trial_code.worker``) pays for a Python start and
TVM's import before it builds anything: 1.2-1.4 s of CPU on the development machine (with the
ml_dtypes ``setup.py`` pins), more than the build of a GEMM tile, and most of a trial's time in
the GPU campaign's throughput stage; on the CPU a trial pays it holding the device (``worker.run``).
Within ``workers()``, ``evaluate`` asks a server instead (``fork_server``, spoken to as
``fork_protocol`` says): one process per way of loading TVM (``worker.load_tvm_without_torch`` for
CPU kernels and builds, as it comes for GPU kernels), started on first use, that has imported TVM
and the trial code, and forks each worker from itself. This module is the parents' side.

What a worker guarantees is kept: it runs in a session of its own (killed with its compilers),
its events come on a pipe, its stderr goes to the parent's file, and its watcher kills that
session when the parent ends (``worker``). The server forks a waiter per job, which leads the
job's session, forks the worker and writes its exit status on a pipe of the parent's: the parent
kills the session as it would a worker it started itself, and reads the same exit status.

A parent's own server (``workers()``) needs nothing from the parent but its socket: it lives in a
session of its own (a ^C at the terminal reaches the parent, which ends its workers) and exits
when the socket closes, with the ``workers()`` block or with the parent, however that ends.
An experiment's servers (``workers(shared=<experiment id>)``, what ``trial`` uses under NNI) are
found by name, an abstract Unix socket of this user's (the other end's uid checked both ways)
named by the experiment and by how this process imports the trial code; the first trial that
finds none starts one, and a server exits ``IDLE_S`` after its last trial's connection closed,
so a stopped or killed experiment leaves nothing running for longer. Python's own forkserver
(``multiprocessing``) is not used: it imports the parent's main module into every child (a
harness command's, 2.6 s with NNI), and reports exit codes through its own Process objects.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

from . import fork_protocol, worker

REPLY_TIMEOUT_S = 120.0
"""How long the parent waits for the server to say it forked: milliseconds, after its first
answer, which waits for its import of TVM. Past it, the server is taken for broken and the
evaluation starts its worker as a program."""
IDLE_S = 15.0
"""How long an experiment's server waits with no trial connected before it exits: well past
NNI's gap between one trial's end and the next one's start (a second or two), so a run of trials
keeps one server; short, so that a stopped experiment leaves nothing running for long."""
BIND_TIMEOUT_S = 30.0
"""How long a trial that started an experiment's server waits for it to take its name (a Python
start, before it imports TVM); past it the trial starts its worker as a program."""

SWITCH = "NNI_OPEVO_FORK"
"""``NNI_OPEVO_FORK=0``: every worker a program of its own, ``workers()`` included (where forking
fails on a machine and starting programs does not: the GPU call script sets it when the
preflight's forked kernel fails)."""

_servers: dict[bool, _Server] | None = None
_shared: str | None = None
_lock = threading.Lock()


@contextlib.contextmanager
def workers(shared: str | None = None) -> Iterator[None]:
    """Within this block, ``evaluate`` forks its workers from servers that have TVM loaded.
    Without ``shared`` the servers are this process's own and end with the block; with it, they
    are those of the experiment it names, shared with its other trial processes, and the block
    ends only this process's connections to them. Nothing changes under ``NNI_OPEVO_FORK=0``."""
    global _servers, _shared
    if os.environ.get(SWITCH) == "0":
        yield
        return
    with _lock:
        outer = _servers
        if outer is None:
            _servers, _shared = {}, shared
    try:
        yield
    finally:
        if outer is None:
            with _lock:
                servers, _servers, _shared = _servers or {}, None, None
            for server in servers.values():
                server.close()


def experiment_workers() -> contextlib.AbstractContextManager[None]:
    """For an NNI trial: its experiment's servers (``workers(shared=NNI_EXP_ID)``). Outside an
    experiment nothing is forked, as a server of its own would cost one evaluation what it saves;
    nor off Linux, whose abstract sockets and SO_PEERCRED the servers' names and checks are."""
    experiment = os.environ.get("NNI_EXP_ID")
    return workers(shared=experiment) if experiment and sys.platform == "linux" else contextlib.nullcontext()


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
        for _ in range(2 if _shared else 1):
            server = _servers.get(without_torch)
            if server is None or not server.alive():
                if server is not None:
                    server.close()
                server = _Server.private(without_torch, env) if _shared is None else \
                    _Server.shared(_shared, without_torch, job, env)
                if server is None:
                    return None
                _servers[without_torch] = server
            forked = server.fork(job, stderr, watch_read, env)
            if forked is not None:
                return forked
            del _servers[without_torch]  # closed by its failed fork
            if server.timed_out:
                break  # a server that hangs: the worker a program, not another wait
            # else an experiment's server that idled out as this trial connected: another is started
    return None


class _Server:
    """A connection to a server: ``process`` is the server where this process started it as its own."""

    def __init__(self, sock: socket.socket, process: subprocess.Popen | None, timeout: float) -> None:
        self.socket, self.process, self.lock = sock, process, threading.Lock()
        self.timed_out = False
        """Whether a fork failed because the server did not answer in time (not because it had gone)."""
        sock.settimeout(timeout)

    @classmethod
    def private(cls, without_torch: bool, env: dict[str, str]) -> _Server:
        ours, theirs = socket.socketpair()
        process = subprocess.Popen(
            [sys.executable, "-m", "trial_code.fork_server", "--socket", str(theirs.fileno()),
             fork_protocol.MODES[without_torch]],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            start_new_session=True)
        theirs.close()
        return cls(ours, process, REPLY_TIMEOUT_S)

    @classmethod
    def shared(cls, experiment: str, without_torch: bool, job: dict[str, Any], env: dict[str, str]) -> _Server | None:
        """A connection to the experiment's server, started here if none answers (holding the
        device while it loads TVM where ``job``'s worker would: ``worker.run``); None where none
        can be had, or the one there is someone else's."""
        address = _address(experiment, without_torch, env)
        sock, timeout = _dial(address), REPLY_TIMEOUT_S
        if sock is None:
            command = [sys.executable, "-m", "trial_code.fork_server", "--listen", address[1:],
                       fork_protocol.MODES[without_torch], "--idle", str(IDLE_S)]
            target = job["target"]
            if target["kind"] == "llvm" and not job.get("build_only"):
                command += ["--hold", target["device"], str(job["lock_timeout"])]
                timeout += job["lock_timeout"]
            # Its stdio are not the trial's: NNI's files, which a server outliving the trial must not hold.
            starting = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + BIND_TIMEOUT_S
            while sock is None and starting.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
                sock = _dial(address)
            sock = sock or _dial(address)  # it exited: another trial's server took the name first
            if sock is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(starting.pid, signal.SIGKILL)
                return None
        if fork_protocol.peer_uid(sock) != os.getuid():
            sock.close()
            return None
        return cls(sock, None, timeout)

    def alive(self) -> bool:
        """Whether it may answer: a server of this process's own that has not exited (an
        experiment's that has shows as a failed ``fork``)."""
        return self.process is None or self.process.poll() is None

    def fork(self, job: dict[str, Any], stderr: int, watch_read: int, env: dict[str, str]) -> Forked | None:
        events_read, events_write = os.pipe()
        status_read, status_write = os.pipe()
        request = {"job": job, "env": env, "cwd": os.getcwd()}
        try:
            with self.lock:
                pid = fork_protocol.send_job(self.socket, request, [events_write, stderr, watch_read, status_write])
                self.socket.settimeout(REPLY_TIMEOUT_S)
        except (OSError, EOFError) as e:  # the server died or hangs: the caller starts the worker itself
            self.timed_out = isinstance(e, TimeoutError)
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
        if self.process is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()



def _address(experiment: str, without_torch: bool, env: dict[str, str]) -> str:
    """The abstract socket of ``experiment``'s server for this way of loading TVM: per user, and
    per Python, working folder and module path, which decide what a forked worker imports."""
    key = json.dumps([experiment, without_torch, sys.executable, os.getcwd(), env.get("PYTHONPATH", "")])
    return f"\0nni-opevo-forked-{os.getuid()}-{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def _dial(address: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        return None
    return sock
