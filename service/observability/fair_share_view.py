"""Each tenant's fair share as the dashboard's cluster page shows it: a pure
view over the tenants, their active and queued jobs, what each active job
holds and the service the latest scheduling pass counted
(`SchedulingPass.service`, dominant share-seconds over the fair-share window),
and what its jobs of each flavor hold (what its quota on that flavor counts).

A tenant's entitled share is its weight over the weights of the tenants that
want something now (a job active or queued); a tenant wanting nothing is
entitled to nothing and leaves its share to the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from service.scheduling import Resources
from service.scheduling.fair_share import dominant_share
from service.store.flavors import flavor_of
from service.store.records import JobRecord, TenantRecord
from service.store.tenants import ADMIN_TENANT, full_quota


@dataclass(frozen=True)
class TenantShare:
    tenant: str
    weight: float
    quota: dict = field(default_factory=dict)  # its limits (None: no limit)
    running_jobs: int = 0  # active: holding (or about to hold) workers
    queued_jobs: int = 0
    workers: int = 0  # ranks its active jobs hold
    cpu: float = 0.0
    gpu: float = 0.0
    share_now: float = 0.0  # dominant share of the cluster it holds now (0..1)
    entitled: float = 0.0  # weight / the weights of the tenants wanting something now
    service: float = 0.0  # dominant share-seconds over the window (the latest pass)
    # what its active jobs of each flavor hold (its quota on that flavor counts them):
    # flavor -> {"workers", "cpu", "gpu"}
    flavors: dict[str, dict[str, float]] = field(default_factory=dict)


def tenant_shares(
    tenants: Iterable[TenantRecord], active: Iterable[JobRecord], queued: Iterable[JobRecord],
    held: Mapping[str, Resources], total: Resources, service: Mapping[str, float],
) -> list[TenantShare]:
    """One row per tenant, by name, the admin's first: the admin key's own jobs are
    the tenant `admin`'s, which has no tenant row (weight 1, no quota) and is shown
    whether or not it has a job now."""
    rows: dict[str, dict] = {ADMIN_TENANT: {"weight": 1.0, "quota": full_quota(None)}} | {
        t.name: {"weight": t.weight, "quota": full_quota(t.quota)} for t in tenants
    }
    sums: dict[str, Resources] = {}
    for job in active:
        row = rows.setdefault(job.tenant, {"weight": 1.0, "quota": full_quota(None)})
        row["running_jobs"] = row.get("running_jobs", 0) + 1
        row["workers"] = row.get("workers", 0) + (job.workers or 0)
        sums[job.tenant] = sums.get(job.tenant, Resources()) + held.get(job.id, Resources())
        if (flavor := flavor_of(job.stored_spec)) is not None:
            of = row.setdefault("flavors", {}).setdefault(
                flavor, {"workers": 0, "cpu": 0.0, "gpu": 0.0})
            holds = held.get(job.id, Resources())
            of["workers"] += job.workers or 0
            of["cpu"] += holds.cpu
            of["gpu"] += holds.gpu
    for job in queued:
        row = rows.setdefault(job.tenant, {"weight": 1.0, "quota": full_quota(None)})
        row["queued_jobs"] = row.get("queued_jobs", 0) + 1
    wanting = {name: row["weight"] for name, row in rows.items()
               if row.get("running_jobs") or row.get("queued_jobs")}
    weights = sum(wanting.values())
    shares = []
    for name in sorted(rows, key=lambda n: (n != ADMIN_TENANT, n)):
        row, now = rows[name], sums.get(name, Resources())
        shares.append(TenantShare(
            tenant=name, weight=row["weight"], quota=row["quota"],
            running_jobs=row.get("running_jobs", 0), queued_jobs=row.get("queued_jobs", 0),
            workers=row.get("workers", 0), cpu=now.cpu, gpu=now.gpu,
            share_now=dominant_share(now, total),
            entitled=wanting[name] / weights if name in wanting and weights else 0.0,
            service=service.get(name, 0.0), flavors=dict(sorted(row.get("flavors", {}).items())),
        ))
    return shares
