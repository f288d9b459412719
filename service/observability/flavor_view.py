"""Each flavor's capacity and use, as `GET /v1/cluster` shows it: a pure view
over the flavors' capacities (what their live, not draining nodes hold, and
what Ray has free there) and the active jobs (`RunningJob`s: a job of a
flavor holds its workers there; a job without one, what its ranks placed on
the flavor's nodes hold: `RunningJob.on_flavors`).

A node of several flavors counts in one of them only (the one it is shown
of: `workers.schema.flavor.flavor_of_node`), so the flavors' capacities add
up to what their nodes hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from service.scheduling import Resources, RunningJob
from service.scheduling.views import capacity_now


@dataclass(frozen=True)
class FlavorUse:
    flavor: str
    nodes: int  # its live, not draining nodes
    capacity: Resources  # what they hold
    used: Resources  # what active jobs' workers hold there
    free: Resources  # what no active job holds there, and no more than Ray has free there now
    workers: int  # ranks of active jobs there: its jobs', and those of jobs of no flavor
    jobs: int  # active jobs with ranks there
    workers_of_no_flavor: int  # of `workers`, the ranks of jobs without a flavor


def flavor_use(amounts: Mapping[str, Mapping[str, float]],
               running: Iterable[RunningJob]) -> list[FlavorUse]:
    """One row per flavor, by name. `amounts`: each flavor's capacity as
    `service.run.ray_cluster.flavor_capacities` answers it ("cpu", "gpu",
    "free_cpu", "free_gpu", "nodes")."""
    running = list(running)
    totals = {name: Resources(a.get("cpu", 0.0), a.get("gpu", 0.0)) for name, a in amounts.items()}
    ray_free = {name: Resources(a["free_cpu"], a.get("free_gpu", 0.0))
                for name, a in amounts.items() if "free_cpu" in a}
    capacity = capacity_now(Resources.total(totals.values()), running, totals, ray_free)
    rows = []
    for name in sorted(amounts):
        there = [job for job in running if job.runs_on(name)]
        plain = sum(min(job.on_flavors.get(name, 0), job.workers) for job in there
                    if job.demand.flavor is None)
        workers = plain + sum(job.workers for job in there if job.demand.flavor == name)
        rows.append(FlavorUse(
            flavor=name, nodes=int(amounts[name].get("nodes", 0)), capacity=totals[name],
            used=Resources.total(job.holds_on(name) for job in there),
            free=capacity.of(name).free, workers=workers, jobs=len(there),
            workers_of_no_flavor=plain))
    return rows
