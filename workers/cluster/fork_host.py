"""Where a node's fork server (workers/cluster/fork_server.py) comes from: a Ray
actor on that node (no CPU reserved) that starts the server as its child
process and says how a rank actor on the node is started through it.

    host = ForkServerHost.options(...).remote(socket_path)
    launch = ray.get(host.ready.remote(timeout_s))   # {"python", "launcher", "socket"}
    runtime_env = {"py_executable": py_executable(launch)}

The interpreter and the launcher's path are the node's own (a control plane
elsewhere may have other paths). The server ends with its host: it watches
its parent and exits once that is gone (workers/cluster/fork_server.py), so killing
the host actor is all it takes; the ranks it forked belong to their jobs and
live on.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Set
from typing import Any

logger = logging.getLogger(__name__)

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fork_exec.py")


def py_executable(launch: dict) -> str:
    """The runtime_env `py_executable` that starts a rank through the server."""
    return " ".join(shlex.quote(part) for part in
                    (launch["python"], "-S", launch["launcher"], launch["socket"]))


class ForkServerHost:
    """Runs one node's fork server as its child."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        if os.path.exists(socket_path):  # a predecessor's: `ready` waits for this server's own
            os.unlink(socket_path)
        root = os.path.dirname(os.path.dirname(LAUNCHER))  # the repo or site-packages holding workers/
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "workers.cluster.fork_server", socket_path], env=env)

    def ready(self, timeout_s: float) -> dict:
        """Once the server listens (its imports take seconds): how to start a
        rank through it. Raises if it exited or did not listen in time."""
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(self.socket_path):
            if self._proc.poll() is not None:
                raise RuntimeError(f"the fork server exited with {self._proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the fork server did not listen within {timeout_s:g}s")
            time.sleep(0.05)
        return {"python": sys.executable, "launcher": LAUNCHER, "socket": self.socket_path,
                "pid": self._proc.pid}


def supported() -> bool:
    """Whether this Ray starts a worker through a runtime_env `py_executable`
    (an older release would refuse the field: its ranks then start cold)."""
    from ray.runtime_env import RuntimeEnv

    return "py_executable" in getattr(RuntimeEnv, "known_fields", ())


class ForkServers:
    """One fork server host per node, kept by the rank pool's refill loop
    (workers/cluster/pool.py): `refresh(nodes)` starts what is missing and takes in
    what became ready; `runtime_env(node)` is how a rank on that node starts
    through it (None while none is ready there, or where it failed: the rank
    then starts cold, as it would without one)."""

    def __init__(self, name_prefix: str, ready_timeout_s: float = 120.0):
        self.name_prefix = name_prefix
        self.ready_timeout_s = ready_timeout_s
        self._launch: dict[str, dict | None] = {}  # node -> how to launch there (None: failed)
        self._hosts: dict[str, Any] = {}  # node -> its host actor (a Ray actor handle)
        self._starting: dict = {}  # ready ref -> node

    def host_name(self, node_id: str) -> str:
        return f"fork-server-{self.name_prefix}-{node_id[:12]}"

    def launch(self, node_id: str) -> dict | None:
        """The node's server, once ready: python, launcher, socket and pid."""
        return self._launch.get(node_id)

    def runtime_env(self, node_id: str) -> dict | None:
        launch = self.launch(node_id)
        return None if launch is None else {"py_executable": py_executable(launch)}

    def settled(self, node_id: str) -> bool:
        """Whether the node's server is ready, or has failed (ranks start cold)."""
        return node_id in self._launch

    def refresh(self, nodes: set[str], drop: Set[str] = frozenset()) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        for gone in set(self._hosts) - nodes:  # a node that left took its host with it
            left = self._hosts.pop(gone, None)
            self._launch.pop(gone, None)
            if gone in drop and left is not None:  # a draining node's: it goes once idle
                ray.kill(left, no_restart=True)
        if self._starting:
            done, _ = ray.wait(list(self._starting), num_returns=len(self._starting), timeout=0)
            for ref in done:
                node = self._starting.pop(ref)
                try:
                    self._launch[node] = ray.get(ref)
                except ray.exceptions.RayError as e:
                    logger.warning("no fork server on node %s (its ranks start cold): %s", node, e)
                    self._launch[node] = None
        for node in nodes - set(self._hosts):
            try:
                host: Any = ray.remote(ForkServerHost).options(
                    num_cpus=0, lifetime="detached", name=self.host_name(node),
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                ).remote(os.path.join(tempfile.gettempdir(), f"{self.host_name(node)}.sock"))
            except ValueError as e:  # the name is a predecessor's still, killed a moment ago
                logger.info("fork server host on node %s not started yet: %s", node, e)
                continue
            self._hosts[node] = host
            self._starting[host.ready.remote(self.ready_timeout_s)] = node

    def shutdown(self) -> None:
        import ray

        hosts, self._hosts, self._launch, self._starting = list(self._hosts.values()), {}, {}, {}
        if ray.is_initialized():
            for host in hosts:
                ray.kill(host, no_restart=True)

    def kill_leftovers(self) -> None:
        """The hosts a predecessor of this prefix left (a control plane that crashed)."""
        import ray

        prefix = self.host_name("")  # every node's host name begins so
        for name in ray.util.list_named_actors():
            if name.startswith(prefix):
                try:
                    ray.kill(ray.get_actor(name), no_restart=True)
                except ValueError:
                    continue
