"""A worker group that another driver started (workers/cluster/group.py
`WorkerGroup`, which mixes this in): found again by its name on the cluster
(`reclaim`: its rank actors, pooled ones among the pool's processes, its
placement group and the placement groups of the ranks it moved), taken up
whole (`attach`: every rank answers, its bundle layout read back, the training
the ranks run followed, so that this driver recovers and moves ranks as the
one that started it could), or shut down where it is not whole. A control
plane that restarts, or a replica that takes the lead, drives its jobs' groups
so."""

from __future__ import annotations

from typing import Any, Self

import ray

from workers.cluster.errors import WorkerGroupError
from workers.cluster.in_place import in_place_for
from workers.cluster.placed import moved_placement_groups
from workers.cluster.placement import GangBundles
from workers.cluster.pool import find_assigned
from workers.cluster.rank_calls import PROGRESS_TIMEOUT_S
from workers.cluster.training_run import TrainingRun


class ReattachedGroup:
    """What of a worker group finds and takes up one another driver started."""

    # the group's, used here
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    in_place: bool
    run: TrainingRun | None
    node_infos: list
    _actors: list
    _pg: Any
    _gang: GangBundles | None

    def __init__(self, *args, **kwargs) -> None:
        raise NotImplementedError  # the group's

    def shutdown(self) -> None:
        raise NotImplementedError  # the group's

    def _finish(self, refs: list, timeout_s: float, what: str) -> list:
        raise NotImplementedError  # the group's: every answer, or the ranks' error

    def _keep_moved(self, pg: Any) -> None:
        raise NotImplementedError  # the group's: a move's placement group, removed with it

    def place_rank(self, rank: int, pg: Any, bundle: int) -> None:
        raise NotImplementedError  # the group's: where `rank` runs (a move's bundle)

    @classmethod
    def attach(cls, name_prefix: str, num_workers: int, **options) -> Self:
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
        group._take_up_bundles()
        group._follow_training()
        return group

    def _take_up_bundles(self) -> None:
        """The bundle layout of a group started by another driver, read from its
        placement group (a bundle per rank, or one per tensor-parallel group),
        and the resources a rank holds: what a replacement rank is placed with."""
        assert self._pg is not None
        bundles = [dict(b) for b in self._pg.bundle_specs]
        per_bundle = max(1, self.num_workers // len(bundles))
        self._gang = GangBundles(bundles, [rank // per_bundle for rank in range(self.num_workers)])
        self.cpus_per_worker = bundles[0].get("CPU", 0.0) / per_bundle
        self.gpus_per_worker = bundles[0].get("GPU", 0.0) / per_bundle

    def _follow_training(self) -> None:
        """Take up the training the ranks run (a group started by another
        driver), so that this driver can recover a lost rank in place and move
        ranks off draining nodes as the one that started it could: the spec,
        checkpoint target and `stop_after` are rank 0's latest `train` call's,
        the peers the ranks hold already. Its `TrainingRun` has no results to
        wait on (they were the other driver's): follow it with `status`."""
        training = self._finish([self._actors[0].training.remote()], PROGRESS_TIMEOUT_S,
                                "asking the ranks what they train")[0]
        if training is None:
            return
        spec, checkpoint, stop_after, *rest = training  # a rank started before stop signals: 3
        self.in_place = in_place_for(spec, self.num_workers)
        self.run = TrainingRun(self, [None] * self.num_workers, spec=spec, checkpoint=checkpoint,
                               stop_after=stop_after, stop_signals=bool(rest and rest[0]))

    @classmethod
    def reclaim(cls, name_prefix: str, num_workers: int, *, pool_prefix: str | None = None,
                **options) -> Self:
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
        for pg, ranks in moved_placement_groups(name_prefix):  # oldest first: a later move wins
            group._keep_moved(pg)  # removed with the group, whoever runs there
            for bundle, rank in enumerate(ranks):
                if rank < num_workers:
                    group.place_rank(rank, pg, bundle)
        return group
