"""Where a job runner meets its worker group: the control plane's `launch`
for a job's attempt (a `WorkerGroup`, started and training). A test hands the
runner a fake instead (tests/service/test_runner.py).

A group is detached and named by (job, attempt), so that a control plane
that restarts finds it again by name (`Supervisor.reconcile`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.lifecycle import GroupOutcome
from workers.errors import WorkerGroupError
from workers.group import WorkerGroup

if TYPE_CHECKING:
    from service.store import JobRecord


def group_name(job_id: str, attempt: int) -> str:
    return f"brigade-{job_id}-a{attempt}"


def launch_group(job: JobRecord, checkpoint: dict, *, pg_timeout_s: float) -> WorkerGroup | GroupOutcome:
    """The job's current attempt (`job.workers` ranks), started and training
    from its latest checkpoint under `checkpoint` (a `CheckpointTarget` as a
    dict); or how its start failed, with nothing of it left on the cluster."""
    assert job.workers is not None, "a job is launched at the size its admission or restart gave"
    spec = job.spec
    group = WorkerGroup(
        job.workers,
        cpus_per_worker=spec.resources_per_worker.cpu,
        gpus_per_worker=spec.resources_per_worker.gpu,
        name_prefix=group_name(job.id, job.attempt),
        placement_strategy=spec.placement,
        tp_size=spec.parallelism.tp,  # a TP group's ranks share a node where they can
        detached=True,
        pg_timeout_s=pg_timeout_s,
    )
    try:
        group.start()
        group.start_training(spec, checkpoint=checkpoint)
    except (WorkerGroupError, ValueError) as e:
        group.shutdown()  # whatever of it started: no actor or bundle outlives the attempt
        return GroupOutcome.start_failed(e, group.node_infos)
    return group
