"""Where a job runner meets its worker group: the control plane's `launch`
for a job's attempt (a `WorkerGroup`, started and training). A test hands the
runner a fake instead (tests/service/run/test_runner.py).

A group is detached and named by (job, attempt), so that a control plane
that restarts finds it again by name (`service.control.reconcile`).

An attempt's start-up, phase by phase (`startup_phases`), goes on its first
metrics row (`startup`) and into its log: where the seconds from launch to
the first step went.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from service.run.lifecycle import GroupOutcome
from workers.cluster.errors import WorkerGroupError
from workers.cluster.group import WorkerGroup

if TYPE_CHECKING:
    from checkpoints import CheckpointTarget
    from service.store import JobRecord
    from service.store.flavors import FlavorStore
    from workers.cluster.pool import RankPool


# The start-up's phases in the order they end, each (the timeline's key, what the log calls
# it): a group's own (workers/cluster/group.py `startup`) and its slowest rank's (`RankActor.timeline`).
# A phase over before the one ahead of it (torch imported in a pooled process) takes 0 s.
STARTUP_PHASES = (
    ("placement_ready", "placement group"),
    ("actors_ready", "actors"),
    ("torch_imported", "torch import"),
    ("group_formed", "process group"),
    ("engine_imported", "engine import"),
    ("built", "model build"),
    ("compiled", "compile"),  # train.compile only (workers/engine/compilation.py)
    ("first_step", "first step"),
)


def startup_phases(timeline: dict[str, float], first_step_at: float) -> dict[str, float]:
    """Seconds each start-up phase took, from the group's start to the first
    step's end (`first_step_at`, epoch seconds), by the timeline's keys, and
    "total"; empty without a timeline (a group reattached after a restart)."""
    if "start" not in timeline:
        return {}
    times = {**timeline, "first_step": first_step_at}
    phases, last = {}, timeline["start"]
    for key, _ in STARTUP_PHASES:
        if key in times:
            phases[key] = max(0.0, times[key] - last)
            last = max(last, times[key])
    phases["total"] = max(0.0, first_step_at - timeline["start"])
    return phases


def startup_line(attempt: int, phases: dict[str, float]) -> str:
    """The log's line for an attempt's start-up phases."""
    parts = ", ".join(f"{label} {phases[key]:.2f} s" for key, label in STARTUP_PHASES
                      if key in phases)
    return f"start-up of attempt {attempt}: first step {phases['total']:.2f} s after its launch ({parts})"


GROUP_PREFIX = "brigade-j-"  # every job's worker group's name begins so (job ids: `j-...`)


def group_name(job_id: str, attempt: int) -> str:
    return f"brigade-{job_id}-a{attempt}"


def group_of_name(name: str) -> tuple[str, int] | None:
    """(job id, attempt) of a worker group's name (`group_name`'s), or None."""
    found = re.fullmatch(r"brigade-(j-[0-9a-f]+)-a([0-9]+)", name)
    return (found.group(1), int(found.group(2))) if found else None


def launch_group(job: JobRecord, checkpoint: CheckpointTarget, *, pg_timeout_s: float,
                 pool: RankPool | None = None,
                 flavors: FlavorStore | None = None) -> WorkerGroup | GroupOutcome:
    """The job's current attempt (`job.workers` ranks), started and training
    from its latest checkpoint under `checkpoint` (handed to the ranks as
    itself), its ranks' processes warm ones from `pool` where it has them, on
    the nodes of its flavor (its labels as `flavors` has them now: every
    bundle asks for them); or how its start failed, with nothing of it left
    on the cluster."""
    assert job.workers is not None, "a job is launched at the size its admission or restart gave"
    spec = job.spec
    selector = None
    if (name := spec.resources_per_worker.flavor) is not None:
        flavor = flavors.get(name) if flavors is not None else None
        if flavor is None:
            return GroupOutcome.start_failed(
                WorkerGroupError(f"flavor {name} is not known: its nodes cannot be told"), [])
        selector = flavor.labels
    group = WorkerGroup(
        job.workers,
        cpus_per_worker=spec.resources_per_worker.cpu,
        gpus_per_worker=spec.resources_per_worker.gpu,
        name_prefix=group_name(job.id, job.attempt),
        placement_strategy=spec.placement,
        tp_size=spec.parallelism.tp,  # a TP group's ranks share a node where they can
        detached=True,
        pg_timeout_s=pg_timeout_s,
        pool=pool,
        label_selector=selector,
    )
    try:
        group.start()
        # A sweep's trial may be pruned at any step: its rank 0 looks for the stop itself.
        group.start_training(spec, checkpoint=checkpoint, stop_signals=job.sweep is not None)
    except (WorkerGroupError, ValueError) as e:
        group.shutdown()  # whatever of it started: no actor or bundle outlives the attempt
        return GroupOutcome.start_failed(e, group.node_infos)
    return group
