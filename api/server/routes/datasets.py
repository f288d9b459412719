"""Datasets: `POST /v1/datasets` prepares a token dataset from files under
the tenant's data prefix, as a job of kind 'prepare' (its steps are the
files): admitted under the tenant's quota and priority, listed by
`GET /v1/jobs`, followed by `GET /v1/jobs/{id}/logs?follow=true` (one row a
file), cancelled by `POST /v1/jobs/{id}/cancel`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response
from pydantic import Field

from api.schemas.base import Request
from api.schemas.jobs import JobPublic
from api.server.audit import Audit
from api.server.deps import CurrentTenant, IdempotencyKey, JobRequestsDep, SettingsDep
from api.server.routes.jobs import ERRORS
from service.intake.dataset_jobs import prepare_job_spec
from workers.schema import MAX_PRIORITY, MAX_WORKERS, NAME_PATTERN

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], responses=ERRORS)

Uri = Annotated[str, Field(min_length=1, max_length=2048)]


class DatasetCreate(Request):
    """Files (jsonl, parquet, text; paths, URIs or globs under the tenant's
    data prefix) to tokenize into a token dataset at `output`, with the
    tokenizer at `tokenizer` or one trained on them (`train_vocab_size`)."""

    inputs: Annotated[list[Uri], Field(min_length=1, max_length=64)]
    output: Uri
    tokenizer: Uri | None = None
    train_vocab_size: Annotated[int, Field(ge=2, le=1_048_576)] | None = None
    field: Annotated[str, Field(min_length=1, max_length=256)] = "text"
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 2
    priority: Annotated[int, Field(ge=0, le=MAX_PRIORITY)] = 0
    name: Annotated[str, Field(pattern=NAME_PATTERN)] = "prepare"
    tokens_per_shard: Annotated[int, Field(ge=1, le=1 << 30)] | None = None


@router.post("", status_code=201, response_model=JobPublic,
             responses={200: {"model": JobPublic, "description": "an idempotent retry: the job"}})
def prepare_dataset(
    request: DatasetCreate,
    tenant: CurrentTenant,
    jobs: JobRequestsDep,
    settings: SettingsDep,
    response: Response,
    audit: Audit,
    idempotency_key: IdempotencyKey = None,
) -> JobPublic:
    """Queue the preparation; the job's id follows it like any job's. Inputs
    or an output outside the tenant's data prefix, a glob that matches
    nothing, an output that holds a dataset already, or a tokenizer that does
    not parse are 422 naming the field and the file."""
    spec = prepare_job_spec(tenant=tenant, root=settings.resolved_data_uri_root,
                            **request.model_dump())
    job, created = jobs.submit(tenant, spec, idempotency_key)
    if created:
        audit("job.submit", target=job.id, tenant=job.tenant, name=job.name, kind="prepare",
              output=request.output)
    else:
        response.status_code = 200
    return JobPublic.model_validate(job)
