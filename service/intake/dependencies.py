"""A job's `after` checked at submit, and the datasets its dependencies will
make.

- `after.N`: one of the tenant's own jobs (another tenant's reads as a
  missing one: a 422 at `after.N`, in the wording of a job not found); one
  that already FAILED, was CANCELLED (or PRUNED) is refused too: it will
  never succeed, so the job could only fail. Ids name jobs that exist, so
  older ones: a job cannot wait on itself, nor two jobs on each other.
- `pending_datasets`: the outputs of the prepare jobs (`POST /v1/datasets`)
  the job waits on (named in `after`, or waited on by a job it waits on: a
  fine-tune from a job that trains on a dataset still to be made) that have
  not succeeded yet. Their data is not there at submit; the data check
  passes over a job that reads one (its data is checked as the job starts,
  as every job's is, and a dataset that is no good then fails it, naming
  the file).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from service.intake.data_access import check_data_uri
from service.run.dependencies import dependency_ids
from service.states import JobState
from workers.schema import JobSpec, SpecError

if TYPE_CHECKING:
    from service.store import JobStore

MAX_UPSTREAM = 64  # the jobs read, at most, looking for the datasets a job's dependencies make


def check_after(spec: JobSpec, tenant: str, store: JobStore) -> JobSpec:
    """The spec as it was, unless an id in `after` is not one of the tenant's
    jobs, or one that ended without succeeding (SpecError at `after.N`)."""
    if not spec.after:
        return spec
    states = store.reads.states_of(spec.after, tenant=tenant)
    for i, job_id in enumerate(spec.after):
        state = states.get(job_id)
        if state is None:
            raise SpecError(f"after.{i}", f"after.{i}: job {job_id!r} not found")
        if state.is_terminal and state is not JobState.SUCCEEDED:
            raise SpecError(f"after.{i}", f"after.{i}: job {job_id} is {state.value}: it will "
                                          "never succeed, so this job could never start")
    return spec


def pending_datasets(spec: JobSpec, tenant: str, root: str, store: JobStore) -> set[str]:
    """The outputs (uris, no trailing slash) of the prepare jobs the job
    waits on, directly or through the jobs it waits on (at most
    `MAX_UPSTREAM` of them read), that have not succeeded yet."""
    pending: set[str] = set()
    seen: set[str] = set()
    todo = dependency_ids(spec)
    while todo and len(seen) < MAX_UPSTREAM:
        job_id = todo.pop()
        if job_id in seen:
            continue
        seen.add(job_id)
        job = store.get_job(job_id, tenant=tenant)
        if job is None or job.state.is_terminal:
            continue
        if job.spec.prepare is not None:
            pending.add(_normal(job.spec.prepare.output, tenant, root))
        todo += dependency_ids(job.spec)
    return pending


def reads_pending(spec: JobSpec, pending: set[str], tenant: str, root: str) -> bool:
    """Whether the job's data (`data.uri`, `data.tokenizer`, a mixture's
    members, `eval.uri`) is one of the `pending` datasets or lies under one
    (its tokenizer.json)."""
    if not pending:
        return False
    uris = list(spec.data.uris().values())
    if spec.eval is not None and spec.eval.uri is not None:
        uris.append(spec.eval.uri)
    return any(_under(_normal(uri, tenant, root), output) for uri in uris for output in pending)


def _under(uri: str, output: str) -> bool:
    return uri == output or uri.startswith(output + "/")


def _normal(uri: str, tenant: str, root: str) -> str:
    with contextlib.suppress(ValueError):  # one refused is the data check's, in its words
        uri = check_data_uri(uri, tenant, root)
    return uri.rstrip("/")
