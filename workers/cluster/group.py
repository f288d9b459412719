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

import logging
import time
from collections.abc import Callable, Mapping

import ray
from ray.util import placement_group_table
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from checkpoints import CheckpointTarget
from workers.cluster import stop_signal
from workers.cluster.errors import PlacementTimeoutError, WorkerGroupError
from workers.cluster.group_reattach import ReattachedGroup
from workers.cluster.group_status import GroupStatus
from workers.cluster.in_place import CannotMove, CannotRecover, in_place_for, peer_of
from workers.cluster.move import PLACEMENT_WAIT_S, Move, move_in_place
from workers.cluster.placement import (
    PLACEMENT_STRATEGIES,
    GangBundles,
    bundle_of,
    check_capacity,
    gang_bundles,
)
from workers.cluster.pool import RankPool, start_rank_actor
from workers.cluster.rank_actor import SIGTERM_GRACE_S
from workers.cluster.rank_calls import PROGRESS_TIMEOUT_S, await_answers, await_ranks
from workers.cluster.rank_info import RankInfo, rank_where
from workers.cluster.replace import Recovery, recover_in_place
from workers.cluster.training_run import TrainingRun
from workers.schema import JobSpec
from workers.schema.flavor import matches

logger = logging.getLogger(__name__)


class WorkerGroup(ReattachedGroup):
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
        label_selector: Mapping[str, str] | None = None,
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
        # The Ray node labels every bundle asks for (a flavor's: `bundle_label_selector`), so
        # the ranks run only on nodes with all of them; None: any node.
        self.label_selector = dict(label_selector) if label_selector else None
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
        # Where each rank runs, by rank; kept after shutdown so that errors can
        # still say where a rank ran.
        self.node_infos: list[RankInfo] = []
        self._pg: PlacementGroup | None = None
        # Ranks moved off a draining node (workers/cluster/move.py) run in placement groups
        # of their own: rank -> (that group, its bundle); and those groups, to remove.
        self._placed: dict[int, tuple[PlacementGroup, int]] = {}
        self._moved_pgs: list[PlacementGroup] = []
        self._actors: list = []
        # Recovery in place (workers/cluster/replace.py): set by `start_training` for a job
        # that snapshots in memory on more than one rank; a lost rank then leaves the group
        # up (its owner recovers it, or shuts it down), not shut down at once.
        self.in_place = False
        self.run: TrainingRun | None = None  # the training `start_training` started
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

    def bundle_selectors(self, count: int) -> list[dict[str, str]] | None:
        """The label selector of each of `count` bundles (Ray's
        `bundle_label_selector`), or None where the group has none."""
        if not self.label_selector:
            return None
        return [dict(self.label_selector) for _ in range(count)]

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
        pgs = [pg for pg in (self._pg, *self._moved_pgs) if pg is not None]
        self._pg, self._moved_pgs, self._placed = None, [], {}
        if self.may_shutdown is not None and not self.may_shutdown():
            return
        if not ray.is_initialized():
            return  # the cluster is gone, and all that was in it
        for actor in actors:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        for pg in pgs:
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
        self, spec: JobSpec | dict, *, checkpoint: CheckpointTarget | dict | None = None,
        stop_after: int | None = None, stop_signals: bool = False,
    ) -> TrainingRun:
        """Start `train` on every rank and return at once; see `TrainingRun`.
        `checkpoint` (where the job's checkpoints live) makes the ranks resume
        from its latest committed step and save there; `stop_after` ends this
        run at that step, checkpointed. `stop_signals`: rank 0 looks for a
        `signal_stop` after every step itself (a GCS read a step), so that the
        stop lands at the next step boundary however loaded the machine is."""
        if not self._actors:
            raise WorkerGroupError("the worker group is not started: call start() first")
        # Parsed and checked here, once, for every rank: a dict (a script's, a test's) is
        # parsed, a JobSpec or CheckpointTarget (the control plane's) taken as it is; what
        # only the group knows, its size, is checked before any rank runs. The ranks take
        # both as they come (Ray pickles them).
        if not isinstance(spec, JobSpec):
            spec = JobSpec.model_validate(spec)
        spec.check_world_size(self.num_workers)
        if isinstance(checkpoint, dict):
            checkpoint = CheckpointTarget.from_dict(checkpoint)
        self.in_place = in_place_for(spec, self.num_workers)
        if self.in_place:  # who holds whose snapshot copies
            node_ids = [info.node_id for info in self.node_infos]
            peers = [peer_of(rank, node_ids) for rank in range(self.num_workers)]
            self._finish([actor.set_peer.remote(None if peer is None else self._actors[peer])
                          for actor, peer in zip(self._actors, peers, strict=True)],
                         PROGRESS_TIMEOUT_S, "telling the ranks their peers")
        self.run = TrainingRun(
            self, [actor.train.remote(spec, checkpoint, stop_after, None, stop_signals)
                   for actor in self._actors],
            spec=spec, checkpoint=checkpoint, stop_after=stop_after, stop_signals=stop_signals,
        )
        return self.run

    def recover(self, lost: list[int]) -> Recovery:
        """Replace the `lost` ranks of this group's training in place: the
        survivors keep their processes and the training goes on from the
        newest in-memory snapshot (workers/cluster/replace.py). CannotRecover
        says why it could not (the group is left up: shut it down)."""
        if not self.in_place or self.run is None:
            raise CannotRecover("the job takes no in-memory snapshots (checkpoint."
                                "memory_every_steps 0), runs on one rank, or was never told "
                                "to train")
        return recover_in_place(self, self.run, lost)

    def move(self, ranks: list[int], avoid: set[str],
             placement_wait_s: float = PLACEMENT_WAIT_S) -> Move:
        """Move `ranks` of this group's training to nodes not in `avoid` (they
        drain), going on from the step it reached (workers/cluster/move.py);
        CannotRecover says why it could not (the group may be broken by then:
        check, and shut it down)."""
        if not self.in_place or self.run is None:
            raise CannotMove("the job takes no in-memory snapshots (checkpoint.memory_every_steps "
                             "0, or tensor parallelism), runs on one rank, or was never told "
                             "to train")
        return move_in_place(self, self.run, ranks, avoid, placement_wait_s)

    def ranks_on(self, node_ids: set[str] | dict) -> list[int]:
        """The ranks that run on any of `node_ids`."""
        return [rank for rank, info in enumerate(self.node_infos) if info.node_id in node_ids]

    def train(
        self, spec: JobSpec | dict, *, checkpoint: CheckpointTarget | dict | None = None,
        stop_after: int | None = None,
    ) -> list[list[dict]]:
        """Train to the end (or `stop_after`); one metrics dict per step, per rank."""
        return self.start_training(spec, checkpoint=checkpoint, stop_after=stop_after).wait()

    def status(self) -> GroupStatus:
        """Running, done, or preempted (every rank stopped, checkpointed,
        after a preemption notice: which ranks got it, and why, in
        `sigterm_ranks` and `reason`), with rank 0's row count and step. A
        lost, failed or hung rank raises RankLostError / RankFailedError /
        RankHungError (and shuts the group down): a hung one is found within
        the process-group timeout. Works for a group this driver did not start."""
        statuses = self._answers("status")
        steps, step = statuses[0]["steps"], statuses[0].get("step")
        ended = {st["state"] for st in statuses}
        if ended == {"done"}:
            return GroupStatus(state="done", steps=steps, step=step)
        if ended == {"preempted"}:
            sigterm = [rank for rank, st in enumerate(statuses) if st.get("sigterm")]
            where = ", ".join(rank_where(rank, self.node_infos) for rank in sigterm) or "a rank"
            return GroupStatus(
                state="preempted", steps=steps, step=step, sigterm_ranks=sigterm,
                reason=f"{where} got SIGTERM (a preemption notice): checkpointed at step "
                       f"{step} and stopped",
            )
        return GroupStatus(state="running", steps=steps, step=step)

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
        return await_answers(refs, self.pg_timeout_s, self.node_infos, self._on_rank_error, _failure)

    def request_stop(self) -> None:
        """Ask every rank to checkpoint and stop at the next step boundary."""
        self.call("request_stop")

    def signal_stop(self) -> None:
        """`request_stop`, sent without waiting for the ranks' answers (from any
        thread: the group's driver may be waiting on them meanwhile); first,
        for a training started with `stop_signals`, the signal rank 0 reads
        at its next step boundary (workers/cluster/stop_signal.py)."""
        # A rank 0 that predates stop signals says no actor id: it reads no key either.
        if self.run is not None and self.run.stop_signals and self.node_infos \
                and self.node_infos[0].actor_id:
            try:
                stop_signal.signal(self.node_infos[0].actor_id)
            except Exception as e:  # the actor calls below still reach the ranks
                logger.warning("signalling a stop to %s through the GCS: %s",
                               rank_where(0, self.node_infos), e)
        for actor in self._actors:
            if actor is not None:
                actor.request_stop.remote()

    def call(self, method: str, *args, timeout_s: float = PROGRESS_TIMEOUT_S) -> list:
        """Call a (collective) rank-actor method on every rank; results by rank."""
        if not self._actors:
            raise WorkerGroupError("the worker group is not started: call start() first")
        refs = [getattr(actor, method).remote(*args) for actor in self._actors]
        return self._finish(refs, timeout_s, method)

    # -- start, step by step ------------------------------------------------------

    def _check_capacity(self) -> None:
        """Refuse at once what no amount of waiting can place."""
        nodes = [node["Resources"] for node in ray.nodes() if node["Alive"] and (
            not self.label_selector or matches(self.label_selector, node.get("Labels") or {}))]
        check_capacity(nodes, self.num_workers, self.bundle, self.placement_strategy)
        self._gang = gang_bundles(self.num_workers, self.bundle, self.tp_size, nodes)

    def _reserve(self) -> None:
        assert self._gang is not None, "start() checks the capacity before it reserves"
        self._pg = placement_group(
            self._gang.bundles,
            strategy=self.placement_strategy,
            name=f"{self.name_prefix}-pg" if self.name_prefix else "",
            lifetime="detached" if self.detached else None,
            bundle_label_selector=self.bundle_selectors(len(self._gang.bundles)),
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
        nodes = placement_group_table(self._pg)["bundles_to_node_id"] if self.pool else {}
        infos = []
        for rank in range(self.num_workers):
            actor, info = self._spawn_rank(rank, nodes)
            self._actors.append(actor)  # one at a time: a failed .remote() leaves the rest killable
            infos.append(info)
        self.node_infos = self._finish(infos, self.ready_timeout_s, "starting the rank actors")

    def place_rank(self, rank: int, pg: PlacementGroup, bundle: int) -> None:
        """Rank `rank` runs from now on in `bundle` of `pg` (a placement group
        this group made to move it; removed with the group)."""
        self._placed[rank] = (pg, bundle)
        self._keep_moved(pg)

    def _keep_moved(self, pg: PlacementGroup) -> None:
        """Keep `pg`, a move's placement group, to remove with the group."""
        if pg not in self._moved_pgs:  # PlacementGroup compares by id
            self._moved_pgs.append(pg)

    def placed_in(self, rank: int) -> tuple[PlacementGroup | None, int | None]:
        """The placement group and bundle where rank `rank` runs (or its
        replacement would): a move's (`place_rank`), else the group's own
        (its bundle None until the group knows its bundles)."""
        if rank in self._placed:
            return self._placed[rank]
        return self._pg, None if self._gang is None else self._gang.bundle_of_rank[rank]

    def _spawn_rank(self, rank: int, nodes: dict | None = None, *, replacing: bool = False) -> tuple:
        """Rank `rank`'s actor (warm from the pool on its bundle's node, where
        Ray put the bundle and the pool has one; else cold in its bundle), and
        the reference of its `node_info`. `nodes`: where Ray put the bundles
        of the group's own placement group, where known. `replacing`: a lost
        rank's replacement (the pool refills sooner: `RankPool.take`)."""
        assert self._pg is not None and self._gang is not None
        threads = max(1, int(self.cpus_per_worker))
        pg, bundle = self.placed_in(rank)
        assert pg is not None and bundle is not None
        if self.pool and (nodes is None or pg is not self._pg):
            nodes = placement_group_table(pg)["bundles_to_node_id"]
        node = (nodes or {}).get(bundle)  # where Ray put the bundle (known only with a pool)
        actor = self.pool.take(node, replacing=replacing) if self.pool and node else None
        if actor is not None:
            if rank not in self.pooled_ranks:
                self.pooled_ranks.append(rank)
            return actor, actor.assign.remote(self.name_prefix or f"group-{id(self):x}", rank,
                                              self.num_workers, threads, self.sigterm_grace_s)
        if rank in self.pooled_ranks:
            self.pooled_ranks.remove(rank)
        env = self.pool.runtime_env(node) if self.pool and node else None
        actor = start_rank_actor(
            runtime_env=env,  # forked from the node's fork server, where it has one
            num_cpus=self.cpus_per_worker,
            num_gpus=self.gpus_per_worker,
            name=f"{self.name_prefix}-rank-{rank}" if self.name_prefix else None,
            lifetime="detached" if self.detached else None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=bundle
            ),
        ).remote(rank, self.num_workers, threads, self.sigterm_grace_s)
        return actor, actor.node_info.remote()

    def _rendezvous(self) -> None:
        same_node = len({info.node_id for info in self.node_infos}) == 1
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
        return await_ranks(refs, timeout_s, self.node_infos, self._on_rank_error)

    def _on_rank_error(self) -> None:
        """A rank was lost, failed or hung: the group goes, unless it may
        recover in place (its owner decides, and shuts it down if not)."""
        if not self.in_place:
            self.shutdown()


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
