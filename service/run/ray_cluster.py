"""The control plane's connection to Ray: the one module of the service that
talks to Ray about the cluster. It joins (or starts) the cluster, and answers
the cluster questions: capacity, live and lost nodes, whether a job could
ever fit. Worker groups themselves are `workers.cluster.group`'s.

With `BRIGADE_RAY_ADDRESS` it joins that cluster. Without, it runs a Ray head
on this machine as a process of its own (`ray start --head --block` in a new
session), recorded in `{data_dir}/ray.json`: a control plane that crashes
leaves the head, and the jobs' rank actors, running, and its successor joins
the same head and reattaches to them. A graceful stop stops the head too.
Ray's token auth stays on: the driver joins with `RAY_AUTH_MODE=token`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import ray

from workers.cluster import nodes
from workers.cluster.errors import CapacityError
from workers.cluster.node_view import ClusterUnreachableError, NodeView
from workers.cluster.placement import bundle_of, check_capacity
from workers.cluster.pool import find_assigned
from workers.cluster.rank_info import RankInfo
from workers.engine.distributed import LOOPBACK, free_port
from workers.schema.flavor import flavor_of_node, matches

logger = logging.getLogger(__name__)
NAMESPACE = "brigade"
START_TIMEOUT_S = 60.0
START_ATTEMPTS = 3  # a head that exits while starting (a port taken meanwhile) is tried again


AUTH_MODE = "RAY_AUTH_MODE"


def connect(address: str) -> None:
    """Join the cluster at `address` as this process's driver, with token
    auth on (an explicit RAY_AUTH_MODE in the environment wins)."""
    _token_auth()
    ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING)


def disconnect() -> None:
    """Leave the cluster (before a local head is stopped)."""
    ray.shutdown()


def _token_auth() -> None:
    """Token auth for this process, unless its environment says otherwise.
    Ray reads RAY_AUTH_MODE into its config when it is imported, so a mode
    set later takes a refresh of that config (what Ray itself does when it
    turns token auth on for a cluster it starts)."""
    if os.environ.get(AUTH_MODE) is None:
        os.environ[AUTH_MODE] = "token"
        from ray._raylet import Config  # type: ignore[attr-defined]  # ray's _raylet.pyi omits Config

        Config.initialize("")


class LocalRayCluster:
    """A Ray head owned by one data directory."""

    def __init__(self, data_dir: str, num_cpus: int | None = None, dashboard: bool = False):
        self.dir = Path(data_dir)
        self.state_file = self.dir / "ray.json"
        self.num_cpus = num_cpus
        self.dashboard = dashboard  # Ray's dashboard (its state API), on loopback only

    def ensure(self) -> str:
        """The address of this data directory's head, started if not running."""
        state = self._read()
        if state and _alive(state["pid"]):
            return state["address"]
        return self._start()

    def stop(self) -> None:
        state = self._read()
        if state and _alive(state["pid"]):
            # `ray start --block` stops the node's processes when it is terminated.
            os.kill(state["pid"], signal.SIGTERM)
            deadline = time.monotonic() + 20
            while _alive(state["pid"]) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(state["pid"]):
                os.killpg(state["pid"], signal.SIGKILL)
        self.state_file.unlink(missing_ok=True)

    def _start(self) -> str:
        """Start the head; a port taken between choosing and binding it (the
        head exits at once) is tried again with other ports."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, START_ATTEMPTS + 1):
            address = self._start_once()
            if address is not None:
                return address
            logger.warning("the local Ray head exited while starting (attempt %d of %d)",
                           attempt, START_ATTEMPTS)
        raise RuntimeError(f"the local Ray head did not start: see {self.dir / 'ray.log'}")

    def _start_once(self) -> str | None:
        """The head's address once it runs; None if it exited while starting."""
        port = free_port(LOOPBACK)
        cmd = [
            str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
            f"--port={port}", f"--include-dashboard={str(self.dashboard).lower()}",
            "--disable-usage-stats", f"--dashboard-agent-listen-port={free_port(LOOPBACK)}",
        ]
        if self.dashboard:
            cmd += [f"--dashboard-host={LOOPBACK}", f"--dashboard-port={free_port(LOOPBACK)}"]
        if self.num_cpus is not None:
            cmd.append(f"--num-cpus={self.num_cpus}")
        _ensure_auth_token(Path(cmd[0]))
        log_path = self.dir / "ray.log"
        with open(log_path, "ab") as log:
            start = log.tell()
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, AUTH_MODE: os.environ.get(AUTH_MODE, "token")},
                start_new_session=True,  # outlives this process, and is its own group
            )
        address = f"{LOOPBACK}:{port}"
        self.state_file.write_text(json.dumps({"pid": proc.pid, "address": address}))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with open(log_path, "rb") as log:
                log.seek(start)
                if b"will now block" in log.read():
                    break
            if proc.poll() is not None:
                self.stop()
                return None
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the local Ray head did not start in {START_TIMEOUT_S:g}s: "
                                   f"see {log_path}")
            time.sleep(0.2)
        logger.info("started a local Ray head at %s (pid %d)", address, proc.pid)
        return address

    def _read(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return None


def _ensure_auth_token(ray_cli: Path) -> None:
    """A head with token auth refuses to start without a token: on a machine
    that never ran Ray (a fresh CI container) make one, where Ray keeps it
    (~/.ray/auth_token), unless the environment names one."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if (Path.home() / ".ray" / "auth_token").exists():
        return
    subprocess.run([str(ray_cli), "get-auth-token", "--generate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by us) is not alive.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def live_node_count() -> int:
    """How many nodes the cluster has alive (1 where Ray cannot be asked: a
    rule that needs several nodes must not act on a guess)."""
    try:
        return sum(1 for node in ray.nodes() if node["Alive"])
    except Exception:
        return 1


def ray_unready() -> str | None:
    """Why the control plane cannot use Ray now, or None: not connected, the
    cluster does not answer, or it has no live node."""
    if not ray.is_initialized():
        return "not connected to Ray"
    try:
        alive = sum(1 for node in ray.nodes() if node["Alive"])
    except Exception as e:
        return f"Ray does not answer: {type(e).__name__}: {e}"
    return None if alive else "the Ray cluster has no live node"


def never_fits(workers: int, cpu: float, gpu: float, placement: str,
               labels: Mapping[str, str] | None = None) -> str:
    """Why `workers` ranks of (cpu, gpu) each could never be placed on the
    live nodes (those with every one of `labels`: a flavor's) under
    `placement`, however long they waited ("" if they could)."""
    nodes = [node["Resources"] for node in _live(labels)]
    if labels and not nodes:
        return "no live node has its labels " + ", ".join(f"{k}={v}" for k, v in labels.items())
    try:
        check_capacity(nodes, workers, bundle_of(cpu, gpu), placement)
    except CapacityError as e:
        return str(e)
    return ""


def live_node_labels() -> dict[str, dict[str, str]]:
    """The live nodes' labels, each by what names the node to a person ("<its
    id's first 12> (<address>)"); none where this process has not joined a
    cluster (ClusterUnreachableError where Ray does not answer)."""
    if not ray.is_initialized():
        return {}
    try:
        return {f"{node['NodeID'][:12]} ({node.get('NodeManagerAddress', '?')})":
                dict(node.get("Labels") or {}) for node in _live()}
    except Exception as e:  # noqa: BLE001  # Ray's GCS: any failure is "not now"
        raise ClusterUnreachableError(f"the cluster's nodes not read: {type(e).__name__}: {e}") \
            from e


def _live(labels: Mapping[str, str] | None = None) -> list[dict]:
    """Ray's live nodes; with `labels`, those that have every one (a flavor's)."""
    return [node for node in ray.nodes() if node["Alive"]
            and (not labels or matches(labels, node.get("Labels") or {}))]


DRAINS_TTL_S = 0.5  # the runners of many jobs poll at once: one GCS read serves them all
_drains_cache: tuple[float, dict[str, NodeView]] = (-math.inf, {})
_drains_lock = threading.Lock()


def draining_nodes() -> dict[str, NodeView]:
    """The live nodes Ray drains, by node id (workers/cluster/nodes.py, read
    at most every DRAINS_TTL_S: nothing new is placed there, and each goes by
    its `drain_deadline`; none where Ray is not connected or does not answer)."""
    global _drains_cache
    if not ray.is_initialized():
        return {}
    with _drains_lock:
        read_at, drains = _drains_cache
        if time.monotonic() - read_at < DRAINS_TTL_S:
            return drains
        try:
            drains = nodes.draining_nodes()
        except Exception as e:  # noqa: BLE001  # a GCS that does not answer now: none known
            logger.warning("the cluster's drains not read: %s: %s", type(e).__name__, e)
            return drains
        if set(drains) != set(_drains_cache[1]):
            logger.info("draining nodes: %s", ", ".join(
                f"{d.address} ({node_id[:12]}, deadline {d.drain_deadline})"
                for node_id, d in drains.items()) or "none")
        _drains_cache = (time.monotonic(), drains)
        return drains


def cluster_capacity(exclude: frozenset[str] | set[str] = frozenset(),
                     draining: bool = False,
                     labels: Mapping[str, str] | None = None) -> dict[str, float]:
    """Total CPUs and GPUs of the cluster's live nodes (those with every one
    of `labels`: a flavor's capacity), less those `exclude`d and those
    draining (nothing new is placed there), unless `draining`."""
    total = {"cpu": 0.0, "gpu": 0.0}
    if not draining:
        exclude = set(exclude) | set(draining_nodes())
    for node in _live(labels):
        if node["NodeID"] not in exclude:
            total["cpu"] += node["Resources"].get("CPU", 0.0)
            total["gpu"] += node["Resources"].get("GPU", 0.0)
    return total


def flavor_capacities(flavors: Mapping[str, Mapping[str, str]],
                      exclude: frozenset[str] | set[str] = frozenset()) -> dict[str, dict[str, float]]:
    """Each flavor's capacity (name -> its labels): the CPUs and GPUs of the
    live, not draining nodes of the flavor, less those `exclude`d ("cpu",
    "gpu"), and what Ray has free of them now ("free_cpu", "free_gpu": less
    every bundle reserved there, a job of no flavor's too), and how many
    nodes ("nodes"). A node with the
    labels of several flavors counts once, in the flavor it is of
    (`flavor_of_node`: the one with the most labels, then the first by name),
    as `GET /v1/cluster/nodes` shows it."""
    if not flavors:
        return {}
    exclude = set(exclude) | set(draining_nodes())
    try:
        available = ray._private.state.state.available_resources_per_node()
    except Exception:  # noqa: BLE001  # not known now: the totals alone bound admission
        available = None
    amounts = {name: dict.fromkeys(("cpu", "gpu", "free_cpu", "free_gpu", "nodes"), 0.0)
               for name in flavors}
    for node in _live():
        if node["NodeID"] in exclude:
            continue
        free = (available or {}).get(node["NodeID"], {})
        name = flavor_of_node(flavors, node.get("Labels") or {})
        if name is not None:
            amounts[name]["nodes"] += 1
            for ours, theirs in (("cpu", "CPU"), ("gpu", "GPU")):
                amounts[name][ours] += node["Resources"].get(theirs, 0.0)
                amounts[name][f"free_{ours}"] += free.get(theirs, 0.0)
    if available is None:
        for amount in amounts.values():
            amount["free_cpu"], amount["free_gpu"] = amount["cpu"], amount["gpu"]
    return amounts


def node_flavors(flavors: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The flavor (name -> its labels) of each live node of one, by node id
    (`flavor_of_node`, as `flavor_capacities` counts it); none where this
    process has not joined a cluster or Ray does not answer now."""
    if not flavors or not ray.is_initialized():
        return {}
    try:
        nodes = _live()
    except Exception as e:  # noqa: BLE001  # not known now: no rank is placed on a flavor
        logger.warning("the nodes' flavors not read: %s: %s", type(e).__name__, e)
        return {}
    found = {node["NodeID"]: flavor_of_node(flavors, node.get("Labels") or {}) for node in nodes}
    return {node_id: name for node_id, name in found.items() if name is not None}


def worker_memory_bytes(cpu: float, gpu: float,
                        labels: Mapping[str, str] | None = None) -> float | None:
    """The memory a worker of (cpu, gpu) can count on: over the live nodes
    (with every one of `labels`: a flavor's) where one fits, the least of the
    node's memory shared by as many such workers as fit it (Ray's `memory`
    resource); None where Ray reports none."""
    shares = []
    for node in _live(labels):
        res = node["Resources"]
        fit = res.get("CPU", 0.0) // cpu if cpu > 0 else float("inf")
        if gpu > 0:
            fit = min(fit, res.get("GPU", 0.0) // gpu)
        if fit >= 1 and res.get("memory"):
            shares.append(res["memory"] / min(fit, 1e9))
    return min(shares) if shares else None


def _pong() -> bool:
    return True


def lost_nodes(node_ids: set[str], probe_timeout_s: float = 10.0,
               settle_s: float = 60.0) -> set[str]:
    """Which of these nodes are gone. Ray notices a dead node only after its
    health checks fail (seconds to tens of seconds), and until then counts its
    resources and may place bundles on it; so each node it still calls alive
    is asked to run a task, and one that does not answer is waited for
    (up to `settle_s`) until Ray, too, marks it dead."""
    if not node_ids:
        return set()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    lost = set(node_ids) - alive
    probe = ray.remote(num_cpus=0, max_retries=0)(_pong)
    asked = {probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
             .remote(): node for node in set(node_ids) & alive}
    if asked:
        ready, pending = ray.wait(list(asked), num_returns=len(asked), timeout=probe_timeout_s)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception:  # the task failed: its node is going or gone
                lost.add(asked[ref])
        for ref in pending:
            lost.add(asked[ref])
            ray.cancel(ref, force=True)
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        if not lost & {n["NodeID"] for n in ray.nodes() if n["Alive"]}:
            break
        time.sleep(0.5)
    if lost:
        logger.info("nodes lost: %s", ", ".join(sorted(lost)))
    return lost


def run_export(request: dict, timeout_s: float) -> dict:
    """Write one export (`workers.engine.export.export_checkpoint`) in a Ray task,
    and wait for it. The task takes no CPU slot of the cluster's (it is I/O
    bound, and a job that just succeeded has given its slots back to others)
    and is not retried: a task that dies leaves a torn export, never listed."""
    from workers.engine.export import export_checkpoint

    task = ray.remote(num_cpus=0, max_retries=0)(export_checkpoint)
    ref = task.remote(request)
    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        raise TimeoutError(f"the export did not finish in {timeout_s:g} s") from None


def group_workers(group: str, num_workers: int, *, pool_prefix: str,
                  timeout_s: float = 5.0) -> list[dict]:
    """Where the ranks of a live worker group run, asked of the ranks by name
    (as a reattaching leader finds them), changing nothing: what a follower
    replica, which runs no runner, shows of a job's workers. Each rank that
    answers (its `RankInfo`), as the API shows it: {"rank", "node", "node_id",
    "pid", "state": "running"}."""
    actors: dict[int, object] = {}
    for rank in range(num_workers):
        try:
            actors[rank] = ray.get_actor(f"{group}-rank-{rank}")
        except ValueError:
            continue
    if len(actors) < num_workers:  # ranks taken from the pool keep the pool's names
        try:
            for rank, actor in find_assigned(pool_prefix, group, num_workers).items():
                actors.setdefault(rank, actor)
        except Exception as e:
            logger.info("group %s: the pool's ranks not listed: %s", group, e)
    shown = []
    for rank, actor in sorted(actors.items()):
        try:
            info: RankInfo = ray.get([actor.node_info.remote()],  # type: ignore[attr-defined]
                                     timeout=timeout_s)[0]
        except Exception:
            continue
        shown.append({"rank": rank, "node": info.node_ip, "node_id": info.node_id, "pid": info.pid,
                      "state": "running"})
    return shown
