"""What the tests read of, and take off, this process's Ray cluster: its live
placement groups, and one removed by its id (the session cluster's leak check,
tests/conftest.py, and a shared server's clean-up, tests/e2e/serve_harness.py)."""

from __future__ import annotations


def live_placement_groups() -> dict[str, str]:
    """Id (hex) -> name of each placement group of the cluster not removed."""
    import ray

    return {pg_id: info.get("name", "") for pg_id, info in ray.util.placement_group_table().items()
            if info.get("state") != "REMOVED"}


def remove_placement_group(pg_id: str) -> None:
    import ray
    from ray.util.placement_group import PlacementGroup

    ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
