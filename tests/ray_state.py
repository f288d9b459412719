"""What a test's Ray cluster held at one moment, and how to bring it back to
that: the placement groups made since removed, the CPUs free again. The
session cluster's leak check (tests/conftest.py) and a shared server's
clean-up (tests/e2e/serve_harness.py) both stand on it.

    found = ClusterState.now()
    ...                                   # a module's tests, a server's jobs
    left, free = found.restore(grace_s=30)
"""

from __future__ import annotations

import time
from dataclasses import dataclass


def live_placement_groups() -> dict[str, str]:
    """Id (hex) -> name of each placement group of this process's cluster not removed."""
    import ray

    return {pg_id: info.get("name", "") for pg_id, info in ray.util.placement_group_table().items()
            if info.get("state") != "REMOVED"}


def free_cpus() -> float:
    import ray

    return ray.available_resources().get("CPU", 0.0)


@dataclass(frozen=True)
class ClusterState:
    placement_groups: frozenset[str]  # the live ones' ids
    cpus: float  # free

    @classmethod
    def now(cls) -> ClusterState:
        return cls(frozenset(live_placement_groups()), free_cpus())

    def restore(self, grace_s: float, within_s: float = 30) -> tuple[dict[str, str], float]:
        """Give the placement groups made since up to `grace_s` to go and the CPUs to come
        back by themselves (Ray frees a killed group's asynchronously); remove those still
        there, then wait up to `within_s` for the CPUs. Returns (the groups removed, id ->
        name; the CPUs free before they were)."""
        import ray
        from ray.util.placement_group import PlacementGroup

        deadline = time.monotonic() + grace_s
        while True:
            left = {i: n for i, n in live_placement_groups().items() if i not in self.placement_groups}
            free = free_cpus()
            if (not left and free >= self.cpus) or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        for pg_id in left:
            ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
        deadline = time.monotonic() + within_s
        while free_cpus() < self.cpus and time.monotonic() < deadline:
            time.sleep(0.2)
        return left, free
