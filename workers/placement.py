"""Whether a gang of identical bundles can ever fit a cluster: a pure check
on Ray's node table, so that a request no amount of waiting can place is
refused at once with the reason, instead of waiting out a placement timeout."""

from __future__ import annotations

from workers.errors import CapacityError

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
# Float resources (0.5 gpu) compare with this slack; Ray counts them in units
# of 1e-4. The one slack of the project: the scheduler's views use it too.
RESOURCE_EPS = 1e-6


def bundle_of(cpu: float, gpu: float) -> dict[str, float]:
    """What one rank reserves, in Ray's resource names (none of a zero amount)."""
    return {key: amount for key, amount in (("CPU", cpu), ("GPU", gpu)) if amount}


def check_capacity(
    nodes: list[dict[str, float]], num_workers: int, bundle: dict[str, float], strategy: str
) -> None:
    """Raise CapacityError unless `num_workers` bundles can be placed on the
    live `nodes` (each node's total resources, as `ray.nodes()` gives them)
    under `strategy`."""
    n = num_workers
    for key, per_rank in bundle.items():
        total = sum(node.get(key, 0.0) for node in nodes)
        largest = max((node.get(key, 0.0) for node in nodes), default=0.0)
        need = n * per_rank
        if need > total + RESOURCE_EPS:
            raise CapacityError(
                f"{n} worker{'s' * (n != 1)} x {per_rank:g} {key} need {need:g} {key}, "
                f"but the cluster has {total:g} {key} in total"
            )
        if per_rank > largest + RESOURCE_EPS:
            raise CapacityError(
                f"one worker needs {per_rank:g} {key}, but the largest node has {largest:g}"
            )
        if strategy == "STRICT_PACK" and need > largest + RESOURCE_EPS:
            raise CapacityError(
                f"STRICT_PACK puts all {n} workers on one node: they need {need:g} {key}, "
                f"but the largest node has {largest:g}"
            )
    if strategy == "STRICT_SPREAD":
        fits = [all(node.get(k, 0.0) + RESOURCE_EPS >= v for k, v in bundle.items()) for node in nodes]
        hosts = sum(fits)
        if n > hosts:
            raise CapacityError(
                f"STRICT_SPREAD puts each of the {n} workers on a node of its own, "
                f"but only {hosts} node(s) can hold one"
            )
