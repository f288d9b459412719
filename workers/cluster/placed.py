"""The placement groups of worker groups that the cluster holds now, read
from Ray's placement group table: what the leader's reconcile and a group's
move look for by name (workers/cluster/group.py names a group's
`{name_prefix}-pg`, workers/cluster/move.py a move's `{name_prefix}-moved-...`)."""

from __future__ import annotations

import contextlib

import ray
from ray.util import placement_group_table
from ray.util.placement_group import PlacementGroup


def moved_pg_name(name_prefix: str, made_ns: int, ranks: list[int]) -> str:
    """The name of a placement group made at `made_ns` to move `ranks` of the
    group `name_prefix`, its bundles theirs in that order."""
    return f"{name_prefix}-moved-{made_ns}-r{'.'.join(map(str, ranks))}-pg"


def moved_placement_groups(name_prefix: str) -> list[tuple[PlacementGroup, list[int]]]:
    """The live placement groups made to move ranks of the group `name_prefix`
    (`moved_pg_name`), oldest first, each with the ranks its bundles were made
    for, in bundle order (a rank moved twice is in the later one's)."""
    found: list[tuple[int, PlacementGroup, list[int]]] = []
    for entry in placement_group_table().values():
        name = entry.get("name", "")
        if not name.startswith(f"{name_prefix}-moved-") or entry.get("state") == "REMOVED":
            continue
        made, _, ranks = name.removeprefix(f"{name_prefix}-moved-").removesuffix("-pg").partition("-r")
        with contextlib.suppress(ValueError):  # removed meanwhile
            found.append((int(made) if made.isdigit() else 0, ray.util.get_placement_group(name),
                          [int(rank) for rank in ranks.split(".") if rank.isdigit()]))
    return [(pg, ranks) for _, pg, ranks in sorted(found, key=lambda f: f[0])]


def placed_groups(prefix: str) -> dict[str, int]:
    """The worker groups whose names start with `prefix` that hold a
    placement group on the cluster now (pending or placed, not removed):
    each one's name (as `name_prefix`) and its number of bundles."""
    found: dict[str, int] = {}
    if not ray.is_initialized():
        return found  # no cluster joined: nothing of ours on one
    for entry in placement_group_table().values():
        name = entry.get("name") or ""
        if name.startswith(prefix) and name.endswith("-pg") and entry.get("state") != "REMOVED":
            found[name.removesuffix("-pg")] = len(entry.get("bundles") or {})
    return found
