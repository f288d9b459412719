"""A job's gang of rank actors on Ray: one placement group, one bundle per rank
(per tensor-parallel group where the cluster holds them whole), one actor per
rank, one process group among them.

    with WorkerGroup(2, cpus_per_worker=1) as group:   # start(): reserve, spawn, rendezvous
        per_rank = group.train(spec)                    # or start_training(spec).wait(...)

With a `pool` (workers/cluster/pool.py) a CPU-only group takes, for each bundle, a
warm rank process on the bundle's node (torch and the engine imported
already), and starts a cold actor in the bundle only where there is none.

The group owns what it creates, and the pooled processes it takes:
`shutdown()` (also on leaving `with`, and on any error in `start` or while
training) kills every actor and removes the placement group. A rank whose
actor dies is named at the next poll and never waited for; the survivors
may sit in a collective until the process-group timeout, so they are killed
rather than joined.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import overload

import ray
from ray.util import placement_group_table
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from workers.cluster.errors import PlacementTimeoutError, WorkerGroupError
from workers.cluster.placement import (
    PLACEMENT_STRATEGIES,
    GangBundles,
    bundle_of,
    check_capacity,
    gang_bundles,
)
from workers.cluster.pool import RankPool, find_assigned, start_rank_actor
from workers.cluster.rank_actor import SIGTERM_GRACE_S
from workers.cluster.rank_calls import await_answers, await_ranks
from workers.spec import JobSpec

PROGRESS_TIMEOUT_S = 30.0


class WorkerGroup:
    """`num_workers` rank actors, placed all or nothing, in one process group."""

    def __init__(
        self,
        num_workers: int,
        *,
        cpus_per_worker: float = 1.0,
        gpus_per_worker: float = 0,
        placement_strategy: str = "PACK",
        name_prefix: str | None = None,
        pg_timeout_s: float = 30.0,
        ready_timeout_s: float = 60.0,
        detached: bool = False,
        sigterm_grace_s: float = SIGTERM_GRACE_S,
        tp_size: int = 1,
        pool: RankPool | None = None,
    ):
        if placement_strategy not in PLACEMENT_STRATEGIES:
            raise ValueError(
                f"unknown placement strategy {placement_strategy!r} "
                f"(known: {', '.join(PLACEMENT_STRATEGIES)})"
            )
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if min(cpus_per_worker, gpus_per_worker) < 0 or cpus_per_worker + gpus_per_worker == 0:
            raise ValueError(
                "a worker needs some CPUs or GPUs, got "
                f"cpus_per_worker={cpus_per_worker}, gpus_per_worker={gpus_per_worker}"
            )
        self.num_workers = num_workers
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.placement_strategy = placement_strategy
        self.name_prefix = name_prefix
        self.pg_timeout_s = pg_timeout_s
        self.ready_timeout_s = ready_timeout_s
        # Detached actors and bundles outlive the driver that made them (a
        # control plane that restarts reattaches by name): they need a name.
        if detached and not name_prefix:
            raise ValueError("a detached worker group needs a name_prefix")
        self.detached = detached
        self.sigterm_grace_s = sigterm_grace_s  # a rank's time from SIGTERM to a checkpointed stop
        # Consecutive ranks of this many form a TP group: one bundle a group
        # where the cluster can hold them whole, so each shares a node (PACK
        # within the group; workers/cluster/placement.py `gang_bundles`).
        self.tp_size = tp_size
        # Warm rank processes to take from (CPU-only groups: a GPU rank starts cold).
        self.pool = pool if not gpus_per_worker else None
        self.pooled_ranks: list[int] = []  # the ranks whose process came from the pool
        # Asked before `shutdown` kills anything (a failure found mid-query shuts the group down
        # too): False lets go of the group, killing nothing, e.g. for a driver that may no longer
        # own it (a control-plane replica another has deposed). None: always kill.
        self.may_shutdown: Callable[[], bool] | None = None
        self._gang: GangBundles | None = None  # the bundles, chosen at start
        self.backend: str | None = None
        self.rendezvous: tuple[str, int] | None = None
        # One dict per rank (node_id, node_ip, pid, gpu_ids); kept after shutdown
        # so that errors can still say where a rank ran.
        self.node_infos: list[dict] = []
        self._pg: PlacementGroup | None = None
        self._actors: list = []
        # When each phase of `start` ended (epoch seconds): see `startup`.
        self.timeline: dict[str, float] = {}

    @property
    def actors(self) -> list:
        """The rank actors' handles, rank order; empty unless started."""
        return list(self._actors)

    @property
    def bundle(self) -> dict[str, float]:
        """What one rank reserves."""
        return bundle_of(self.cpus_per_worker, self.gpus_per_worker)

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> WorkerGroup:
        """Reserve every bundle, start one actor per bundle, form the process group.
        Whatever fails, nothing it created is left behind."""
        if self._pg is not None:
            raise WorkerGroupError("the worker group is already started")
        self.timeline = {"start": time.time()}
        self._check_capacity()
        try:
            self._reserve()
            self.timeline["placement_ready"] = time.time()
            self._spawn()
            self.timeline["actors_ready"] = time.time()
            self._rendezvous()
            self.timeline["group_formed"] = time.time()
        except BaseException:
            self.shutdown()
            raise
        return self

    def shutdown(self) -> None:
        """Kill every rank actor and free the bundles; safe to call again.
        Where `may_shutdown` says no, only let go of them."""
        actors, self._actors = self._actors, []
        pg, self._pg = self._pg, None
        if self.may_shutdown is not None and not self.may_shutdown():
            return
        if not ray.is_initialized():
            return  # the cluster is gone, and all that was in it
        for actor in actors:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        if pg is not None:
            remove_placement_group(pg)

    def names_free(self, timeout_s: float) -> bool:
        """Whether, within `timeout_s`, no rank actor and no placement group of
        this group's name is left on the cluster (after `shutdown()` Ray frees
        the names a moment later): the same attempt can then start again."""
        deadline = time.monotonic() + timeout_s
        while True:
            taken = any(_named(lambda n=f"{self.name_prefix}-rank-{rank}": ray.get_actor(n))
                        for rank in range(self.num_workers))
            pg_left = _named(lambda: ray.util.get_placement_group(f"{self.name_prefix}-pg"))
            if not taken and not pg_left:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def __enter__(self) -> WorkerGroup:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    # -- training -----------------------------------------------------------------

    def start_training(
        self, spec: JobSpec | dict, *, checkpoint: dict | None = None, stop_after: int | None = None
    ) -> TrainingRun:
        """Start `train` on every rank and return at once; see `TrainingRun`.
        `checkpoint` (a `CheckpointTarget` as a dict) makes the ranks resume
        from its latest committed step and save there; `stop_after` ends this
        run at that step, checkpointed."""
        if not self._actors:
            raise WorkerGroupError("the worker group is not started: call start() first")
        # A dict (a script's, a test's) is parsed here; a JobSpec is the caller's parsed one,
        # taken as it is. What only the group knows is checked, before any rank runs: its size.
        if not isinstance(spec, JobSpec):
            spec = JobSpec.model_validate(spec)
        spec.check_world_size(self.num_workers)
        return TrainingRun(
            self, [actor.train.remote(spec, checkpoint, stop_after) for actor in self._actors]
        )

    def train(
        self, spec: JobSpec | dict, *, checkpoint: dict | None = None, stop_after: int | None = None
    ) -> list[list[dict]]:
        """Train to the end (or `stop_after`); one metrics dict per step, per rank."""
        return self.start_training(spec, checkpoint=checkpoint, stop_after=stop_after).wait()

    @classmethod
    def attach(cls, name_prefix: str, num_workers: int, **options) -> WorkerGroup:
        """The live group named `name_prefix` (made detached by a driver that
        has since restarted). Raises WorkerGroupError unless every rank's
        actor and the placement group are there; kill leftovers with
        `shutdown()` on what `reclaim` returns."""
        group = cls.reclaim(name_prefix, num_workers, **options)
        missing = [r for r, actor in enumerate(group._actors) if actor is None]
        if missing or group._pg is None:
            group.shutdown()
            what = f"rank(s) {missing}" if missing else "its placement group"
            raise WorkerGroupError(f"worker group {name_prefix} is gone: {what} not found")
        group.node_infos = group._finish(
            [actor.node_info.remote() for actor in group._actors],
            PROGRESS_TIMEOUT_S,
            "reaching the rank actors",
        )
        return group

    @classmethod
    def reclaim(cls, name_prefix: str, num_workers: int, *, pool_prefix: str | None = None,
                **options) -> WorkerGroup:
        """Whatever is left of the named group (actors that are missing are
        None), for `attach` or to `shutdown()` leftovers. A rank that came
        from a pool is found among the pool's processes (`pool_prefix`)."""
        group = cls(num_workers, name_prefix=name_prefix, detached=True, **options)
        for rank in range(num_workers):
            try:
                group._actors.append(ray.get_actor(f"{name_prefix}-rank-{rank}"))
            except ValueError:
                group._actors.append(None)
        if pool_prefix and None in group._actors:
            for rank, actor in find_assigned(pool_prefix, name_prefix, num_workers).items():
                if group._actors[rank] is None:
                    group._actors[rank] = actor
        try:
            group._pg = ray.util.get_placement_group(f"{name_prefix}-pg")
        except ValueError:
            group._pg = None
        return group

    def status(self) -> dict:
        """{"state": "running" | "done" | "preempted", "steps": rank 0's step
        count, "step": its training step}; "preempted" (every rank stopped,
        checkpointed, after a preemption notice) adds "reason" and
        "sigterm_ranks". A lost, failed or hung rank raises RankLostError /
        RankFailedError / RankHungError (and shuts the group down): a hung
        one is found within the process-group timeout. Works for a group
        this driver did not start."""
        statuses = self._answers("status")
        out = {"state": "running", "steps": statuses[0]["steps"], "step": statuses[0].get("step")}
        ended = {st["state"] for st in statuses}
        if ended == {"done"}:
            out["state"] = "done"
        elif ended == {"preempted"}:
            sigterm = [rank for rank, st in enumerate(statuses) if st.get("sigterm")]
            where = ", ".join(self._where(rank) for rank in sigterm) or "a rank"
            out.update(
                state="preempted",
                sigterm_ranks=sigterm,
                reason=f"{where} got SIGTERM (a preemption notice): checkpointed at step "
                       f"{out['step']} and stopped",
            )
        return out

    def startup(self) -> dict[str, float]:
        """When each start-up phase ended, epoch seconds: the group's own
        (start, placement_ready, actors_ready, group_formed) and the ranks'
        (`RankActor.timeline`: the slowest rank's, as the gang waits for it).
        Empty for a group this driver did not start."""
        if not self.timeline:
            return {}
        merged = dict(self.timeline)
        for rank_times in self._answers("timeline"):
            for phase, at in rank_times.items():
                merged[phase] = max(at, merged.get(phase, at))
        return merged

    def _where(self, rank: int) -> str:
        info = self.node_infos[rank] if rank < len(self.node_infos) else None
        return f"rank {rank} (pid {info['pid']}, node {info['node_ip']})" if info else f"rank {rank}"

    def progress(self, since: int = 0) -> list[dict]:
        """Rank 0's metrics from step index `since` on."""
        return self._answers("progress", since, ranks=1)[0]

    def output(self) -> list[list[str]]:
        """Each rank's stdout and stderr lines since the last call, by rank."""
        return self._answers("take_output")

    def _answers(self, method: str, *args, ranks: int | None = None) -> list:
        """A quick query of every rank (or the first `ranks`), answered by the
        actor's second thread whatever its training does. A rank that has not
        answered within the process-group timeout is hung (a stopped process
        never answers; the others may sit in a collective with it until that
        timeout): RankHungError, as a rank whose answer says it failed raises
        RankFailedError at once; either shuts the group down."""
        if not self._actors:
            raise WorkerGroupError("the worker group is not started: call start() first")
        refs = [getattr(actor, method).remote(*args) for actor in self._actors[:ranks]]
        return await_answers(refs, self.pg_timeout_s, self.node_infos, self.shutdown, _failure)

    def request_stop(self) -> None:
        """Ask every rank to checkpoint and stop at the next step boundary."""
        self.call("request_stop")

    def call(self, method: str, *args, timeout_s: float = PROGRESS_TIMEOUT_S) -> list:
        """Call a (collective) rank-actor method on every rank; results by rank."""
        if not self._actors:
            raise WorkerGroupError("the worker group is not started: call start() first")
        refs = [getattr(actor, method).remote(*args) for actor in self._actors]
        return self._finish(refs, timeout_s, method)

    # -- start, step by step ------------------------------------------------------

    def _check_capacity(self) -> None:
        """Refuse at once what no amount of waiting can place."""
        nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
        check_capacity(nodes, self.num_workers, self.bundle, self.placement_strategy)
        self._gang = gang_bundles(self.num_workers, self.bundle, self.tp_size, nodes)

    def _reserve(self) -> None:
        assert self._gang is not None, "start() checks the capacity before it reserves"
        self._pg = placement_group(
            self._gang.bundles,
            strategy=self.placement_strategy,
            name=f"{self.name_prefix}-pg" if self.name_prefix else "",
            lifetime="detached" if self.detached else None,
        )
        ready, _ = ray.wait([self._pg.ready()], timeout=self.ready_timeout_s)
        if not ready:
            raise PlacementTimeoutError(
                f"{len(self._gang.bundles)} bundles of {self._gang.bundles[0]} "
                f"({self.placement_strategy}) were "
                f"not free within {self.ready_timeout_s:g}s; free now: {ray.available_resources()}"
            )

    def _spawn(self) -> None:
        """One actor per rank: a warm one from the pool on its bundle's node
        (assigned its rank), else a cold one in its bundle."""
        assert self._pg is not None and self._gang is not None, (
            "start() reserves the bundles before it spawns")
        threads = max(1, int(self.cpus_per_worker))
        nodes = placement_group_table(self._pg)["bundles_to_node_id"] if self.pool else {}
        infos = []
        for rank in range(self.num_workers):
            bundle = self._gang.bundle_of_rank[rank]
            node = nodes.get(bundle)  # where Ray put the bundle (known only with a pool)
            actor = self.pool.take(node) if self.pool and node else None
            if actor is not None:
                self._actors.append(actor)  # ours from here: killed with the group
                self.pooled_ranks.append(rank)
                infos.append(actor.assign.remote(self.name_prefix or f"group-{id(self):x}", rank,
                                                 self.num_workers, threads, self.sigterm_grace_s))
                continue
            env = self.pool.runtime_env(node) if self.pool and node else None
            actor = start_rank_actor(
                runtime_env=env,  # forked from the node's fork server, where it has one
                num_cpus=self.cpus_per_worker,
                num_gpus=self.gpus_per_worker,
                name=f"{self.name_prefix}-rank-{rank}" if self.name_prefix else None,
                lifetime="detached" if self.detached else None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._pg, placement_group_bundle_index=bundle
                ),
            ).remote(rank, self.num_workers, threads, self.sigterm_grace_s)
            self._actors.append(actor)  # one at a time: a failed .remote() leaves the rest killable
            infos.append(actor.node_info.remote())
        self.node_infos = self._finish(infos, self.ready_timeout_s, "starting the rank actors")

    def _rendezvous(self) -> None:
        same_node = len({info["node_id"] for info in self.node_infos}) == 1
        [self.rendezvous] = self._finish(
            [self._actors[0].choose_rendezvous.remote(same_node, self.pg_timeout_s)],
            self.ready_timeout_s,
            "choosing the rendezvous",
        )
        addr, port = self.rendezvous
        self.backend = self._finish(
            [actor.setup.remote(addr, port, self.pg_timeout_s, self.ready_timeout_s)
             for actor in self._actors],
            self.ready_timeout_s + self.pg_timeout_s,
            "forming the process group",
        )[0]

    # -- waiting on the ranks -----------------------------------------------------

    def _finish(self, refs: list, timeout_s: float, what: str) -> list:
        results = self._await(refs, timeout_s)
        if results is None:
            raise WorkerGroupError(f"{what} took longer than {timeout_s:g}s")
        return results

    def _await(self, refs: list, timeout_s: float | None) -> list | None:
        """The results of one call per rank (refs[i] is rank i's), or None if some
        are still running after `timeout_s` (None: no limit). The first lost or
        failed rank raises at once and shuts the group down."""
        return await_ranks(refs, timeout_s, self.node_infos, self.shutdown)


def _named(lookup) -> bool:
    """Whether Ray still finds what `lookup` looks up by name (it raises
    ValueError for a name that nothing holds)."""
    try:
        lookup()
    except ValueError:
        return False
    return True


def _failure(answer: object) -> str | None:
    """What a rank's status answer says went wrong, if anything."""
    if isinstance(answer, dict) and answer.get("state") == "failed":
        return str(answer.get("error"))
    return None


class TrainingRun:
    """Training in flight on every rank of a group: poll it without blocking."""

    def __init__(self, group: WorkerGroup, refs: list):
        self._group = group
        self._refs = refs
        self._steps: list[dict] = []  # rank 0's metrics fetched so far

    @overload
    def wait(self, timeout_s: None = None) -> list[list[dict]]: ...
    @overload
    def wait(self, timeout_s: float) -> list[list[dict]] | None: ...
    def wait(self, timeout_s: float | None = None) -> list[list[dict]] | None:
        """Per-rank metrics once every rank is done, or None if still running after
        `timeout_s`. A lost or failed rank raises `RankLostError` or
        `RankFailedError` and the group is shut down."""
        return self._group._await(self._refs, timeout_s)

    def progress(self) -> list[dict]:
        """Rank 0's metrics so far, one dict per finished step."""
        if self._group.actors:
            self._steps.extend(self._group.progress(len(self._steps)))
        return list(self._steps)
