"""The submit checks: one ordered list, `CHECKS`, run by `intake` on the spec
the route parsed, for every job submitted (`POST /v1/jobs`, `POST /v1/datasets`,
the dashboard's YAML: all through `JobRequests.submit`).

Each check guards a field (or a section) and refuses with the error the API
has always answered: a `SpecError` at the field (422), `CapacityError` (422 at
`workers`), `JobNotFound` for an `init.job` the tenant cannot reach (404). A
check returns the spec, fixed where it fixes something, so that the checks
after it see what will be stored. In order, the pure ones first, those that
read files next, the cluster last:

1. `operator_only`: knobs the platform's own tools set, not a job
   (`sharding.grad_error_feedback`)
2. `tracking.wandb`: the service has Weights & Biases' client (the `wandb`
   extra) for a job that asks for a W&B run
3. `uris`: a relative uri (`datasets/corpus`) is read under the tenant's data
   prefix, and stored whole (`service.intake.relative_uris`)
4. `model.config_uri`: the Hugging Face config.json under the tenant's data
   prefix, read into the model's fields (`service.intake.model_config`)
5. `after`: the jobs it waits on are the tenant's own, and none has failed
   (`service.intake.dependencies`)
6. `data`: every uri the job names (`data.*`, `eval.uri`, `prepare.*`) under
   the tenant's data prefix (`service.intake.data_access`), and there, read as
   the ranks will read it (`workers.datasets.checks`, through fsspec with the
   data's storage options): a byte-level file (`data.source: uri`) that is
   missing, a folder, unreadable or shorter than a window, token data whose
   index says otherwise (a missing shard, a size or checksum that does not
   match, a tokenizer that does not parse, a vocabulary the model does not
   cover), a text file or tokenizer that is not there is a 422 naming the
   field and the file, not a job that fails later; not yet for data that a
   prepare job it waits on is still making (under that job's output)
7. `init`: a model directory whose headers fit the model, or one of the
   tenant's jobs: a committed checkpoint of it, or one still running to wait
   for (`service.intake.init_source`)
8. `resources_per_worker.flavor`: a flavor the admin put, within the
   tenant's quota on it, and its nodes could ever place the job at its
   smallest size (`service.intake.flavors`)
9. `workers`: the job could ever be placed, at its smallest size
10. `resources_per_worker.memory_gb`: the model's sharded state fits one
   worker's memory (that field's, or else the smallest share of the nodes
   it may run on: the refusal is then at `model`) at every size the job may
   run at
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.intake.data_access import check_data_uri
from service.intake.dependencies import check_after, pending_datasets, reads_pending
from service.intake.flavors import check_flavor, flavor_labels
from service.intake.init_source import resolve_init
from service.intake.model_config import resolve_model
from service.intake.relative_uris import resolve_relative
from service.run.ray_cluster import cluster_capacity, never_fits, worker_memory_bytes
from service.scheduling.memory_fit import GB, MemoryFitPolicy, model_size, remedies, shard_degrees
from workers.cluster.errors import CapacityError
from workers.schema import URI_SOURCES, JobSpec, SpecError

if TYPE_CHECKING:
    from checkpoints import CheckpointStore
    from service.store import JobRecord, JobStore


@dataclass(frozen=True)
class Submission:
    """What the checks read besides the spec."""

    tenant: str
    data_root: str  # the tenants' data prefixes lie under it
    store: JobStore  # the jobs an `init.job` may name
    checkpoints_of: Callable[[JobRecord], CheckpointStore]


@dataclass(frozen=True)
class Check:
    field: str  # the field (or section) it guards
    run: Callable[[JobSpec, Submission], JobSpec]  # the spec, fixed or as it was; refuses otherwise


def operator_only(spec: JobSpec, submission: Submission) -> JobSpec:
    if knobs := spec.operator_only_set():
        raise SpecError(knobs[0], f"{knobs[0]} is operator-only: set by the platform's own "
                                  "tools (an engine YAML, a benchmark), not by a job")
    return spec


def wandb_client(spec: JobSpec, submission: Submission) -> JobSpec:
    if spec.tracking.wandb is not None and importlib.util.find_spec("wandb") is None:
        raise SpecError("tracking.wandb", "tracking.wandb: this service has no Weights & Biases "
                                          "client (its operator installs brigade[wandb])")
    return spec


def uris(spec: JobSpec, submission: Submission) -> JobSpec:
    return resolve_relative(spec, submission.tenant, submission.data_root)


def model_config(spec: JobSpec, submission: Submission) -> JobSpec:
    return resolve_model(spec, submission.tenant, submission.data_root)


def after(spec: JobSpec, submission: Submission) -> JobSpec:
    return check_after(spec, submission.tenant, submission.store)


def job_data(spec: JobSpec, submission: Submission) -> JobSpec:
    if spec.prepare is not None:  # a dataset's preparation (service.intake.dataset_jobs)
        from service.intake.dataset_jobs import check_prepare

        check_prepare(spec.prepare, submission.tenant, submission.data_root)
    uris = dict(spec.data.uris())
    if spec.eval is not None and spec.eval.uri is not None:
        uris["eval.uri"] = spec.eval.uri
    for field, uri in uris.items():
        check_data_uri(uri, submission.tenant, submission.data_root, field=field)
    if spec.data.source in URI_SOURCES and not _data_of_dependency(spec, submission):
        from workers.datasets.checks import check_job_data  # reads the file, or the index and shards

        check_job_data(spec)
    return spec


def _data_of_dependency(spec: JobSpec, submission: Submission) -> bool:
    """Whether the job reads a dataset that a prepare job it waits on is still making."""
    if not spec.after and (spec.init is None or spec.init.job is None):
        return False
    tenant, root = submission.tenant, submission.data_root
    return reads_pending(spec, pending_datasets(spec, tenant, root, submission.store), tenant, root)


def init_source(spec: JobSpec, submission: Submission) -> JobSpec:
    return resolve_init(spec, submission.tenant, data_root=submission.data_root,
                        store=submission.store, checkpoints_of=submission.checkpoints_of)


def flavor(spec: JobSpec, submission: Submission) -> JobSpec:
    return check_flavor(spec, submission.tenant, submission.store)


def placeable(spec: JobSpec, submission: Submission) -> JobSpec:
    check_fits(spec, spec.min_workers)
    return spec


def memory(spec: JobSpec, submission: Submission) -> JobSpec:
    check_memory(spec, spec.world_sizes(), flavor_labels(spec, submission.store))
    return spec


CHECKS: tuple[Check, ...] = (
    Check("operator_only", operator_only),
    Check("tracking.wandb", wandb_client),
    Check("uris", uris),
    Check("model.config_uri", model_config),
    Check("after", after),
    Check("data", job_data),
    Check("init", init_source),
    Check("resources_per_worker.flavor", flavor),
    Check("workers", placeable),
    Check("resources_per_worker.memory_gb", memory),
)


def intake(spec: JobSpec, tenant: str, *, data_root: str, store: JobStore,
           checkpoints_of: Callable[[JobRecord], CheckpointStore]) -> JobSpec:
    """The spec as it will be stored, once every check in `CHECKS` has passed
    it, in order; the first refusal is raised as it is."""
    submission = Submission(tenant, data_root, store, checkpoints_of)
    for check in CHECKS:
        spec = check.run(spec, submission)
    return spec


# What a resume at another size checks again (JobRequests.resume), as the list does at submit.

def check_fits(spec: JobSpec, workers: int, labels: Mapping[str, str] | None = None) -> None:
    """CapacityError unless `workers` ranks of the job could ever be placed on
    the live nodes (with `labels`: its flavor's)."""
    res = spec.resources_per_worker
    why = never_fits(workers, res.cpu, res.gpu, spec.placement, labels)
    if why:
        raise CapacityError(f"{why}: the job could never start")


def check_memory(spec: JobSpec, world_sizes: Sequence[int],
                 labels: Mapping[str, str] | None = None) -> None:
    """422 where the model's sharded state per rank cannot fit one worker's
    memory at one of these sizes (service/scheduling/memory_fit.py), on the
    nodes with `labels` (its flavor's) where given."""
    res = spec.resources_per_worker
    worker: float | None
    if res.memory_gb is not None:
        worker, source, field = res.memory_gb * GB, "resources_per_worker.memory_gb", \
            "resources_per_worker.memory_gb"
    else:
        worker, source, field = worker_memory_bytes(res.cpu, res.gpu, labels), \
            "a worker's share of the cluster's smallest node" if not labels else \
            f"a worker's share of flavor {res.flavor}'s smallest node", "model"
    decision = MemoryFitPolicy().check(model_size(spec), shard_degrees(spec, world_sizes),
                                       worker, source)
    if not decision.fits:
        reason = decision.reason
        if decision.fits_from is None:  # none of its sizes: say what would make it fit
            reason += ". " + remedies(spec, decision.worker_bytes, room=_room(spec, labels),
                                      memory_field=field if res.memory_gb is not None else None)
        raise SpecError(field, f"{field}: {reason}")


def _room(spec: JobSpec, labels: Mapping[str, str] | None = None) -> int:
    """How many workers of the job's size the live nodes (with `labels`) hold
    in all (CPUs and GPUs)."""
    res, total = spec.resources_per_worker, cluster_capacity(labels=labels)
    room = total["cpu"] // res.cpu
    if res.gpu:
        room = min(room, total["gpu"] // res.gpu)
    return int(room)
