"""How a submit command names its spec file, and what `-f` means there.

`brigade submit` and `brigade sweep submit` take the file as their argument or
as `-f FILE` / `--file FILE` (kubectl's spelling), and follow what they
submitted with `-F` / `--follow`. `-f` alone once meant follow: where it
still reads only that way (no value after it: the last word, or another option
next) it is taken as `--follow`, with a note on stderr; `-f FILE` is the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer._click.core import Context  # the click that typer carries
from typer.core import TyperCommand

SpecArgument = Annotated[Path | None, typer.Argument(
    show_default=False, help="the spec, YAML or JSON ('-': stdin); or give it as -f FILE")]
FileOption = Annotated[Path | None, typer.Option(
    "--file", "-f", show_default=False, help="the spec, YAML or JSON ('-': stdin), as kubectl's -f")]

OLD_FOLLOW_NOTE = ("note: `-f` with no file after it is the old spelling of --follow (-F); "
                   "-f FILE names the spec file, as kubectl's does")
FILE_NOTE = "note: -f FILE names the spec file and no longer follows: add -F (--follow) to follow"


def old_follow_spelling(args: list[str]) -> tuple[list[str], bool]:
    """`args` with each `-f` that has no value after it (the last word, or an option
    next: the old spelling of follow) read as `--follow`; and whether there was one."""
    out, changed = [], False
    for i, arg in enumerate(args):
        if arg == "--":
            out.extend(args[i:])
            break
        after = args[i + 1] if i + 1 < len(args) else None
        if arg == "-f" and (after is None or (after.startswith("-") and after != "-")):
            out.append("--follow")
            changed = True
        else:
            out.append(arg)
    return out, changed


class SubmitCommand(TyperCommand):
    """A command whose `-f` names its spec file, reading the old `-f` (follow) where
    nothing else can be meant."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        args, old = old_follow_spelling(args)
        if old:
            typer.echo(OLD_FOLLOW_NOTE, err=True)
        return super().parse_args(ctx, args)


def spec_path(argument: Path | None, option: Path | None, follow: bool) -> Path:
    """The one spec file named, as the argument or as -f FILE; exit 2 (usage) where
    none or two are. `-f FILE` without --follow says, on stderr, that it does not follow
    (it once did)."""
    if argument is not None and option is not None:
        raise typer.BadParameter(
            f"the spec is named twice ({argument} and -f {option}): name it once; "
            "to follow what is submitted, add -F (--follow)", param_hint="SPEC_FILE")
    if argument is None and option is None:
        raise typer.BadParameter("name the spec file: as the argument, or as -f FILE",
                                 param_hint="SPEC_FILE")
    if option is not None and not follow:
        typer.echo(FILE_NOTE, err=True)
    return argument if argument is not None else option  # type: ignore[return-value]
