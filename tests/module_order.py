"""The order in which `make test`'s first phase hands modules to its pytest
processes: the slowest first (by their seconds in tests/module_seconds.tsv,
the last measured run), so that the phase does not end on one process running
a long module while the other has nothing left (pytest-xdist's own order,
`--dist loadfile`, is by number of tests: the few-test whole flows, the
slowest modules, came last). Modules the table does not know come after it, in
collection order.

    python -m tests.module_times reports/junit-*.xml --write tests/module_seconds.tsv

refreshes the table (docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path

COSTS = Path(__file__).with_name("module_seconds.tsv")


def read_costs(path: Path = COSTS) -> dict[str, float]:
    """Module path (tests/...py) -> its seconds; {} where there is no table."""
    costs: dict[str, float] = {}
    if not path.exists():
        return costs
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module, seconds = line.split("\t")
            costs[module] = float(seconds)
    return costs


def slowest_first(items: list, costs: dict[str, float]) -> list:
    """`items` (pytest's, or anything with a `nodeid`) with their modules in
    decreasing cost; a module's items keep their order and stay together."""
    def cost(item) -> float:
        return -costs.get(item.nodeid.split("::")[0], 0.0)
    return sorted(items, key=cost)  # stable: within a module, and among unknown ones, as collected
