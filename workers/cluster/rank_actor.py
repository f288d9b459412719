"""One rank of a job, as a Ray actor: it joins the process group and trains.

Defined as a plain class; `WorkerGroup` wraps it with `ray.remote` and places
one per bundle. torch and the engine are imported inside the methods, so the
control plane can import this module without torch. The group creates it with
`max_concurrency=3`: one thread runs `train` while the others answer
`progress` and the calls of its peers (a snapshot copy to keep, one to give
back: recovery in place, workers/cluster/in_place.py). What touches torch's
process groups (`preload`, `setup`, `train`, `state_digests`) runs on one
thread of its own, the same one every time (`ENGINE`, a Ray concurrency
group of one): some of torch's distributed state is the thread's, and a
training on another thread than the one before it (a peer's snapshot copy
taking the pool's first free thread) hung at its first step under tensor
parallelism.

SIGTERM (what a spot reclaim or a node drain sends a process before killing
it) is a preemption notice, not a crash: the actor installs its own handler
in its constructor, which Ray runs on the worker's main thread, replacing
Ray's (which would exit the process at once). While `train` runs, the
handler only raises a flag: the ranks agree at the next step boundary to
stop, take a blocking checkpoint of that step, and `train` returns with
`status()["state"] == "preempted"`. If that does not happen within the grace
period, the process exits hard. Outside `train` there is nothing to save,
and SIGTERM ends the process as Ray's handler would.

A pooled rank (workers/cluster/pool.py) is made before its job exists: `preload`
imports torch and the engine while it waits, and `assign` makes it one
rank of one group, once: a second `assign` is refused, so a process never
serves two jobs (the group kills it when it ends).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

import ray

from workers.cluster import stop_signal
from workers.cluster.in_place import in_place_for
from workers.cluster.rank_info import RankInfo
from workers.cluster.rank_output import OutputCapture
from workers.cluster.rank_recovery import RecoveringRank
from workers.cluster.snapshot_peer import Rejoin
from workers.engine import distributed
from workers.schema import JobSpec

if TYPE_CHECKING:
    from checkpoints import CheckpointTarget

logger = logging.getLogger(__name__)
ENGINE = "engine"  # the concurrency group (one thread) of the methods that run torch's collectives
SIGTERM_GRACE_S = 30.0  # from SIGTERM to a checkpointed stop, before the process exits hard


class _RendezvousStore(Protocol):
    """What this module uses of rank 0's store (a torch TCPStore: torch is
    imported inside the methods, never by this module)."""

    @property
    def port(self) -> int: ...


class RankActor(RecoveringRank):
    def __init__(
        self, rank: int, world_size: int, num_threads: int, sigterm_grace_s: float = SIGTERM_GRACE_S
    ):
        # When each start-up phase of this rank ended (epoch seconds): `timeline`.
        self._timeline: dict[str, float] = {"actor_started": time.time()}
        self.rank = rank
        self._actor_id = ray.get_runtime_context().get_actor_id() or ""  # a stop signal's address
        self.world_size = world_size
        self.num_threads = num_threads
        # Before torch is imported: its OpenMP pool must not outnumber our CPUs.
        os.environ["OMP_NUM_THREADS"] = str(num_threads)
        self._metrics: list[dict] = []
        self._state = "idle"  # idle | running | done | preempted | failed
        self._error: str | None = None
        self._stop_requested = False
        self._watch: stop_signal.StopWatch | None = None  # rank 0 of a training with stop signals
        self._sigterm_at: float | None = None  # wall time of the preemption notice, if one came
        self._sigterm_grace_s = sigterm_grace_s
        # the SIGTERM handler ours replaced (Ray's), as signal.getsignal returns it
        self._ray_sigterm: Callable[[int, FrameType | None], Any] | int | None = None
        self._store: _RendezvousStore | None = None  # rank 0's rendezvous store, from choose_rendezvous
        self._group: str | None = None  # a pooled rank's group, once assigned (`assignment`)
        self._init_recovery()  # recovery in place and moves: workers/cluster/rank_recovery.py
        self._generation = 0  # process groups this rank has joined
        # What the latest `train` call was given (spec, checkpoint, stop_after): a driver
        # that reattaches to the group follows that training (`WorkerGroup.attach`).
        self._training: tuple | None = None
        self._trainer: Any = None  # the current training's Trainer (workers/engine/trainer.py), once built
        self._install_sigterm_handler()
        # The process's stdout and stderr, for the job's log (Ray's log files keep them too).
        self._output = OutputCapture().start()

    @ray.method(concurrency_group=ENGINE)
    def preload(self) -> int:
        """Import torch and the engine now (a pooled rank, before its job):
        the seconds they take are not a job's (workers/engine/preload.py).
        Returns the pid."""
        from workers.engine.preload import import_engine, import_torch

        import_torch()
        self._timeline["torch_imported"] = time.time()
        import_engine()
        self._timeline["engine_imported"] = time.time()
        return os.getpid()

    def assign(self, group: str, rank: int, world_size: int, num_threads: int,
               sigterm_grace_s: float = SIGTERM_GRACE_S) -> RankInfo:
        """Make this pooled process rank `rank` of `group` (once: never a
        second group, whatever became of the first); its `node_info`."""
        if self._group is not None:
            raise RuntimeError(f"this process is rank {self.rank} of {self._group} already: "
                               "a pooled rank serves one group")
        self._group = group
        self.rank, self.world_size, self.num_threads = rank, world_size, num_threads
        self._sigterm_grace_s = sigterm_grace_s
        self._output.take()  # what it printed while pooled is no job's
        self._timeline["actor_started"] = time.time()
        return self.node_info()

    def assignment(self) -> tuple[str, int] | None:
        """(group, rank) of a pooled process once assigned, else None."""
        return None if self._group is None else (self._group, self.rank)

    def node_info(self) -> RankInfo:
        """Where this rank runs."""
        return RankInfo(
            node_id=ray.get_runtime_context().get_node_id(),
            node_ip=ray.util.get_node_ip_address(),
            pid=os.getpid(),
            gpu_ids=list(ray.get_gpu_ids()),
            actor_id=self._actor_id,
        )

    def choose_rendezvous(self, same_node: bool, timeout_s: float) -> tuple[str, int]:
        """Rank 0 only: where the others meet it."""
        # Ray's node IP cannot be moved to loopback; on one node we need not use it.
        addr = distributed.LOOPBACK if same_node else ray.util.get_node_ip_address()
        # Listening before the port is handed out: no other process can take it.
        store = self._store = distributed.open_store(addr, self.world_size, timeout_s)
        return addr, store.port

    @ray.method(concurrency_group=ENGINE)
    def setup(self, addr: str, port: int, timeout_s: float, join_timeout_s: float | None = None) -> str:
        """Join the process group once every rank has arrived (within
        `join_timeout_s`); returns the backend (NCCL on a GPU, else gloo)."""
        return self._setup(addr, port, timeout_s, join_timeout_s)

    def _setup(self, addr: str, port: int, timeout_s: float, join_timeout_s: float | None) -> str:
        import torch

        self._timeline.setdefault("torch_imported", time.time())
        torch.set_num_threads(self.num_threads)
        rv = distributed.Rendezvous(
            master_addr=addr,
            master_port=port,
            rank=self.rank,
            world_size=self.world_size,
            timeout_s=timeout_s,
            join_timeout_s=join_timeout_s,
        )
        store = self._store if self.rank == 0 else distributed.connect_store(rv)
        with self._sockets.making():
            backend = distributed.init_process_group(rv, store)
        self._generation += 1
        self._backend = backend
        self._timeline["joined"] = time.time()
        return backend

    @ray.method(concurrency_group=ENGINE)
    def train(
        self, spec: JobSpec, checkpoint: CheckpointTarget | None = None,
        stop_after: int | None = None, rejoin: Rejoin | None = None,
        stop_signals: bool = False,
    ) -> list[dict]:
        """Run the job's entry point (`ENTRY_POINTS`, by its kind): a training
        runs to the end of the job or `stop_after`, resuming from the
        checkpoint target's latest committed step when one is given. The spec
        comes parsed and checked for this world size by the group
        (`WorkerGroup.start_training`): the engine takes it as it is.
        `rejoin`: this rank replaces a lost one in a running group: it joins
        the group's new process group and starts from the snapshot the plan
        names (recovery in place), not from the checkpoint.
        `stop_signals`: rank 0 asks the GCS after every step whether the
        driver signalled a stop (workers/cluster/stop_signal.py: a pruned
        sweep trial stops at the step boundary after the verdict)."""
        self._timeline.setdefault("engine_imported", time.time())
        # An earlier training's trainer and snapshots go before this one says it
        # runs: a status read between the two would give the old step as this one's.
        self._trainer = None
        if rejoin is None:  # a training from its start: an earlier one's snapshots are not its
            self._own, self._held = [], {}
            self._sender.new_training()
        self._metrics, self._error = [], None
        self._training = (spec, checkpoint, stop_after, stop_signals)
        self._stop_requested = False
        self._watch = stop_signal.StopWatch(self._actor_id) if stop_signals and self.rank == 0 else None
        if self._watch is not None and rejoin is None:
            stop_signal.clear(self._watch.actor_id)  # a stop meant for an earlier training here
        if rejoin is not None:
            self._rejoin.put(rejoin)
        self._state = "running"
        try:
            rows, self._state = ENTRY_POINTS[spec.kind](self, spec, checkpoint, stop_after)
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            self._state, self._error = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            if self._watch is not None:
                stop_signal.clear(self._watch.actor_id)
        return rows

    def _train(self, spec: JobSpec, checkpoint: CheckpointTarget | None,
               stop_after: int | None) -> tuple[list[dict], str]:
        """A training job (kind 'train'): its rows, and "done" or "preempted"."""
        from workers.engine.trainer import Trainer

        # Recovery in place needs a peer to hold this rank's copy, and a snapshot interval.
        in_place = in_place_for(spec, self.world_size)
        restore = self._join_next_group() if not self._rejoin.empty() else None
        by_step: dict[int, dict] = {}  # this call's rows: a step redone after a recovery once
        self._timeline.pop("compiled", None)  # an earlier train's, on this actor
        while True:
            try:
                with self._sockets.making():  # the trainer's meshes and checkpoint group
                    self._trainer = Trainer(spec, checkpoint, restore=restore,
                                            snapshots=self._own if restore is not None else None)
                if in_place:
                    self._learn_peers_sockets()
                self._timeline.setdefault("built", time.time())  # the model built (and loaded)
                if self._trainer.warm_up():  # train.compile: the blocks compiled before the first step
                    self._timeline.setdefault("compiled", time.time())
                # Rows a checkpoint carried (not read before the last group ended)
                # come first, marked: the driver records those it does not have.
                self._trainer.acknowledges = self.rank == 0  # the driver reads rank 0's rows
                if restore is None or not self._metrics:  # a start, or a replacement's
                    self._metrics = [{**row, "replayed": True}
                                     for row in self._trainer.state.unrecorded()]
                rows = self._trainer.run(self._record, stop_after, should_stop=self._should_stop,
                                         on_snapshot=self._sender.send if in_place else None,
                                         delivered=self._sender.delivered if in_place else None,
                                         handover_s=self._sender.handover_s if in_place else None)
                by_step.update((row["step"], row) for row in rows)
                if self._trainer.stop_reason != "move":
                    break
                self._move_out()
                restore = self._join_next_group()
                continue
            except Exception as e:
                if not (in_place and distributed.is_peer_failure(e)):
                    raise
                logger.warning("rank %d: a peer is gone (%s): waiting to join the group's next "
                               "process group", self.rank, str(e).split("\n", 1)[0])
            # Left out of the except clause, whose traceback holds the failed
            # trainer (its model, its groups) for as long as the clause runs.
            self._leave_group()
            restore = self._join_next_group()
        # Stopped short by a preemption notice (here or on another rank): the
        # driver requeues the job rather than calling it done.
        state = "preempted" if self._trainer.stop_reason == "preempted" else "done"
        return [by_step[step] for step in sorted(by_step)], state

    def _prepare(self, spec: JobSpec, checkpoint: CheckpointTarget | None,
                 stop_after: int | None) -> tuple[list[dict], str]:
        """A dataset's preparation (kind 'prepare'): its steps are files."""
        from workers.datasets.prepare_job import prepare_on_ranks

        assert spec.prepare is not None  # the spec requires it with kind 'prepare'
        return prepare_on_ranks(spec.prepare, self._record), "done"

    def status(self) -> dict:
        """Where `train` is: for a driver that lost its call (it restarted).
        `sigterm`: whether this rank's process got the preemption notice."""
        trainer = getattr(self, "_trainer", None)
        return {
            "state": self._state,
            "steps": len(self._metrics),
            "step": trainer.step if trainer is not None else None,
            "error": self._error,
            "sigterm": self._sigterm_at is not None,
            "generation": self._generation,  # process groups joined: a recovery adds one
        }

    def request_stop(self) -> None:
        """Ask `train` to checkpoint and stop at the next step boundary (all
        ranks agree on which: see `Trainer.run`)."""
        self._stop_requested = True

    def _should_stop(self) -> int:
        from workers.engine.trainer import STOP_MOVE, STOP_PREEMPTED, STOP_REQUESTED

        if self._sigterm_at is not None:
            return STOP_PREEMPTED
        if not self._stop_requested and self._watch is not None and self._watch.asked():
            self._stop_requested = True
        if self._stop_requested:
            return STOP_REQUESTED
        return STOP_MOVE if self._move_requested else 0

    # -- the preemption notice --------------------------------------------------

    def _install_sigterm_handler(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            # signal.signal works on the main thread only; Ray runs actor
            # constructors there, so this is a Ray change worth hearing about.
            logger.error("rank %d: not on the main thread: SIGTERM will kill this rank", self.rank)
            return
        self._ray_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        if self._state != "running":
            logger.warning("rank %d: SIGTERM while %s: exiting", self.rank, self._state)
            self._exit_as_ray_would(signum, frame)
            return
        if self._sigterm_at is not None:
            return  # already stopping
        self._sigterm_at = time.time()
        logger.warning(
            "rank %d: SIGTERM (preemption notice): checkpointing at the next step boundary, "
            "then stopping (grace %gs)", self.rank, self._sigterm_grace_s,
        )
        threading.Thread(target=self._enforce_grace, name="sigterm-grace", daemon=True).start()

    def _enforce_grace(self) -> None:
        deadline = time.monotonic() + self._sigterm_grace_s
        while self._state == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._state == "running":
            logger.error("rank %d: not stopped %gs after SIGTERM: exiting", self.rank,
                         self._sigterm_grace_s)
            os._exit(1)

    def _exit_as_ray_would(self, signum, frame) -> None:
        previous = self._ray_sigterm
        if callable(previous):
            previous(signum, frame)  # Ray's: raises SystemExit, and the worker exits
        os._exit(128 + signum)

    def timeline(self) -> dict[str, float]:
        """When this rank's start-up phases ended, epoch seconds: actor_started
        (its constructor ran), torch_imported, joined (the process group),
        engine_imported, built (the model, and a checkpoint loaded), and
        with train.compile compiled (the blocks, workers/engine/compilation.py)."""
        return dict(self._timeline)

    @ray.method(concurrency_group=ENGINE)
    def state_digests(self) -> dict[str, str]:
        """Digests of the last trainer's full state (collective: all ranks at once)."""
        return self._trainer.state_digests()

    def _record(self, metrics: dict) -> None:
        self._metrics.append(metrics)

    def progress(self, since: int = 0) -> list[dict]:
        """The steps recorded so far by the running (or last) `train`, from
        `since` on: the rows before `since` the driver has recorded."""
        trainer = getattr(self, "_trainer", None)
        if trainer is not None and 0 < since <= len(self._metrics):
            trainer.state.acknowledge(self._metrics[since - 1]["step"])
        return self._metrics[since:]

    def take_output(self) -> list[str]:
        """This rank's stdout and stderr lines since the last take (bounded:
        `workers.cluster.rank_output`)."""
        return self._output.take()

    def pid(self) -> int:
        return os.getpid()


# The entry point of each kind of job (`JobSpec.kind`): (the rank, the spec,
# the checkpoint target, stop_after) -> (its rows, the final state).
ENTRY_POINTS: dict[str, Callable[[RankActor, JobSpec, CheckpointTarget | None, int | None],
                                 tuple[list[dict], str]]] = {
    "train": RankActor._train,
    "prepare": RankActor._prepare,
}
