"""The worker server (``python -m trial_code.fork_server``): a process that has loaded TVM and the
trial code once and forks each job's worker from itself (``forked`` is the parents' side).

For each job it forks a waiter, which leads the job's session, forks the worker into it and writes
the worker's exit status on the parent's pipe: the parent kills that session as it would a worker
program's, and reads the same exit status. A parent's own server serves one socket and exits when
it closes; an experiment's listens under an abstract name and exits once no trial has been
connected for ``--idle`` seconds.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import selectors
import signal
import socket
import sys
import warnings
from typing import Any

from . import fork_protocol, worker

WATCHED_FD = 3
"""Where the worker finds its watcher's pipe (the descriptor its watcher is started on)."""
REQUEST_TIMEOUT_S = 10.0
"""How long an experiment's server waits for the rest of a job whose first bytes came: a trial
sends it at once, and a connection stuck midway must not hold up the others."""


def serve(without_torch: bool, connection: socket.socket | None = None, listener: socket.socket | None = None,
          idle_s: float | None = None, hold: tuple[str, float] | None = None) -> None:
    """Load TVM and the trial code once (holding the device ``hold`` names, for up to its
    seconds), then fork a waiter per job: on ``connection`` until it closes, or on the connections
    ``listener`` accepts until none has been open for ``idle_s``."""
    _load(without_torch, hold)
    # Python 3.12 warns on a fork with threads running; NumPy's OpenBLAS has its pool, which it
    # stops and restarts around a fork itself (pthread_atfork).
    warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded", category=DeprecationWarning)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped as they end
    selector = selectors.DefaultSelector()
    for sock in (connection, listener):
        if sock is not None:
            selector.register(sock, selectors.EVENT_READ)
    clients = int(connection is not None)
    while True:
        ready = selector.select(None if clients else idle_s)
        if not ready:
            return
        for key, _ in ready:
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                try:
                    client, _ = listener.accept()
                except OSError:  # the trial gave up connecting meanwhile
                    continue
                if fork_protocol.peer_uid(client) != os.getuid():
                    client.close()
                    continue
                client.settimeout(REQUEST_TIMEOUT_S)
                selector.register(client, selectors.EVENT_READ)
                clients += 1
            elif not _answer(sock):
                if listener is None:
                    return  # the parent's end closed
                selector.unregister(sock)
                sock.close()
                clients -= 1


def _load(without_torch: bool, hold: tuple[str, float] | None) -> None:
    from .device_lock import DeviceBusy, exclusive
    from .targets import import_tvm

    load = worker.load_tvm_without_torch if without_torch else import_tvm
    try:
        with exclusive(*hold) if hold else contextlib.nullcontext():
            load()
    except DeviceBusy:  # a holder past any trial's limits: load beside it, as its trials' workers then wait for it
        load()
    from . import device_lock, files, kernel, measure, workloads  # noqa: F401  # what every worker imports


def _answer(sock: socket.socket) -> bool:
    """Fork a waiter for the job on ``sock`` and send its pid; False when the other end has closed
    (or broke off a job midway)."""
    try:
        request, fds = fork_protocol.receive_job(sock)
    except (EOFError, OSError, ValueError):
        return False
    pid = os.fork()
    if pid == 0:
        sock.close()
        _wait_for_worker(request, fds)
    for received in fds:
        os.close(received)
    try:
        fork_protocol.send_pid(sock, pid)
    except OSError:
        return False
    return True


def _wait_for_worker(request: dict[str, Any], fds: list[int]) -> None:
    """The waiter: lead the job's session, fork the worker into it, and report its exit status.
    It keeps nothing of the server's (its other connections, its name): a waiter lives as long
    as its worker, and must not keep an idle server's name taken."""
    events, stderr, watch_read, status = fds
    try:
        _close_all_but(fds)
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


def _close_all_but(keep: list[int]) -> None:
    """Close every descriptor above stderr but those in ``keep``."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


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


def main(argv: list[str] | None = None) -> None:
    """``--socket FD MODE``: a parent's own server on its end of a socket pair; ``--listen NAME
    MODE --idle SECONDS``: an experiment's server, under the abstract socket NAME (exiting at once
    where another has it)."""
    parser = argparse.ArgumentParser(prog="python -m trial_code.fork_server")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", type=int, help="the descriptor of the parent's socket")
    where.add_argument("--listen", help="the abstract socket's name")
    parser.add_argument("mode", choices=list(fork_protocol.MODES.values()))
    parser.add_argument("--idle", type=float, help="with --listen: seconds with no connection before exiting")
    parser.add_argument("--hold", nargs=2, metavar=("DEVICE", "SECONDS"), help="the device to hold while loading TVM")
    args = parser.parse_args(argv)
    hold = (args.hold[0], float(args.hold[1])) if args.hold else None
    without_torch = args.mode == fork_protocol.MODES[True]
    if args.socket is not None:
        return serve(without_torch, connection=socket.socket(fileno=args.socket), hold=hold)
    if args.idle is None:
        parser.error("--listen needs --idle")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + args.listen)
    except OSError:  # another trial's server has the name: the trial that started this one uses that
        return None
    listener.listen(64)
    return serve(without_torch, listener=listener, idle_s=args.idle, hold=hold)


if __name__ == "__main__":
    main()
