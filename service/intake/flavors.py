"""The submit check of `resources_per_worker.flavor`: the flavor is one the
admin put (`service.store.flavors`), the tenant's quota on it could hold the
job at its smallest size, and the live nodes of the flavor (those with all
its labels) could ever place that many workers. Each refusal is a 422 at
`resources_per_worker.flavor`. A tenant names a flavor, never labels: the
spec has no field for them (`workers.schema.base.Resources`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.run.ray_cluster import never_fits
from service.scheduling import Demand
from service.scheduling.views import never_fits_flavor_quota
from service.store.tenants import tenant_policy
from workers.schema import JobSpec, SpecError

if TYPE_CHECKING:
    from service.store import JobStore

FIELD = "resources_per_worker.flavor"


def check_flavor(spec: JobSpec, tenant: str, store: JobStore) -> JobSpec:
    """The spec as it is, or a SpecError at `resources_per_worker.flavor`."""
    name = spec.resources_per_worker.flavor
    if name is None:
        return spec
    flavor = store.flavors.get(name)
    if flavor is None:
        known = ", ".join(f.name for f in store.flavors.list()) or "none"
        raise SpecError(FIELD, f"{FIELD}: no flavor {name!r} (the flavors: {known})")
    record = store.tenants.by_name(tenant)
    if record is not None:
        why = never_fits_flavor_quota(Demand.from_spec(spec), tenant_policy(record))
        if why:
            raise SpecError(FIELD, f"{FIELD}: the job could never run: {why}")
    res = spec.resources_per_worker
    why = never_fits(spec.min_workers, res.cpu, res.gpu, spec.placement, labels=flavor.labels)
    if why:
        raise SpecError(FIELD, f"{FIELD}: no nodes of flavor {name} could ever hold the job "
                               f"at its smallest size ({spec.min_workers} workers): {why}")
    return spec


def flavor_labels(spec: JobSpec, store: JobStore) -> dict[str, str] | None:
    """The labels of the job's flavor (None: no flavor, or one gone)."""
    name = spec.resources_per_worker.flavor
    flavor = None if name is None else store.flavors.get(name)
    return None if flavor is None else flavor.labels
