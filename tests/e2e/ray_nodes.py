"""A Ray cluster of `ray start` processes on this machine, for the tests that
need one of their own (a head, worker nodes; token auth on, with a token of
the cluster's own): tests/e2e/test_multinode.py, the replicas' shared head
(tests/e2e/replica_harness.py). Each node runs in a session of its own and is
stopped by its own processes, never by `ray stop` (which would end every Ray
process on the machine, the suite's own cluster too)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workers.engine.distributed import free_port

RAY = str(Path(sys.executable).with_name("ray"))
NODE_START_TIMEOUT_S = 60
STOP_GRACE_S = 3  # what `ray start --block` gets to stop its node on SIGTERM, before SIGKILL
# The GCS declares a silent node dead after ~3 s instead of Ray's default ~30 s.
FAST_HEALTH_CHECKS = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


# -- processes ------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


def _descendants(root: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live process under `root`, root included."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _proc_stat(int(entry))):
            children.setdefault(stat[0], []).append((int(entry), stat[1]))
    found, todo = [], [root]
    if stat := _proc_stat(root):
        found.append((root, stat[1]))
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def _kill_all(processes: list[tuple[int, int]]) -> None:
    """SIGKILL each process that is still the one recorded (same start time)."""
    for pid, started in processes:
        stat = _proc_stat(pid)
        if stat and stat[1] == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1 and (stat := _proc_stat(pid)):
        chain.append(pid)
        pid = stat[0]
    return chain


# -- the cluster ----------------------------------------------------------------


def _labels(labels: dict[str, str] | None) -> list[str]:
    """`ray start`'s argument for these node labels (none for none)."""
    return [f"--labels={','.join(f'{k}={v}' for k, v in labels.items())}"] if labels else []


class RayNode:
    def __init__(self, name: str, proc: subprocess.Popen, log: Path):
        self.name, self.proc, self.log = name, proc, log
        self.processes: list[tuple[int, int]] = []  # what it had started, seen last

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def remember_processes(self) -> None:
        seen = {pid for pid, _ in self.processes}
        self.processes += [p for p in _descendants(self.pid) if p[0] not in seen]


class RayNodes:
    """A head and worker nodes, each a `ray start --block` in a session of its own,
    with its own temp dir under a short path (Ray's unix sockets need one)."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="brg-mn-", dir="/tmp"))
        self.address: str | None = None  # the head's, once `start_head` has run
        self._node_ids: dict[str, str] = {}  # worker nodes' Ray ids by name, once asked
        self.nodes: dict[str, RayNode] = {}
        # Token auth on, with a token of its own (none need be in ~/.ray): every
        # node and every driver of this cluster gets it in RAY_AUTH_TOKEN.
        self.token = secrets.token_hex(32)
        self.env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token,
                        **FAST_HEALTH_CHECKS)

    def start_head(self, num_cpus: int = 0, dashboard: bool = False,
                   labels: dict[str, str] | None = None) -> RayNode:
        """The head; `dashboard` runs Ray's dashboard on loopback (its state API);
        `labels`: its Ray node labels."""
        def args() -> list[str]:  # fresh ports on each try
            port = free_port()
            self.address = f"127.0.0.1:{port}"
            return ["--head", f"--port={port}", f"--num-cpus={num_cpus}",
                    f"--include-dashboard={str(dashboard).lower()}", "--dashboard-host=127.0.0.1",
                    f"--dashboard-port={free_port()}", *_labels(labels)]

        node = self._spawn("head", args())
        self._wait_started(node, retry=args)
        return self.nodes["head"]

    def add_workers(self, num_cpus: dict[str, int],
                    labels: dict[str, dict[str, str]] | None = None) -> list[RayNode]:
        """Worker nodes {name: CPUs}, started together; each has a resource of
        its own, `brigade_{name}`, and the Ray node labels `labels[name]`."""
        def args(name: str) -> list[str]:
            given = (labels or {}).get(name)
            return [f"--address={self.address}", f"--num-cpus={num_cpus[name]}",
                    f"--resources={json.dumps({f'brigade_{name}': 1})}", *_labels(given)]

        nodes = [self._spawn(name, args(name)) for name in num_cpus]
        for node in nodes:
            self._wait_started(node, retry=lambda name=node.name: args(name))
        return [self.nodes[name] for name in num_cpus]

    def _spawn(self, name: str, args: list[str]) -> RayNode:
        # A temp dir per node: nodes sharing one session dir race for the same
        # socket names when they start together, and their raylets abort.
        log = self.root / f"{name}.log"
        cmd = [RAY, "start", "--block", "--disable-usage-stats", "--include-log-monitor=false",
               f"--dashboard-agent-listen-port={free_port()}", f"--temp-dir={self.root / name}",
               "--object-store-memory=100000000", *args]
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env,
                                    start_new_session=True)
        node = self.nodes[name] = RayNode(name, proc, log)
        return node

    def _wait_started(self, node: RayNode, retry, tries: int = 3) -> None:
        """Wait for the node to run; one that exits while starting (a port
        chosen for it was taken meanwhile) is started again with `retry()`'s
        arguments, up to `tries` times in all."""
        for attempt in range(1, tries + 1):
            deadline = time.monotonic() + NODE_START_TIMEOUT_S
            while b"will now block" not in node.log.read_bytes():
                tail = node.log.read_text(errors="replace")[-3000:]
                if not node.alive():
                    break
                assert time.monotonic() < deadline, f"ray node {node.name} did not start:\n{tail}"
                time.sleep(0.2)
            else:
                node.remember_processes()
                return
            assert attempt < tries, f"ray node {node.name} exited {tries} times:\n{tail}"
            node = self._spawn(node.name, retry())

    def driver(self, code: str, timeout_s: float = 120) -> Any:
        """Run `code` in a driver of its own joined to this cluster (a pytest
        process may be the session cluster's driver already, and a process
        joins one cluster only); what it leaves in `result` comes back as JSON."""
        script = (f"import json, ray\nray.init(address={self.address!r}, "
                  f"namespace='brigade-tests-nodes', logging_level='ERROR')\n"
                  f"result = None\n{code}\nprint('RESULT ' + json.dumps(result))\n")
        done = subprocess.run([sys.executable, "-c", script], env=self.env, capture_output=True,
                              text=True, timeout=timeout_s)
        assert done.returncode == 0, f"the driver failed:\n{done.stderr[-3000:]}"
        line = next(ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("RESULT "))
        return json.loads(line.removeprefix("RESULT "))

    def node_ids(self) -> dict[str, str]:
        """Each worker node's Ray node id, by name (asked of the cluster by a
        driver of its own: its `brigade_{name}` resource names it)."""
        return self.driver("result = {k[8:]: n['NodeID'] for n in ray.nodes() if n['Alive'] "
                           "for k in n['Resources'] if k.startswith('brigade_')}")

    def node_id(self, name: str) -> str:
        """Worker node `name`'s Ray id (the cluster asked once, again for a node it did not have)."""
        if name not in self._node_ids:
            self._node_ids = self.node_ids()
        return self._node_ids[name]

    def drain(self, name: str, *, deadline_s: int, message: str,
              reason: str = "DRAIN_NODE_REASON_PREEMPTION") -> str:
        """`ray drain-node` of worker node `name`, as an operator or the
        autoscaler asks it; the node's id."""
        node_id = self.node_id(name)
        subprocess.run([RAY, "drain-node", f"--address={self.address}", f"--node-id={node_id}",
                        f"--reason={reason}", f"--reason-message={message}",
                        f"--deadline-remaining-seconds={deadline_s}"],
                       env=self.env, capture_output=True, text=True, timeout=60, check=True)
        return node_id

    def node_of(self, pid: int) -> str | None:
        """The name of the node whose `ray start` `pid` runs under."""
        by_pid = {node.pid: name for name, node in self.nodes.items()}
        return next((by_pid[p] for p in _ancestors(pid) if p in by_pid), None)

    def kill(self, name: str) -> None:
        """Lose a node at once: SIGKILL its `ray start`, raylet, agents and workers
        (the raylet puts each worker in a process group of its own)."""
        node = self.nodes[name]
        node.remember_processes()
        _kill_all(node.processes)
        node.proc.wait(timeout=10)

    def stop(self) -> None:
        """Stop every node, the workers together first, the head last; SIGKILL
        whatever is left after STOP_GRACE_S. (A node whose ranks have just been
        cancelled, or that was drained, was seen to take the whole 20 s it was
        once given, one node after another: 20-40 s of a module's teardown.)"""
        workers = [node for name, node in self.nodes.items() if name != "head"]
        head = [self.nodes["head"]] if "head" in self.nodes else []
        for batch in (workers, head):
            for node in batch:
                node.remember_processes()
                if node.alive():
                    node.proc.send_signal(signal.SIGTERM)  # `ray start --block` stops its node
            deadline = time.monotonic() + STOP_GRACE_S
            for node in batch:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            for node in batch:
                _kill_all(node.processes)
                if node.alive():
                    node.proc.kill()
                    node.proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def leftovers(self, within_s: float = 0) -> list[int]:
        """Pids of processes the nodes started that are still alive (after `stop`,
        once `within_s` has passed: a SIGKILLed process is there until the kernel has
        torn it down, which takes a while for a large one on a loaded machine)."""
        deadline = time.monotonic() + within_s
        while True:
            alive = [pid for node in self.nodes.values() for pid, started in node.processes
                     if (stat := _proc_stat(pid)) and stat[1] == started]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.2)
