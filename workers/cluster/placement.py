"""Whether a gang of identical bundles can ever fit a cluster: a pure check
on Ray's node table, so that a request no amount of waiting can place is
refused at once with the reason, instead of waiting out a placement timeout;
and how a gang's ranks map to bundles so a tensor-parallel group shares a node."""

from __future__ import annotations

from dataclasses import dataclass

from workers.cluster.errors import CapacityError

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


@dataclass(frozen=True)
class GangBundles:
    """A gang's placement-group bundles and which bundle each rank takes."""

    bundles: list[dict[str, float]]
    bundle_of_rank: list[int]

    @property
    def grouped(self) -> bool:
        """Whether a bundle holds a whole TP group (several ranks)."""
        return len(self.bundles) < len(self.bundle_of_rank)


def gang_bundles(
    num_workers: int, bundle: dict[str, float], tp: int, nodes: list[dict[str, float]]
) -> GangBundles:
    """The bundles for `num_workers` ranks whose consecutive runs of `tp` form
    a tensor-parallel group (workers/engine/tensor_parallel.py): one bundle per group,
    `tp` ranks' worth, so that Ray puts each group on one node (a bundle never
    spans nodes; TP's collectives run every layer, FSDP's once a unit), where
    the live `nodes` (total resources) can hold every group whole; otherwise
    one bundle per rank, as without TP. The strategy (PACK, SPREAD) then
    places the groups."""
    per_rank = GangBundles([dict(bundle) for _ in range(num_workers)], list(range(num_workers)))
    if tp <= 1 or num_workers % tp:
        return per_rank
    group = {key: amount * tp for key, amount in bundle.items()}
    groups = num_workers // tp
    room = sum(_how_many(node, group) for node in nodes)
    if room < groups:
        return per_rank
    return GangBundles([dict(group) for _ in range(groups)], [r // tp for r in range(num_workers)])


def _how_many(node: dict[str, float], bundle: dict[str, float]) -> int:
    """How many `bundle`s a node's resources hold."""
    counts = [int((node.get(key, 0.0) + RESOURCE_EPS) // amount) for key, amount in bundle.items()
              if amount > 0]
    return min(counts, default=0)
