"""Sweeps: submit one (its trials are jobs of the tenant, run under its quota),
list them (by state, by label), look at one with its trials and best trial,
change its labels and note, cancel it (its live trials too), delete it (with
its trials' jobs).

Every route reads or writes the database through `SweepsDep`
(`service.sweeps.service.SweepService`), which is synchronous: the routes are
plain `def`s, run in the thread pool, so none holds the event loop."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from api.schemas.errors import ErrorPublic
from api.schemas.sweeps import (
    ParamImportancePublic,
    SweepCreate,
    SweepPublic,
    SweepsPublic,
    SweepSummary,
    SweepUpdate,
)
from api.server.audit import Audit
from api.server.deps import CurrentTenant, IdempotencyKey, SweepsDep
from api.server.errors import ApiError, not_found
from api.server.routes.jobs import listed_tenant, parse_labels
from api.server.state_filter import DESCRIPTION, SweepStates, parse_state_filter
from service.states import SweepState
from service.store.tenants import ADMIN_TENANT
from service.sweeps.importance import param_importances
from workers.schema import SweepSpec

MAX_PAGE = 500
MAX_OFFSET = 2**62

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 413, 422, 429)
}
router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"], responses=ERRORS)

_SWEEP_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SweepId = Annotated[str, Path(description="a sweep's id (see `GET /v1/sweeps`)")]


@router.post("", status_code=201, response_model=SweepPublic,
             responses={200: {"model": SweepPublic, "description": "an idempotent retry: the sweep"}})
def submit_sweep(
    spec: SweepCreate,
    tenant: CurrentTenant,
    sweeps: SweepsDep,
    response: Response,
    audit: Audit,
    idempotency_key: IdempotencyKey = None,
) -> SweepPublic:
    """Start a sweep: its trials are jobs named `{name}-t{k}`, at most
    `max_concurrent` queued or running at once, `max_trials` in all. A field
    outside the schema, a range of the wrong type or an invalid base spec is
    a 422 naming the field (`base.train.steps`); so is each value of the
    space (a grid's or a choice's, a range's bounds) that a job of the tenant
    could not have, set alone on the base (`space.priority`, naming the
    value). With an `Idempotency-Key`, a
    retried submit returns the sweep the first one made (200)."""
    record, created = sweeps.submit(tenant, spec, idempotency_key)
    if created:
        audit("sweep.submit", target=record.id, tenant=record.tenant, name=record.name,
              max_trials=spec.max_trials, max_concurrent=spec.max_concurrent)
    else:
        response.status_code = 200
    return SweepPublic.model_validate(sweeps.view(tenant, record.id))


@router.get("", response_model=SweepsPublic)
def list_sweeps(
    tenant: CurrentTenant,
    sweeps: SweepsDep,
    state: Annotated[list[SweepStates] | None, Query(description=DESCRIPTION)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    of_tenant: Annotated[str | None, Query(
        alias="tenant", max_length=128,
        description="the admin: only this tenant's sweeps (default: every tenant's)")] = None,
    label: Annotated[list[str] | None, Query(
        description="`key=value`, repeated: only sweeps with every one")] = None,
) -> SweepsPublic:
    """A tenant's own sweeps, newest first, without their trials; for the
    admin key, every tenant's (or `tenant`'s)."""
    whose = listed_tenant(tenant, of_tenant) or ADMIN_TENANT
    states = parse_state_filter(state, SweepState)
    records = sweeps.list(whose, state=states, limit=limit, offset=offset,
                          labels=parse_labels(label))
    return SweepsPublic(limit=limit, offset=offset, sweeps=[
        SweepSummary.model_validate(sweeps.view(tenant, r.id)) for r in records])


@router.get("/{sweep_id}", response_model=SweepPublic)
def get_sweep(sweep_id: SweepId, tenant: CurrentTenant, sweeps: SweepsDep) -> SweepPublic:
    """A sweep: its state, counts of trials by state, every trial (job, params,
    objective, state, pruned step) and the best one."""
    return SweepPublic.model_validate(sweeps.view(tenant, _known(sweep_id)))


@router.patch("/{sweep_id}", response_model=SweepPublic)
def update_sweep(sweep_id: SweepId, tenant: CurrentTenant, sweeps: SweepsDep, audit: Audit,
                 body: SweepUpdate) -> SweepPublic:
    """Change the sweep's labels (all of them: `{}` removes them) and/or its
    note (`null` removes it), in any state; what is left out is kept. The
    trials made from then on carry the new labels (over the base's); those
    made already keep theirs. Labels too many with the base's for a trial are
    a 422 at `labels`, as at submit."""
    changes = body.model_dump(include=body.model_fields_set)
    if not changes:
        raise ApiError(422, "body: give labels, note or both", "body")
    before = sweeps.get(tenant, _known(sweep_id))
    updated = sweeps.relabel(tenant, before.id, changes)
    audit("sweep.update", target=updated.id, tenant=updated.tenant, **{
        name: {"from": getattr(before, name), "to": getattr(updated, name)} for name in changes})
    return SweepPublic.model_validate(sweeps.view(tenant, updated.id))


@router.get("/{sweep_id}/importance", response_model=ParamImportancePublic)
def sweep_importance(sweep_id: SweepId, tenant: CurrentTenant,
                     sweeps: SweepsDep) -> ParamImportancePublic:
    """Each parameter's importance to the objective, by Optuna's own evaluator
    (PED-ANOVA) over the sweep's finished trials; none, with the reason, before
    three have finished."""
    view = sweeps.view(tenant, _known(sweep_id))
    spec = SweepSpec.model_validate(view["spec"])
    return ParamImportancePublic.model_validate(param_importances(spec, view["trials"]))


@router.post("/{sweep_id}/cancel", response_model=SweepPublic)
def cancel_sweep(sweep_id: SweepId, tenant: CurrentTenant, sweeps: SweepsDep,
                 audit: Audit) -> SweepPublic:
    """Cancel a sweep and its live trials; a finished sweep is answered as it is."""
    record = sweeps.cancel(tenant, _known(sweep_id))
    audit("sweep.cancel", target=record.id, tenant=record.tenant, state=record.state.value)
    return SweepPublic.model_validate(sweeps.view(tenant, record.id))


@router.delete("/{sweep_id}", status_code=204, response_class=Response)
def delete_sweep(sweep_id: SweepId, tenant: CurrentTenant, sweeps: SweepsDep,
                 audit: Audit) -> Response:
    """Remove a finished sweep with its trials' jobs (409 while it is live:
    cancel it first)."""
    record = sweeps.delete(tenant, _known(sweep_id))
    audit("sweep.delete", target=record.id, tenant=record.tenant, name=record.name,
          state=record.state.value)
    return Response(status_code=204)


def _known(sweep_id: str) -> str:
    """The id, if it could be one (else 404 now, before any read)."""
    if not _SWEEP_ID.match(sweep_id):
        raise not_found("sweep", sweep_id)
    return sweep_id
