"""The launcher Ray runs as a rank's worker process (its runtime_env
`py_executable`): it has the node's fork server (workers/cluster/fork_server.py)
fork the real worker, then stands in for it until it ends.

    python -S workers/cluster/fork_exec.py SOCKET default_worker.py ARGS...

Standard library only, run as a file with `-S`: it starts in tens of
milliseconds. It sends the server its argv (Ray's worker command), its
environment (Ray's, for this worker), its working directory and its
standard streams; it forwards SIGTERM, SIGINT and SIGHUP to the worker,
and exits as the worker exited (the same code, or the same signal). Where
no server answers, it execs the worker itself (`sys.executable ARGS`): a
rank then starts cold, as it would without the server.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


# The wire, both ways (workers/cluster/fork_server.py uses these too): a 4-byte big-endian length, then
# that many bytes of JSON. The request carries the three standard streams as well (SCM_RIGHTS).


def encode(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack("!I", len(body)) + body


def recv_message(conn: socket.socket) -> dict | None:
    """One message, or None at the other side's end."""
    head = recv_exact(conn, 4)
    if head is None:
        return None
    (size,) = struct.unpack("!I", head)
    body = recv_exact(conn, size)
    return None if body is None else json.loads(body)


def recv_exact(conn: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None if the other side ends first."""
    data = b""
    while len(data) < size:
        try:
            chunk = conn.recv(size - len(data))
        except InterruptedError:
            continue
        if not chunk:
            return None
        data += chunk
    return data


def _exec_cold(args: list[str]) -> None:
    # -S was ours, not the worker's: the worker runs with its site-packages.
    os.execv(sys.executable, [sys.executable, *args])


def _exit_if_told(conn: socket.socket) -> None:
    """Exit as the worker did once the server's message says how; return if
    the server ended without one."""
    message = recv_message(conn)
    if message is not None and "exit" in message:
        _exit_like(int(message["exit"]))


def _exit_like(code: int) -> None:
    """End as the worker ended: by the same signal (negative), else its code."""
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def main(argv: list[str]) -> None:
    socket_path, worker_args = argv[0], argv[1:]
    # Handlers first: the worker may run (and Ray may signal it) before the
    # server's reply names it. A signal before then waits for the pid.
    worker: list[int] = []
    pending: list[int] = []

    def forward(signum, _frame):
        if not worker:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker[0], signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path)
        request = encode({"argv": worker_args, "env": dict(os.environ), "cwd": os.getcwd()})
        streams = array.array("i", [0, 1, 2])
        conn.sendmsg([request[:4]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, streams)])
        conn.sendall(request[4:])
        reply = recv_message(conn)
    except OSError:
        reply = None
    if not reply or "pid" not in reply:
        conn.close()
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        if pending:  # told to stop before any worker ran: end as a cold one would have
            _exit_like(-pending[0])
        _exec_cold(worker_args)
        return
    pid = int(reply["pid"])
    worker.append(pid)
    for held in pending:
        forward(held, None)
    # Until the server says how the worker ended; if the server itself goes
    # first, until the worker's pidfd says it has gone (its status unknown).
    pidfd = os.pidfd_open(pid)
    watched: list[socket.socket | int] = [conn, pidfd]
    while True:
        try:
            readable, _, _ = select.select(watched, [], [])
        except InterruptedError:
            continue
        if conn in readable:
            _exit_if_told(conn)
            watched.remove(conn)  # the server is gone: the pidfd tells the end
        if pidfd in readable:
            # Gone: its status follows from the server within moments, if it is there.
            if conn in watched and select.select([conn], [], [], 2.0)[0]:
                _exit_if_told(conn)
            os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
