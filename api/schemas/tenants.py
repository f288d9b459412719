"""Tenants (`api.server.routes.tenants`): the admin's create, update and
read, a key answered once, the caller's own tenant (`GET /v1/whoami`) with
what it uses now, and each tenant's fair share (`api.server.routes.fair_share`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.base import Public, Request
from workers.schema import MAX_PRIORITY
from workers.schema.flavor import FLAVOR_NAME_PATTERN

TenantName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
                                   description="lower-case letters, digits and '-'; not 'admin'")]
Limit = Annotated[int, Field(ge=0, le=1_000_000)] | None  # None: no limit
Priority = Annotated[int, Field(ge=0, le=MAX_PRIORITY)]
# A tenant's fair-share weight: fair share divides each tenant's service by it
# (service/scheduling/fair_share.py), so the range keeps that quotient finite and
# ordered (5e-324 would make every tenant's key inf): a 10^6 spread, ends included.
MIN_WEIGHT, MAX_WEIGHT = 0.001, 1000.0
Weight = Annotated[float, Field(ge=MIN_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False,
                                description="fair-share weight, 0.001 to 1000")]


GpuLimit = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)] | None
FlavorName = Annotated[str, Field(pattern=FLAVOR_NAME_PATTERN, max_length=32)]


class FlavorQuota(Request):
    """A tenant's limits on one flavor's nodes (its jobs of that flavor)."""

    model_config = ConfigDict(from_attributes=True)

    max_workers: Limit = None
    max_gpus: GpuLimit = None


class TenantQuota(Request):
    """A tenant's limits; a missing or null one is no limit. `flavors`: the
    limits on each flavor's jobs, beside the totals (in a PATCH, only the
    flavors named change; a flavor set to null has no limits of its own)."""

    model_config = ConfigDict(from_attributes=True)  # also a part of TenantPublic

    max_workers: Limit = None
    max_gpus: GpuLimit = None
    max_running_jobs: Limit = None
    max_queued_jobs: Limit = None
    flavors: Annotated[dict[FlavorName, FlavorQuota | None],
                       Field(max_length=64)] = Field(default_factory=dict)


class TenantBudget(Request):
    """The most a tenant's jobs may cost a period (at the flavors' prices):
    once the period's cost reaches `limit`, its queued jobs wait until the
    next period (a UTC calendar day, an ISO week from Monday, a calendar month)."""

    model_config = ConfigDict(from_attributes=True)

    limit: Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]
    period: Literal["day", "week", "month"]


class TenantCreate(Request):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "name": "acme", "quota": {"max_workers": 4, "max_queued_jobs": 10}, "weight": 2,
        "budget": {"limit": 100, "period": "month"}}]})

    name: TenantName
    quota: TenantQuota = Field(default_factory=TenantQuota)
    max_priority: Priority = MAX_PRIORITY
    weight: Weight = 1.0
    budget: TenantBudget | None = None  # None: no budget


class TenantUpdate(Request):
    """What to change; `quota` changes only the limits it names; `budget`
    replaces the budget (null: no budget; left out: unchanged)."""

    quota: TenantQuota | None = None
    max_priority: Priority | None = None
    weight: Weight | None = None
    budget: TenantBudget | None = None


class TenantPublic(Public):
    id: str
    name: str
    quota: TenantQuota
    max_priority: int
    weight: float
    budget: TenantBudget | None = None  # None: no budget
    created_at: datetime
    updated_at: datetime
    # where its data goes: the only place its specs' data uris may name (None: a server before it)
    data_prefix: str | None = None


class TenantKey(TenantPublic):
    """A tenant with its API key: answered once, at creation or rotation."""

    api_key: str


class TenantsPublic(BaseModel):
    items: list[TenantPublic]
    total: int


class FlavorHeldPublic(Public):
    """What a tenant's active jobs of one flavor hold."""

    workers: int = 0
    cpu: float = 0.0
    gpu: float = 0.0


class TenantSharePublic(Public):
    tenant: str
    weight: float
    quota: TenantQuota
    running_jobs: int
    queued_jobs: int
    workers: int
    cpu: float
    gpu: float
    share_now: float  # dominant share of the cluster held now, 0..1
    entitled: float  # weight over the weights of the tenants wanting something now
    service: float  # dominant share-seconds over the fair-share window (latest pass)
    data_prefix: str | None = None  # where its data goes
    # what its active jobs of each flavor hold, against `quota.flavors`
    flavors: dict[str, FlavorHeldPublic] = Field(default_factory=dict)


class TenantSharesPublic(BaseModel):
    items: list[TenantSharePublic]


class TenantUsageNow(Public):
    """What a tenant's jobs hold and wait for now, against its quota."""

    running_jobs: int = 0
    queued_jobs: int = 0
    workers: int = 0
    cpu: float = 0.0
    gpu: float = 0.0


class WhoamiPublic(BaseModel):
    """`GET /v1/whoami`: the caller's tenant (the admin key: "admin"), where
    its data goes, its limits and what it uses of them now."""

    tenant: str
    tenant_id: str | None = None  # None for the admin, which has no tenant record
    admin: bool
    data_prefix: str  # `data.uri` in a spec, inputs and outputs of a dataset: under here
    quota: TenantQuota
    max_priority: int
    weight: float
    usage: TenantUsageNow
    budget: TenantBudget | None = None  # None: no budget
    # what its jobs cost in the budget's current period, and when the next one begins
    budget_spent: float | None = None
    budget_period_ends: datetime | None = None
