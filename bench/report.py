"""What every benchmark hands back (a `Figure`), the machine and load it ran
under, and docs/benchmarks.md assembled from figures.

A figure's section in the document sits between `<!-- bench:NAME -->` and
`<!-- /bench:NAME -->`, and its row in the summary table starts with
"| `NAME` |": a run of some figures (`python -m bench --only NAME`) replaces
theirs and keeps the others as they were.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
DOC = DOCS / "benchmarks.md"
OUT = REPO / "bench" / "out"  # git-ignored: scratch files, quick runs' results


def load() -> float:
    """The 1-minute load average (other agents share these 2 cores)."""
    return os.getloadavg()[0]


def machine_line() -> str:
    import torch

    with open("/proc/meminfo") as f:
        mem_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
    return (f"`nproc` {os.cpu_count()}, RAM {mem_kb / 2**20:.0f} GiB, Python "
            f"{platform.python_version()}, torch {torch.__version__}, {platform.machine()}")


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                         text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return out.stdout.strip() + (" + uncommitted changes" if dirty else "")


@dataclass
class Goal:
    what: str  # "Ray path >= 0.95x torchrun"
    value: str  # what this run measured against it: "0.99x"
    met: bool | None  # None: a figure without a goal


@dataclass
class Figure:
    name: str  # the registry's name: `python -m bench --only NAME`
    title: str
    command: str  # the exact command that produced it
    body: str  # markdown: tables, notes, plots
    headline: str  # one line for the summary table
    goals: list[Goal] = field(default_factory=list)
    pngs: list[str] = field(default_factory=list)  # file names under docs/
    started: str = ""
    seconds: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0
    error: str | None = None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, path: Path) -> Figure:
        raw = json.loads(path.read_text())
        raw["goals"] = [Goal(**g) for g in raw.get("goals", [])]
        return cls(**raw)


class Timed:
    """Wall time and load average around one benchmark: fills in a Figure's run fields."""

    def __enter__(self) -> Timed:
        self.started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.load_before, self._t0 = load(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.load_after = load()

    def stamp(self, figure: Figure) -> Figure:
        figure.started, figure.seconds = self.started, self.seconds
        figure.load_before, figure.load_after = self.load_before, self.load_after
        return figure


def verdict(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "-"}[met]


def section(fig: Figure) -> str:
    head = (f"Reproduce: `{fig.command}` (or the whole document: `make bench`). Run "
            f"{fig.started}, took {fig.seconds:.0f} s; load average (1 min) "
            f"{fig.load_before:.2f} before, {fig.load_after:.2f} after.")
    goals = "".join(f"\n- Goal: {g.what} — {verdict(g.met)} ({g.value})." for g in fig.goals
                    if g.met is not None)
    body = fig.body if not fig.error else f"**This run failed:** {fig.error}\n"
    goals = f"{goals}\n" if goals else ""
    return (f"<!-- bench:{fig.name} -->\n## {fig.title}\n\n{head}\n{goals}\n{body.rstrip()}\n"
            f"<!-- /bench:{fig.name} -->\n")


def summary_row(fig: Figure, index: int) -> str:
    goals = "; ".join(f"{g.what}: {verdict(g.met)}" for g in fig.goals if g.met is not None) or "-"
    headline = fig.headline if not fig.error else f"failed: {fig.error[:80]}"
    return (f"| `{fig.name}` | {index}. [{fig.title}](#{anchor(fig.title)}) | {headline} | {goals} "
            f"| {fig.load_before:.2f} / {fig.load_after:.2f} | {fig.started} |")


def anchor(title: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", title.lower()).strip()
    return slug.replace(" ", "-")


SUMMARY_HEAD = ("| name | figure | this run | goals | load before / after | run at |\n"
                "| --- | --- | --- | --- | --- | --- |")


def assemble(names: list[str], titles: dict[str, str], fresh: dict[str, Figure],
             old: str, command: str, whole_run: str | None = None) -> str:
    """The whole document: `fresh` figures from this run, the others kept from `old`
    (and `old`'s line on the last whole run, unless `whole_run` replaces it)."""
    if whole_run is None:
        kept = re.search(r"^Whole run .*$", old, re.M)
        whole_run = kept.group(0) if kept else "Whole run: not yet made."
    rows, sections = [], []
    for i, name in enumerate(names, 1):
        if name in fresh:
            rows.append(summary_row(fresh[name], i))
            sections.append(section(fresh[name]))
            continue
        row = next((line for line in old.splitlines() if line.startswith(f"| `{name}` |")), None)
        rows.append(row or f"| `{name}` | {i}. {titles[name]} | not measured yet | - | - | - |")
        kept = re.search(rf"<!-- bench:{name} -->\n.*?<!-- /bench:{name} -->\n", old, re.S)
        sections.append(kept.group(0) if kept else
                        f"<!-- bench:{name} -->\n## {titles[name]}\n\nNot measured yet: "
                        f"`{command} --only {name}`.\n<!-- /bench:{name} -->\n")
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        "# Benchmarks",
        "",
        "Every figure here comes from one command, which rewrites this file and its plots",
        "(`docs/*.png`):",
        "",
        "```",
        command,
        "```",
        "",
        "(`make bench` runs the same; `--quick` is a smoke run that writes under `bench/out/quick/`",
        "and leaves docs/ alone; `--only NAME[,NAME]` reruns some figures and keeps the others.)",
        "Each section names the command that reproduces it alone, when it ran and the load",
        "average around it.",
        "",
        f"Machine: {machine_line()}; CPU only (gloo): no figure here was taken on a GPU (the one GPU check, "
        "by hand: docs/gpu.md). Other "
        "jobs share these 2 cores while the benchmarks run: the load average is recorded beside "
        "every figure, comparisons are ratios measured within one run, and absolute times move "
        f"between runs. Last written {when}, at commit {git_commit()}.",
        "",
        whole_run,
        "",
        "## Summary",
        "",
        SUMMARY_HEAD,
        *rows,
        "",
        *sections,
    ]).rstrip("\n") + "\n"


# -- one benchmark's command line -------------------------------------------------


def cli(name: str, doc: str | None, add_args, run) -> None:
    """`python -m bench.NAME`: run one figure; by default write its section into
    docs/benchmarks.md (the others kept), with `--result` only a JSON of it."""
    import argparse

    from bench.figures import FIGURES, TITLES

    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small, fast run (smoke test)")
    parser.add_argument("--result", help="write the figure as JSON here and leave docs/ alone")
    parser.add_argument("--png-dir", default=None, help="where plots go (default docs/, "
                        "bench/out/quick/ with --quick)")
    add_args(parser)
    args = parser.parse_args()
    png_dir = Path(args.png_dir) if args.png_dir else (OUT / "quick" if args.quick else DOCS)
    png_dir.mkdir(parents=True, exist_ok=True)
    args.png_dir = png_dir
    with Timed() as timed:
        figure = run(args)
    timed.stamp(figure)
    print(section(figure))
    if args.result:
        figure.save(Path(args.result))
    elif not args.quick:
        old = DOC.read_text() if DOC.exists() else ""
        DOC.write_text(assemble(FIGURES, TITLES, {name: figure}, old, COMMAND))
        print(f"written into {DOC.relative_to(REPO)}")


COMMAND = ".venv/bin/python -m bench"


def save_plot(fig, path: Path) -> str:
    """Write a matplotlib figure; returns the file name (the document links it by name)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
