"""A fork server for rank processes: one process per node that has imported
torch and the engine once, and forks a fresh child for every rank process
Ray starts, so that no rank pays those imports (about 3 CPU-s each here,
most of a tiny job's cost on Ray: docs/benchmarks.md).

    python -m workers.cluster.fork_server SOCKET      # started by workers/cluster/fork_host.py

Ray starts a rank's worker process through `workers/cluster/fork_exec.py` (the
actor's runtime_env `py_executable`): that small launcher sends the server
its argv, environment, working directory and standard streams, and the
server forks a child that takes them on and runs Ray's worker entry point
exactly as Ray would have (`default_worker.py`, as `__main__`). The child is
a new process, never reused: a job's rank still gets a process of its own.

What the server guarantees, and how:
- It runs no thread (a fork copies only the forking thread; a lock another
  thread held would stay held in the child): it refuses to start if its
  imports left one, and serves from one `selectors` loop.
- A child outlives neither its launcher nor its own end: a launcher that
  dies (Ray killed it) closes its connection, and the server SIGKILLs the
  child, stopped or not; a child that exits has its status sent back, and
  the launcher exits the same way, so Ray sees its worker process end as
  the worker did.
- Ray is not imported here (its constants read the environment at import):
  the child imports it with the worker's own environment.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
from dataclasses import dataclass

from workers.cluster.fork_exec import encode, recv_exact

MAX_REQUEST = 1 << 20  # argv + environment: far below this
STREAMS = 3  # stdin, stdout, stderr: sent with every request
REQUEST_TIMEOUT_S = 10.0  # for a launcher to send its whole request
PARENT_CHECK_S = 1.0  # how often the server looks whether its host is still there


def preload() -> None:
    """What every rank imports (workers/engine/preload.py): done once here,
    shared by every child."""
    from workers.engine.preload import import_engine, import_torch

    import_torch()
    import_engine()


@dataclass
class Launch:
    """One rank process to become: what its launcher sent."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]

    def become(self) -> None:
        """In the child: take on the launcher's streams, environment and
        arguments, then run Ray's worker entry point as its `__main__`
        (SystemExit from it ends this process as it would have ended Ray's)."""
        for target, fd in enumerate(self.fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(self.cwd)
        os.environ.clear()
        os.environ.update(self.env)
        script = self.argv[0]
        sys.argv = list(self.argv)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


def _recv_request(conn: socket.socket) -> Launch:
    """The launcher's one request: a length-prefixed JSON body with its
    three standard streams attached (SCM_RIGHTS)."""
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(STREAMS * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if len(data) < 4 or len(fds) != STREAMS:
        for fd in fds:
            os.close(fd)
        raise ValueError(f"a launch request is a 4-byte length with {STREAMS} streams attached")
    (size,) = struct.unpack("!I", data)
    if size > MAX_REQUEST:
        raise ValueError(f"a launch request of {size} bytes")
    body = recv_exact(conn, size)
    if body is None:
        raise ValueError("the launcher hung up mid-request")
    request = json.loads(body)
    return Launch(argv=list(request["argv"]), env=dict(request["env"]), cwd=str(request["cwd"]),
                  fds=list(fds))


class ForkServer:
    """Accepts launch requests on a Unix socket and forks a child for each."""

    def __init__(self, path: str):
        self.path = path
        # child pid -> its launcher's connection, while both are there (the connection's
        # selector key carries the pid back)
        self._children: dict[int, socket.socket] = {}

    def serve(self) -> Launch:
        """Serve until a fork: returns in the child (what it is to become);
        the server itself never returns (it exits once its parent has gone)."""
        if threading.active_count() != 1:
            raise RuntimeError(f"the fork server runs {threading.active_count()} threads: "
                               "a fork would copy only one")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(self.path):
            os.unlink(self.path)  # a predecessor's: it is gone, or it would hold the lock
        listener.bind(self.path + ".tmp")
        os.chmod(self.path + ".tmp", 0o600)
        listener.listen(64)
        os.rename(self.path + ".tmp", self.path)  # launchers connect only once it listens
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a wake-up, read through wake_r
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, "accept")
        selector.register(wake_r, selectors.EVENT_READ, "child")
        parent = os.getppid()
        print(f"fork server {os.getpid()} listening on {self.path}", flush=True)
        while True:
            ready = selector.select(timeout=PARENT_CHECK_S)
            if os.getppid() != parent:  # the host is gone: so is this server (not its children)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                raise SystemExit(0)
            for key, _ in ready:
                if key.data == "accept":
                    conn, _ = listener.accept()
                    launch = self._launch(conn, selector)
                    if launch is not None:  # the child: leave the server's world behind
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        for fd in (wake_r, wake_w):
                            os.close(fd)
                        for other in (listener, *self._children.values()):
                            other.close()
                        selector.close()
                        return launch
                elif key.data == "child":
                    os.read(wake_r, 4096)
                    self._reap(selector)
                else:  # a launcher's connection (data: its child's pid): readable only at its end
                    self._launcher_gone(key.data, selector)

    def _launch(self, conn: socket.socket, selector: selectors.BaseSelector) -> Launch | None:
        conn.settimeout(REQUEST_TIMEOUT_S)  # a launcher that stalls mid-request stalls no other
        try:
            launch = _recv_request(conn)
            conn.settimeout(None)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"fork server: a bad launch request: {e}", file=sys.stderr, flush=True)
            conn.close()
            return None
        pid = os.fork()
        if pid == 0:
            conn.close()
            os.setpgid(0, 0)  # its own process group, as a worker Ray started would be
            return launch
        for fd in launch.fds:
            os.close(fd)
        self._children[pid] = conn
        conn.sendall(encode({"pid": pid}))
        selector.register(conn, selectors.EVENT_READ, pid)
        return None

    def _reap(self, selector: selectors.BaseSelector) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self._children.pop(pid, None)
            if conn is None:  # its launcher went first (_launcher_gone)
                continue
            selector.unregister(conn)
            with contextlib.suppress(OSError):  # the launcher may be ending too
                conn.sendall(encode({"exit": os.waitstatus_to_exitcode(status)}))
            conn.close()

    def _launcher_gone(self, pid: int, selector: selectors.BaseSelector) -> None:
        """A launcher's connection became readable: it sends nothing after
        its request, so this is its end (Ray killed it): so is its child's,
        which `_reap` then reaps with no one to tell."""
        conn = self._children.pop(pid)
        selector.unregister(conn)
        conn.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m workers.cluster.fork_server SOCKET")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # a rank sets its own (torch.set_num_threads)
    preload()
    launch = ForkServer(argv[0]).serve()
    launch.become()


if __name__ == "__main__":
    main(sys.argv[1:])
