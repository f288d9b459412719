"""Fair share between tenants: dominant resource fairness, weighted, and
optionally fed with what each tenant has had lately.

A tenant's dominant share is the largest fraction of any one resource
(cpu, gpu) of the cluster that its jobs hold. The tenant to serve next is
the one with the lowest

    (attained + horizon_s * dominant share now) / weight

where `attained` is the tenant's dominant resource-seconds over a recent
window (`attained_service`). Without history (`attained` 0 for everyone)
this is plain weighted DRF on what runs now. History is what makes weights
hold on a cluster that fits only a few jobs at a time: with two slots and
weights 2:1, current shares alone alternate the slots 1:1, while attained
service gives the heavier tenant the slot until it has had twice as much.
`horizon_s` is how many seconds of service a share held now counts for:
the charge a job just started is expected to run up before the next
decisions, so one pass does not give every free slot to the tenant that had
least.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.scheduling.views import EPS, Resources


@dataclass(frozen=True)
class Run:
    """One stretch of a job holding workers, in seconds since the epoch."""

    tenant: str
    held: Resources
    started: float
    ended: float | None = None  # None: still running


def dominant_share(held: Resources, total: Resources) -> float:
    shares = [used / have for (_, used), (_, have) in zip(held.items(), total.items(), strict=True)
              if have > EPS]
    return max(shares, default=0.0)


def attained_service(runs: Iterable[Run], total: Resources, since: float,
                     now: float) -> dict[str, float]:
    """Each tenant's dominant resource-seconds within [since, now]: per
    resource, what its jobs held times how long, over the cluster's total;
    the largest of those."""
    held: dict[str, Resources] = {}
    for run in runs:
        seconds = min(now, now if run.ended is None else run.ended) - max(since, run.started)
        if seconds > 0:
            held[run.tenant] = held.get(run.tenant, Resources()) + run.held.times(seconds)
    return {tenant: dominant_share(amount, total) for tenant, amount in held.items()}
