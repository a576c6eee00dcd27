"""What a parent and a worker server (``fork_server``) say to each other over their Unix socket.

A job goes as an 8-byte length with four descriptors attached (``FDS``), then that many bytes of
JSON: the job, the environment and the working folder its worker is to have. The server answers
with the forked waiter's pid in 8 bytes. The socket of an experiment's server is abstract, with no
file modes, so each end checks the other's uid (``peer_uid``)."""
from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

FDS = 4
"""What the parent passes with each job: the worker's stdout and stderr, the read end of its
watcher's pipe, and the write end of the pipe that carries its exit status."""
HEADER = 8
"""Bytes of a job's length, and of the pid that answers it (big-endian)."""
MODES = {True: "without-torch", False: "torch"}
"""A server's way of loading TVM, by ``worker.loads_tvm_without_torch``, as its command line names it."""


def send_job(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    """Send ``request`` with the ``FDS`` descriptors ``fds``, and return the pid the server answers."""
    payload = json.dumps(request).encode()
    socket.send_fds(sock, [len(payload).to_bytes(HEADER, "big")], fds)
    sock.sendall(payload)
    return int.from_bytes(receive_exactly(sock, HEADER), "big")


def receive_job(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The next job on ``sock`` and the descriptors that came with it. EOFError where the other
    end has closed; EOFError, OSError or ValueError where it broke off a job midway (the
    descriptors that came are closed then)."""
    header, fds, _, _ = socket.recv_fds(sock, HEADER, FDS)
    try:
        if not header:
            raise EOFError
        header += receive_exactly(sock, HEADER - len(header))
        return json.loads(receive_exactly(sock, int.from_bytes(header, "big"))), fds
    except BaseException:
        for received in fds:
            os.close(received)
        raise


def send_pid(sock: socket.socket, pid: int) -> None:
    sock.sendall(pid.to_bytes(HEADER, "big"))


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (an abstract socket has no file modes to keep others out)."""
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)
