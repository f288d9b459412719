"""`brigade --help` reads well at 80 columns: the prose and each command's
line in a list of commands wrap at word boundaries, where the line is full
(typer kept a docstring's own line breaks in the list, and rich wrapped each
of those lines again: "(exit" alone on a line); help that says its default
in [brackets] keeps it (rich took it for markup and dropped it)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from api.cli.main import app

WIDTH = 80
HELPS = [[], ["tenants"], ["data"], ["submit"], ["logs"], ["jobs"], ["metrics"], ["serve"],
         ["export"], ["data", "prepare"], ["sweep"], ["sweep", "submit"], ["sweep", "status"]]


def help_of(args: list[str]) -> list[str]:
    shown = CliRunner().invoke(app, [*args, "--help"],
                               env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": None})
    assert shown.exit_code == 0, shown.output
    return shown.stdout.splitlines()


def early_breaks(lines: list[tuple[str, str]], width: int) -> list[str]:
    """(previous, next) lines of one wrapped text where next's first word
    would have fitted on previous: a break that is not the wrap's."""
    return [f"{before!r} | {after!r}" for before, after in lines
            if before and after and len(before) + 1 + len(after.split()[0]) <= width]


@pytest.mark.parametrize("args", HELPS, ids=[" ".join(a) or "brigade" for a in HELPS])
def test_help_wraps_at_word_boundaries_at_80_columns(args):
    lines = help_of(args)
    assert max(len(line) for line in lines) <= WIDTH

    # The prose under Usage: one paragraph after another, each wrapped where it is full.
    prose = [line.strip() for line in lines[lines.index(next(x for x in lines if "Usage:" in x)) + 1:]]
    prose = prose[:next(i for i, line in enumerate(prose) if line.startswith("╭"))]
    pairs = list(zip(prose, prose[1:], strict=False))
    assert not early_breaks(pairs, WIDTH - 2), prose

    # The list of commands: each command's description wrapped in its column.
    if "Commands" not in "".join(lines):
        return
    panel = lines[next(i for i, line in enumerate(lines) if "Commands" in line) + 1:]
    panel = [line for line in panel[:next(i for i, line in enumerate(panel) if line.startswith("╰"))]]
    column = len(re.match(r"│ \S+\s+", panel[0]).group(0))
    width = len(panel[0]) - 1 - column - 1  # the text between the name column and "│"
    rows = [(line[1:column].strip(), line[column:-1].rstrip()) for line in panel]
    pairs = [(rows[i - 1][1], text) for i, (name, text) in enumerate(rows) if i and not name]
    assert not early_breaks(pairs, width), "\n".join(panel)
    described = " ".join(" ".join(text.split()) for _, text in rows)
    if not args:
        assert "(exit status 0 if it succeeds, 1 otherwise)" in described


def test_defaults_said_in_help_are_shown():
    jobs = " ".join(" ".join(help_of(["jobs"])).replace("│", " ").split())
    assert "(default: the profile's, else that of a `brigade serve` in this directory" in jobs
    serve = " ".join(" ".join(help_of(["serve"])).replace("│", " ").split())
    assert "port to listen on; 0 picks a free one (default: 8000)" in serve
