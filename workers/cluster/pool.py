"""A pool of warm rank processes: Ray actors started ahead of any job, that
have imported torch and the engine, so that a job's ranks skip the seconds
those imports take (most of a small job's start-up: docs/benchmarks.md).

    pool = RankPool(2, name_prefix="brigade-pool-1a2b3c4d").start()  # 2 warm a node
    WorkerGroup(2, pool=pool).start()  # takes warm ranks where its bundles are
    pool.shutdown()                    # kills the idle ones

Each pooled process serves exactly one group, once: the group that takes it
`assign`s it a rank (a second assign is refused by the actor itself) and
kills it when it ends, like the actors it starts; the pool forgets it as it
hands it out and starts another in the background.

How a pooled rank is accounted. Ray places an actor when it is created and
never moves it: an actor started ahead cannot join a job's placement-group
bundle later. So pooled actors hold no resources (`num_cpus=0`) and are
pinned to a node each; a job still reserves its placement group as before
(one bundle per rank: the gang, the quotas and the capacity the scheduler
counts are unchanged), and the group takes, for each bundle, a warm rank on
the node Ray put the bundle on (a cold one in the bundle where that node has
none). The bundle is the rank's reservation; the pooled process runs beside
it on the same node. The other way, actors pre-started inside a standing
placement group, would hold the pool's CPUs away from every job, and fit
only jobs whose bundles have the pool's shape. Idle, a pooled rank costs its
memory (torch imported: a few hundred MB) and no CPU.

Both kinds of CPU rank, warm and cold, are forked from their node's fork
server where it runs (workers/cluster/fork_server.py, one a node, kept here by
`fork_servers`): a fresh process that has torch and the engine imported
already, at a fraction of the CPU a fresh interpreter's imports take. The
pool still saves what a fork does not: Ray's own start of a worker.

Only CPU-only jobs take pooled ranks: a GPU rank's process must be Ray's
GPU-holding actor (its CUDA_VISIBLE_DEVICES is Ray's), so it starts cold.

The actors are detached (a rank outlives a control plane that restarts,
which finds it again through `assignment`), named `{name_prefix}-{n}`:
`start` kills the idle ones a predecessor of the same prefix left (a
control plane that crashed), never an assigned one.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from workers.cluster.fork_host import ForkServers
from workers.cluster.fork_host import supported as fork_servers_supported
from workers.cluster.node_view import ClusterUnreachableError
from workers.cluster.nodes import draining_nodes
from workers.cluster.rank_actor import ENGINE, RankActor

logger = logging.getLogger(__name__)
# (Ray's typing of `remote` lists no `concurrency_groups`; Ray takes it, and not in `.options`.)
_RemoteRankActor = ray.remote(concurrency_groups={ENGINE: 1})(RankActor)  # type: ignore[call-overload]
REFILL_DELAY_S = 3.0  # after a take, the refill waits this long: the job's start has the CPUs first
REPLACED_REFILL_DELAY_S = 1.0  # after a replacement's take: its first step goes first
CHECK_S = 1.0  # how often the refill looks at the pool (and new nodes) otherwise


def start_rank_actor(*, node_id: str | None = None, **options):
    """A rank actor as every group makes one (`train` on its engine thread,
    three more answering `progress` and a peer's snapshot copy while it
    runs: workers/cluster/rank_actor.py); pinned to `node_id` where given."""
    if node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return _RemoteRankActor.options(max_concurrency=3, **options)


class RankPool:
    """`size` warm rank processes kept ready on each live node with CPUs."""

    def __init__(self, size: int, *, name_prefix: str = "brigade-pool",
                 refill_delay_s: float = REFILL_DELAY_S, fork_server: bool = True):
        if size < 0:
            raise ValueError(f"a pool's size is >= 0, got {size}")
        self.size, self.name_prefix, self.refill_delay_s = size, name_prefix, refill_delay_s
        # Each node's fork server (workers/cluster/fork_server.py): warm and cold CPU ranks fork from it.
        if fork_server and not fork_servers_supported():
            logger.warning("this Ray has no runtime_env py_executable: no fork server, ranks start cold")
            fork_server = False
        self.fork_servers = ForkServers(name_prefix) if fork_server else None
        self._lock = threading.Lock()
        self._warm: dict[str, list] = {}  # node id -> warm actors, oldest first
        self._starting: dict = {}  # preload ref -> (node id, actor)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._hold_until = 0.0  # no refill before this (monotonic): a take just happened
        self.handed_out = 0  # how many warm ranks groups have taken

    def start(self) -> RankPool:
        """Clear what a predecessor left idle, then fill in the background."""
        self._kill_idle_leftovers()
        if self.fork_servers is not None:
            self.fork_servers.kill_leftovers()
        self._thread = threading.Thread(target=self._refill_loop, name="rank-pool", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop refilling and kill every idle pooled process (those handed
        out belong to their groups)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            idle = [a for actors in self._warm.values() for a in actors]
            idle += [actor for _, actor in self._starting.values()]
            self._warm, self._starting = {}, {}
        if ray.is_initialized():
            for actor in idle:
                ray.kill(actor, no_restart=True)
        if self.fork_servers is not None:
            self.fork_servers.shutdown()

    def take(self, node_id: str, *, replacing: bool = False):
        """A warm rank process on `node_id`, now the caller's (it must
        `assign` it, and kill it at the end), or None where there is none.
        The refill then waits `refill_delay_s` (a job's start has the CPUs
        first); after a replacement's take (`replacing`: recovery in place)
        only `REPLACED_REFILL_DELAY_S`, past the replacement's first step, as
        the next fault may come before the longer delay is over."""
        with self._lock:
            warm = self._warm.get(node_id)
            if not warm:
                return None
            actor = warm.pop(0)
            self.handed_out += 1
            delay = min(self.refill_delay_s, REPLACED_REFILL_DELAY_S) if replacing else self.refill_delay_s
            self._hold_until = time.monotonic() + delay
        self._wake.set()
        return actor

    def warm(self) -> dict[str, int]:
        """How many warm processes each node has now."""
        with self._lock:
            return {node: len(actors) for node, actors in self._warm.items()}

    @property
    def active(self) -> bool:
        """Whether a group has anything to take from this pool: warm ranks, or
        the fork servers its cold ranks start through."""
        return self.size > 0 or self.fork_servers is not None

    def runtime_env(self, node_id: str) -> dict | None:
        """How a cold CPU rank on `node_id` starts through the node's fork
        server (None: none is ready there; it starts as Ray starts any worker)."""
        return None if self.fork_servers is None else self.fork_servers.runtime_env(node_id)

    def wait_warm(self, timeout_s: float) -> bool:
        """Whether every node with CPUs had `size` warm processes (and its
        fork server settled) within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            nodes = _cpu_nodes()
            counts = self.warm()
            if nodes and all(counts.get(node, 0) >= self.size and self._forks_settled(node)
                             for node in nodes):
                return True
            time.sleep(0.1)
        return False

    # -- the refill ---------------------------------------------------------------

    def _refill_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._collect()
                if time.monotonic() >= self._hold_until:
                    self._fill()
            except Exception:  # Ray busy or restarting: the next look tries again
                logger.exception("the rank pool's refill failed")
            hold = self._hold_until - time.monotonic()
            self._wake.wait(min(CHECK_S, hold) if hold > 0 else CHECK_S)
            self._wake.clear()

    def _collect(self) -> None:
        """Move the processes whose imports finished to the warm lists."""
        with self._lock:
            refs = list(self._starting)
        if not refs:
            return
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in done:
            with self._lock:
                node, actor = self._starting.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayError as e:
                logger.warning("a pooled rank process on node %s did not start: %s", node, e)
                ray.kill(actor, no_restart=True)
                continue
            with self._lock:
                self._warm.setdefault(node, []).append(actor)

    def _forks_settled(self, node: str) -> bool:
        return self.fork_servers is None or self.fork_servers.settled(node)

    def _fill(self) -> None:
        """Start what each live node lacks: its fork server first, then the
        warm ranks (forked from it once it is ready)."""
        draining = _draining()
        nodes = _cpu_nodes() - draining  # a draining node takes no new rank: none kept warm there
        if self.fork_servers is not None:
            self.fork_servers.refresh(nodes, drop=draining)
            nodes = {node for node in nodes if self.fork_servers.settled(node)}
        idle = []
        with self._lock:
            for gone in set(self._warm) - nodes:  # a node that left: its actors went with it
                left = self._warm.pop(gone)
                if gone in draining:  # killed: the node goes once nothing runs there
                    idle += left
            starting = [node for node, _ in self._starting.values()]
            short = [node for node in nodes
                     for _ in range(self.size - len(self._warm.get(node, [])) - starting.count(node))]
        for actor in idle:
            ray.kill(actor, no_restart=True)
        for node in short:
            env = self.runtime_env(node)
            actor = start_rank_actor(
                node_id=node, num_cpus=0, lifetime="detached",
                name=f"{self.name_prefix}-{uuid.uuid4().hex[:12]}",
                runtime_env=env,
            ).remote(-1, 0, 1)
            with self._lock:
                self._starting[actor.preload.remote()] = (node, actor)

    def _kill_idle_leftovers(self) -> None:
        """Kill the unassigned processes of this prefix that are alive (a
        control plane that crashed left them); an assigned one is a job's."""
        names = [n for n in ray.util.list_named_actors() if n.startswith(f"{self.name_prefix}-")]
        for name in names:
            try:
                actor = ray.get_actor(name)
                if ray.get(actor.assignment.remote(), timeout=10) is None:
                    ray.kill(actor, no_restart=True)
            except (ValueError, ray.exceptions.RayError):
                continue  # gone meanwhile, or not answering: the group that owns it decides


def _draining() -> set[str]:
    """The nodes Ray drains (none where the GCS does not answer now)."""
    try:
        return set(draining_nodes())
    except ClusterUnreachableError:
        return set()


def _cpu_nodes() -> set[str]:
    return {node["NodeID"] for node in ray.nodes()
            if node["Alive"] and node["Resources"].get("CPU", 0) > 0}


def find_assigned(name_prefix: str, group: str, num_workers: int) -> dict[int, object]:
    """The pooled processes of `name_prefix` assigned to `group`, by rank
    (for a control plane that reattaches after a restart)."""
    found: dict[int, object] = {}
    names = [n for n in ray.util.list_named_actors() if n.startswith(f"{name_prefix}-")]
    asked: dict = {}  # assignment ref -> actor
    for name in names:
        try:
            actor = ray.get_actor(name)
        except ValueError:
            continue
        asked[actor.assignment.remote()] = actor
    if not asked:
        return found
    ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=10)
    for ref in ready:
        try:
            assigned = ray.get(ref)
        except ray.exceptions.RayError:
            continue
        if assigned is not None and assigned[0] == group and 0 <= assigned[1] < num_workers:
            found[assigned[1]] = asked[ref]
    return found
