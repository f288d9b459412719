"""Seconds per test module, read from the JUnit XML a run of the suite leaves
(`make test` writes reports/junit.xml; a test's time there is its setup, call
and teardown, so a module's shared fixtures count in the module's seconds).

    python -m tests.module_times reports/junit-*.xml            # the 25 slowest modules
    python -m tests.module_times after.xml --before before.xml  # both, side by side
    python -m tests.module_times reports/junit-*.xml --write tests/module_seconds.tsv
    python -m tests.module_times --timeline reports/timeline.tsv  # each process's busy time

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


def costs_table(paths: list[Path]) -> str:
    """Every module's seconds, slowest first: tests/module_seconds.tsv, the order
    in which the first phase hands out its modules (tests/module_order.py)."""
    now = module_seconds(paths)
    lines = ["# module\tseconds: python -m tests.module_times reports/junit-*.xml --write THIS"]
    lines += [f"{m}\t{s:.1f}" for m, s in sorted(now.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines) + "\n"


def timeline(path: Path) -> str:
    """Per pytest process (BRIGADE_TEST_TIMELINE's lines): its modules, the seconds
    they held it, and when it ran out of work, counted from the first module's start."""
    rows = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    t0 = min(float(r[2]) for r in rows)
    lines = ["| process | modules | busy (s) | last module | out of work at (s) |", "|---|---:|---:|---|---:|"]
    for worker in sorted({r[0] for r in rows}):
        mine = sorted((r for r in rows if r[0] == worker), key=lambda r: float(r[3]))
        busy = sum(float(r[3]) - float(r[2]) for r in mine)
        last = mine[-1]
        lines.append(f"| {worker} | {len(mine)} | {busy:.0f} | {last[1]} ({float(last[3]) - float(last[2]):.0f} s)"
                     f" | {float(last[3]) - t0:.0f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, nargs="*")
    parser.add_argument("--before", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--write", type=Path, help="every module's seconds, slowest first, into this file")
    parser.add_argument("--timeline", type=Path, help="a BRIGADE_TEST_TIMELINE file to summarise")
    args = parser.parse_args(argv)
    if args.timeline:
        print(timeline(args.timeline))
    if args.write:
        args.write.write_text(costs_table(args.junit))
    elif args.junit:
        print(table(args.junit, args.before, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
