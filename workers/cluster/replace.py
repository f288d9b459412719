"""Recovery in place, carried out on a live worker group: the lost ranks'
processes go, the survivors keep theirs, a replacement takes each lost
rank's place (warm from the pool, or cold in its bundle), every rank joins
a new process group and restores the newest snapshot step that all of them
have somewhere (workers/cluster/in_place.py), and training goes on from it.

Whatever stops that (a rank and the peer holding its copy both lost, no
snapshot yet, a replacement that cannot be placed, a second failure while
it happens) raises `CannotRecover` saying why; the group is then left as it
is, for its owner to shut down and restart from the last disk checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from workers.cluster.in_place import CannotRecover, Holdings, peer_of, plan_restore
from workers.cluster.rank_info import rank_where
from workers.cluster.snapshot_peer import Rejoin

# The group and its training run (workers/cluster/group.py WorkerGroup and
# workers/cluster/training_run.py TrainingRun) are passed in: this module is the
# group's, and imports neither.
WorkerGroup = Any
TrainingRun = Any

POLL_S = 0.05
ANSWER_TIMEOUT_S = 10.0  # a quick query of a live rank during the recovery
NAME_FREE_S = 10.0  # a lost rank's actor name, freed by Ray a moment after its death


@dataclass(frozen=True)
class Recovery:
    """A recovery in place that worked: the ranks replaced, the snapshot
    step every rank restored, the seconds from its start to the new group
    formed, where the lost ranks had run, and the step training had reached
    when they were lost (the survivors' furthest; never below `step`)."""

    ranks: list[int]
    step: int
    seconds: float
    where: str
    reached: int

    @property
    def replaced_rank0(self) -> bool:
        """Rank 0 (whose rows the driver reads) is a new process: its rows start again."""
        return 0 in self.ranks


def recover_in_place(group: WorkerGroup, run: TrainingRun, lost: list[int]) -> Recovery:
    """Replace `lost` ranks of `group`, whose training `run` goes on from the
    newest snapshot every rank has; CannotRecover (nothing shut down) where it cannot."""
    started = time.monotonic()
    lost = sorted(set(lost))
    kill_ranks(group, lost)  # a rank that raised still lives: it is replaced all the same
    holdings = survivors_recovering(group, lost)  # adds to `lost` a survivor found dead
    where = ", ".join(rank_where(rank, group.node_infos) for rank in lost)
    step = go_on_without(group, run, lost, holdings)
    reached = max([step, *(h["step"] for h in holdings if h.get("step") is not None)])
    return Recovery(ranks=lost, step=step, seconds=time.monotonic() - started, where=where,
                    reached=reached)


def go_on_without(group: WorkerGroup, run: TrainingRun, lost: list[int], holdings: list[dict]) -> int:
    """The group's next process group once the `lost` ranks are gone and
    every other rank waits to rejoin (`holdings`, theirs): a replacement in
    each lost rank's place (its bundle: `WorkerGroup.place_rank`), every rank
    restoring the newest snapshot step all of them have somewhere; that step."""
    world = group.num_workers
    plan = plan_restore(world, [Holdings(h["rank"], tuple(h["own"]), dict(h["held"]))
                                for h in holdings if h["rank"] not in lost])
    _replace(group, lost)
    node_ids = [info.node_id for info in group.node_infos]
    same_node = len(set(node_ids)) == 1
    addr, port = _get(group._actors[0].choose_rendezvous.remote(same_node, group.pg_timeout_s),
                      ANSWER_TIMEOUT_S, "choosing the new rendezvous")
    before = {h["rank"]: h["generation"] for h in holdings if h["rank"] not in lost}
    for rank in range(world):
        peer = peer_of(rank, node_ids)
        source = plan.sources[rank]
        rejoin = Rejoin(addr=addr, port=port, step=plan.step,
                        source=None if source == rank else group._actors[source],
                        peer=None if peer is None else group._actors[peer],
                        timeout_s=group.pg_timeout_s, join_timeout_s=group.ready_timeout_s)
        actor = group._actors[rank]
        if rank in lost:
            run.replace(rank, actor.train.remote(run.spec, run.checkpoint, run.stop_after, rejoin,
                                                   run.stop_signals))
        else:
            actor.rejoin.remote(rejoin)
    _await_formed(group, before)
    return plan.step


def kill_ranks(group: WorkerGroup, ranks: list[int]) -> None:
    for rank in ranks:
        actor = group._actors[rank]
        if actor is not None:
            ray.kill(actor, no_restart=True)


def survivors_recovering(group: WorkerGroup, lost: list[int]) -> list[dict]:
    """The survivors' holdings once every one has left the broken group
    (a collective with a lost rank fails at once; one in the middle of a
    step gets there at its next collective). A survivor found dead joins
    `lost`; one that failed or finished ends the recovery."""
    deadline = time.monotonic() + group.pg_timeout_s + ANSWER_TIMEOUT_S
    while True:
        survivors = [rank for rank in range(group.num_workers) if rank not in lost]
        if not survivors:
            raise CannotRecover("every rank of the group is lost")
        refs = {rank: group._actors[rank].holdings.remote() for rank in survivors}
        answers, dead = [], []
        for rank, ref in refs.items():
            try:
                answers.append(ray.get(ref, timeout=ANSWER_TIMEOUT_S))
            except GetTimeoutError:
                raise CannotRecover(f"rank {rank} did not answer within {ANSWER_TIMEOUT_S:g} s") from None
            except RayError:  # lost too (killed at once with the first)
                dead.append(rank)
        if dead:
            lost[:] = sorted({*lost, *dead})
            kill_ranks(group, dead)
            continue
        states = {h["rank"]: h["state"] for h in answers}
        ended = {rank: state for rank, state in states.items() if state not in ("running", "recovering")}
        if ended:
            raise CannotRecover(f"surviving rank(s) did not wait to rejoin: {ended}")
        if all(state == "recovering" for state in states.values()):
            return answers
        if time.monotonic() > deadline:
            still = sorted(rank for rank, state in states.items() if state == "running")
            raise CannotRecover(f"rank(s) {still} did not leave the broken process group within "
                                f"{group.pg_timeout_s + ANSWER_TIMEOUT_S:g} s")
        time.sleep(POLL_S)


def _replace(group: WorkerGroup, lost: list[int]) -> None:
    """A new actor in each lost rank's place, started and answering."""
    infos = {}
    for rank in lost:
        if group.name_prefix:
            _await_name_free(f"{group.name_prefix}-rank-{rank}")
        actor, infos[rank] = group._spawn_rank(rank, replacing=True)
        group._actors[rank] = actor
    for rank, ref in infos.items():
        try:
            group.node_infos[rank] = _get(ref, group.ready_timeout_s, f"starting rank {rank}'s replacement")
        except CannotRecover as e:
            kill_ranks(group, lost)
            raise CannotRecover(f"the replacement of rank {rank} could not be placed: {e}") from None


def _await_name_free(name: str) -> None:
    deadline = time.monotonic() + NAME_FREE_S
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            return
        time.sleep(POLL_S)
    raise CannotRecover(f"the lost rank's actor name {name} was not freed within {NAME_FREE_S:g} s")


def _await_formed(group: WorkerGroup, before: dict[int, int]) -> None:
    """Every rank in the new process group (a survivor's count of groups
    joined went up, a replacement joined its first) and training again."""
    deadline = time.monotonic() + group.ready_timeout_s + group.pg_timeout_s
    while True:
        try:
            statuses = ray.get([actor.status.remote() for actor in group._actors],
                               timeout=ANSWER_TIMEOUT_S)
        except (RayError, GetTimeoutError) as e:
            raise CannotRecover(f"a second failure during the recovery: {_first_line(e)}") from None
        failed = {rank: st["error"] for rank, st in enumerate(statuses) if st["state"] == "failed"}
        if failed:
            raise CannotRecover(f"a second failure during the recovery: {failed}")
        if all(st["generation"] > before.get(rank, 0) and st["state"] != "recovering"
               for rank, st in enumerate(statuses)):
            return
        if time.monotonic() > deadline:
            waiting = [rank for rank, st in enumerate(statuses) if st["state"] == "recovering"]
            raise CannotRecover(f"rank(s) {waiting} did not join the new process group in time")
        time.sleep(POLL_S)


def _get(ref: Any, timeout_s: float, what: str) -> Any:
    try:
        return ray.get(ref, timeout=timeout_s)
    except GetTimeoutError:
        raise CannotRecover(f"{what} took longer than {timeout_s:g} s") from None
    except RayError as e:
        raise CannotRecover(f"{what}: {_first_line(e)}") from None


def _first_line(error: BaseException) -> str:
    return str(error).strip().split("\n", 1)[0]
