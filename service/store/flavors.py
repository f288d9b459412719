"""Resource flavors: a kind of node, named by the Ray node labels it has.

The admin puts a flavor (`PUT /v1/flavors/{name}`: its labels, its price per
worker-hour, a description); a job asks for one by name
(`resources_per_worker.flavor`) and its ranks then run only on nodes with
every one of those labels. Two flavors never have the same labels, and a
put is refused where a live node (`nodes`, as the caller read the cluster)
has both its labels and another flavor's (a node would be of both:
`FlavorConflict`, naming the other and the node). A flavor is not deleted
while an unfinished job asks for it or a tenant's quota names it
(`FlavorInUse`, naming the jobs or the tenants).

Every price a flavor has had is kept (`flavor_prices`: the price and since
when), written when the flavor is made and whenever a put changes it, and
kept after the flavor goes: `price_at(flavor, at)` is the price a worker of
that flavor ran at then, and `price_history()` all of them, what a cost is
computed from (`service.scheduling.cost`). A job without a
flavor is priced at the default (`BRIGADE_DEFAULT_PRICE_PER_WORKER_HOUR`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import Engine, select

from service.scheduling.cost import PriceHistory
from service.states import TERMINAL
from service.store.engine import transaction
from service.store.errors import FlavorConflict, FlavorInUse, FlavorNotFound
from service.store.models import Flavor, FlavorPrice, Job, Tenant, utcnow
from service.store.records import FlavorRecord
from workers.schema.flavor import FLAVOR_NAME, labels_problem, matches

MAX_DESCRIPTION = 500


class FlavorStore:
    """Shares the job store's engines (`JobStore.flavors`)."""

    def __init__(self, reader: Engine, writer: Engine, default_price: float = 0.0):
        self._reader, self._writer = reader, writer
        self.default_price = default_price  # a job without a flavor's price per worker-hour

    def put(self, name: str, *, labels: Mapping[str, str], price_per_worker_hour: float,
            description: str = "", nodes: Mapping[str, Mapping[str, str]] | None = None,
            ) -> tuple[FlavorRecord, FlavorRecord | None]:
        """Make the flavor or replace what it is; (now, before: None where it
        is new). A price that changes gets a row of its own from now on.
        `nodes`: the live nodes' labels, by a name that says which node
        (refused where one has these labels and another flavor's)."""
        check_flavor(name, labels, price_per_worker_hour, description)
        labels = dict(sorted(labels.items()))
        now = utcnow()
        with transaction(self._writer) as session:
            for other in session.scalars(select(Flavor).where(Flavor.name != name)
                                         .order_by(Flavor.name)):
                if dict(other.labels) == labels:
                    raise FlavorConflict(name, other.name)
                for node, node_labels in sorted((nodes or {}).items()):
                    if matches(labels, node_labels) and matches(other.labels, node_labels):
                        raise FlavorConflict(name, other.name, node)
            flavor = session.get(Flavor, name, with_for_update=True)
            before = None if flavor is None else flavor_record(flavor)
            if flavor is None:
                flavor = Flavor(name=name, created_at=now)
                session.add(flavor)
            flavor.labels, flavor.description = labels, description
            flavor.updated_at = now
            if before is None or before.price_per_worker_hour != price_per_worker_hour:
                session.add(FlavorPrice(flavor=name, price_per_worker_hour=price_per_worker_hour,
                                        since=now))
            flavor.price_per_worker_hour = price_per_worker_hour
            session.flush()
            return flavor_record(flavor), before

    def get(self, name: str) -> FlavorRecord | None:
        with transaction(self._reader) as session:
            flavor = session.get(Flavor, name)
            return None if flavor is None else flavor_record(flavor)

    def list(self) -> list[FlavorRecord]:
        """Every flavor, by name."""
        with transaction(self._reader) as session:
            return [flavor_record(f) for f in session.scalars(select(Flavor).order_by(Flavor.name))]

    def delete(self, name: str) -> FlavorRecord:
        """Remove the flavor (its price history stays); refused (`FlavorInUse`)
        while an unfinished job asks for it or a tenant's quota names it."""
        with transaction(self._writer) as session:
            flavor = session.get(Flavor, name, with_for_update=True)
            if flavor is None:
                raise FlavorNotFound(name)
            terminal = [s.value for s in TERMINAL]
            using = [job_id for job_id, spec in session.execute(
                select(Job.id, Job.spec).where(Job.state.not_in(terminal)).order_by(Job.created_at))
                if flavor_of(spec) == name]
            if using:
                raise FlavorInUse(name, using)
            # a quota's flavor is checked under this row's lock (`TenantStore`): none slips in
            naming = [tenant for tenant, quota in session.execute(
                select(Tenant.name, Tenant.quota).order_by(Tenant.name))
                if ((quota or {}).get("flavors") or {}).get(name) is not None]
            if naming:
                raise FlavorInUse(name, [], naming)
            record = flavor_record(flavor)
            session.delete(flavor)
            return record

    def price_at(self, flavor: str | None, at: datetime) -> float:
        """The price per worker-hour of a worker of `flavor` at `at`: the
        price put last before then; the default for no flavor, or a time
        before the flavor had a price."""
        if flavor is None:
            return self.default_price
        with transaction(self._reader) as session:
            price = session.scalar(
                select(FlavorPrice.price_per_worker_hour)
                .where(FlavorPrice.flavor == flavor, FlavorPrice.since <= at)
                .order_by(FlavorPrice.since.desc(), FlavorPrice.id.desc()).limit(1))
        return self.default_price if price is None else price

    def price_history(self) -> PriceHistory:
        """Every price each flavor has had, from when, and the default: what
        a cost over any stretch of time is worked out from (`service.scheduling.cost`)."""
        changes: dict[str, list[tuple[float, float]]] = {}
        with transaction(self._reader) as session:
            for flavor, price, since in session.execute(
                    select(FlavorPrice.flavor, FlavorPrice.price_per_worker_hour, FlavorPrice.since)
                    .order_by(FlavorPrice.flavor, FlavorPrice.since, FlavorPrice.id)):
                changes.setdefault(flavor, []).append((since.timestamp(), price))
        return PriceHistory(self.default_price,
                            {flavor: tuple(found) for flavor, found in changes.items()})


def check_flavor(name: str, labels: Mapping[str, str], price: float, description: str) -> None:
    """Raise ValueError, naming the field, for what no flavor may be."""
    if not isinstance(name, str) or not FLAVOR_NAME.fullmatch(name):
        raise ValueError(f"name: flavor name {str(name)[:80]!r} must match {FLAVOR_NAME.pattern}")
    if (why := labels_problem(labels)) is not None:
        raise ValueError(f"labels: {why}")
    if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price) \
            or price < 0:
        raise ValueError(f"price_per_worker_hour: must be a finite number >= 0, not {price!r}")
    if len(description) > MAX_DESCRIPTION:
        raise ValueError(f"description: at most {MAX_DESCRIPTION} characters")


def flavor_of(spec: object) -> str | None:
    """The flavor a stored spec (its JSON) asks for, or None."""
    if not isinstance(spec, dict):
        return None
    resources = spec.get("resources_per_worker")
    return resources.get("flavor") if isinstance(resources, dict) else None


def flavor_record(flavor: Flavor) -> FlavorRecord:
    return FlavorRecord(name=flavor.name, labels=dict(flavor.labels),
                        price_per_worker_hour=flavor.price_per_worker_hour,
                        description=flavor.description or "", created_at=flavor.created_at,
                        updated_at=flavor.updated_at)
