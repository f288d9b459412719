"""Seconds per test module, read from the JUnit XML a run of the suite leaves
(`make test` writes reports/junit.xml; a test's time there is its setup, call
and teardown, so a module's shared fixtures count in the module's seconds).

    python -m tests.module_times reports/junit-*.xml            # the 25 slowest modules
    python -m tests.module_times after.xml --before before.xml  # both, side by side

Several files (`make test`'s two phases write one each) count as one run.

What docs/testing.md's table is made with.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def _cases(paths: list[Path]):
    for path in paths:
        yield from ET.parse(path).getroot().iter("testcase")


def module_seconds(paths: Path | list[Path]) -> dict[str, float]:
    """Module file -> the seconds its tests took, summed (over every file given)."""
    seconds: dict[str, float] = defaultdict(float)
    for case in _cases(paths if isinstance(paths, list) else [paths]):
        classname = case.get("classname", "")
        # "tests.api.test_jobs" or "tests.api.test_jobs.TestClass": the module is the part
        # up to the name that starts with test_
        parts = classname.split(".")
        cut = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        seconds["/".join(parts[:cut + 1]) + ".py"] += float(case.get("time") or 0)
    return dict(seconds)


def totals(paths: Path | list[Path]) -> tuple[int, float]:
    """(tests, seconds) of the whole run: its tests' seconds summed, which is more
    than its wall time where a phase ran in several processes."""
    tests, seconds = 0, 0.0
    for case in _cases(paths if isinstance(paths, list) else [paths]):
        tests += 1
        seconds += float(case.get("time") or 0)
    return tests, seconds


def table(after: Path | list[Path], before: Path | None, top: int) -> str:
    now = module_seconds(after)
    was = module_seconds(before) if before else {}
    ranked = sorted(set(now) | set(was), key=lambda m: -max(now.get(m, 0), was.get(m, 0)))[:top]
    if before:
        lines = ["| module | before (s) | after (s) |", "|---|---:|---:|"]
        lines += [f"| {m} | {was.get(m, 0):.0f} | {now.get(m, 0):.0f} |" for m in ranked]
        (n0, s0), (n1, s1) = totals(before), totals(after)
        lines.append(f"| **whole suite** ({n0} -> {n1} tests) | **{s0:.0f}** | **{s1:.0f}** |")
    else:
        lines = ["| module | seconds |", "|---|---:|"]
        lines += [f"| {m} | {now[m]:.0f} |" for m in ranked]
        n1, s1 = totals(after)
        lines.append(f"| **whole suite** ({n1} tests) | **{s1:.0f}** |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, nargs="+")
    parser.add_argument("--before", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print(table(args.junit, args.before, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
