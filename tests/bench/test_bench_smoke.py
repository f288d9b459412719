"""`python -m bench`: its registry and command line, and how it rewrites
docs/benchmarks.md; no benchmark is run here."""

from __future__ import annotations

import importlib.util

import pytest

from bench.__main__ import parse_args
from bench.figures import FIGURES, TITLES
from bench.report import Figure, Goal, assemble


def test_every_figure_has_its_module():
    assert FIGURES == ["overhead", "comm", "tensor_parallel", "memory", "optimizers", "lora",
                       "compile", "checkpoint", "snapshot", "snapshot_interval", "hf_io", "startup",
                       "rank_start", "recovery", "goodput", "drain", "api", "scheduler", "forecast",
                       "sweeps", "ui", "data", "mixture", "soak"]
    for name in FIGURES:
        spec = importlib.util.find_spec(f"bench.{name}")
        assert spec is not None, name
        source = open(spec.origin).read()
        assert "def run(args) -> Figure:" in source and f'cli("{name}"' in source, name


def test_command_line_picks_figures_in_document_order():
    assert parse_args([]).names == FIGURES
    assert parse_args(["--only", "scheduler,memory"]).names == ["memory", "scheduler"]
    assert parse_args(["--only", "api", "--only", "comm", "--quick"]).names == ["comm", "api"]
    with pytest.raises(SystemExit):
        parse_args(["--only", "nonsense"])


def test_a_partial_run_replaces_its_figures_and_keeps_the_others():
    def figure(name: str, value: str) -> Figure:
        return Figure(name=name, title=TITLES[name], command=f"python -m bench.{name}",
                      body=f"body of {name}: {value}\n", headline=value,
                      goals=[Goal("a goal", value, value == "new")], started="then")

    first = assemble(FIGURES, TITLES, {n: figure(n, "old") for n in FIGURES}, "", "python -m bench")
    second = assemble(FIGURES, TITLES, {"memory": figure("memory", "new")}, first, "python -m bench")
    assert "body of memory: new" in second and "body of memory: old" not in second
    assert "body of api: old" in second and "| `api` |" in second
    assert second.index("<!-- bench:overhead -->") < second.index("<!-- bench:scheduler -->")
    row = next(line for line in second.splitlines() if line.startswith("| `memory` |"))
    assert "a goal: met" in row
    old_row = next(line for line in second.splitlines() if line.startswith("| `comm` |"))
    assert "a goal: **missed**" in old_row
