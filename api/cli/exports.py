"""`brigade export ID [--step N] [--dtype D] [--kind K] -o DIR`: a job's Hugging
Face export, downloaded (written first where it is not there yet). The kind
defaults to the job's own (an adapter job's: its PEFT adapter, else the model);
it is resolved before the lookup, since an adapter job keeps both kinds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from api.cli.remote import JobId, Key, Url, connect
from api.client import BrigadeClient
from api.schemas.exports import ExportPublic

KINDS = ("model", "adapter", "merged")


def export(
    job_id: JobId,
    output: Annotated[Path, typer.Option("--output", "-o", help="the directory to write it to")],
    step: Annotated[int | None, typer.Option(
        min=0, help="a committed step (default: the latest committed checkpoint)")] = None,
    dtype: Annotated[str, typer.Option(help="bfloat16 or float32")] = "float32",
    kind: Annotated[str | None, typer.Option(
        help="model, adapter (PEFT's adapter directory) or merged (the base with the adapters "
             "merged in); default: adapter for a job with an adapter section, else model")
                    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the export to be written")
                       ] = 1800.0,
    url: Url = None,
    key: Key = None,
) -> None:
    """Download a job's model in Hugging Face format (config.json, safetensors):
    the committed export of that step and dtype, asked for first if there is none.
    Every file is checked against the export's sha256."""
    if kind is not None and kind not in KINDS:
        typer.echo(f"error: --kind is one of {', '.join(KINDS)}, not {kind!r}", err=True)
        raise typer.Exit(2)
    with connect(url, key) as client:
        if kind is None:
            kind = "adapter" if client.get(job_id).spec.adapter is not None else "model"
        found = _committed(client, job_id, step, dtype, kind)
        if found is None:
            started = client.export(job_id, step=step, dtype=dtype, kind=kind)
            typer.echo(f"export {started.id}: {started.state}", err=True)
            deadline = time.monotonic() + timeout
            while (found := _committed(client, job_id, started.step, dtype, kind)) is None:
                if time.monotonic() > deadline:
                    typer.echo(f"error: export {started.id} not committed after {timeout:g} s "
                               f"(see `brigade logs {job_id}`)", err=True)
                    raise typer.Exit(1)
                time.sleep(1.0)
        paths = client.download_export(job_id, found, output)
    typer.echo(f"{found.id}: {len(paths)} files, {found.bytes} bytes in {output}", err=True)


def _committed(client: BrigadeClient, job_id: str, step: int | None, dtype: str, kind: str
               ) -> ExportPublic | None:
    """The committed `kind` of export of `step` (None: the latest checkpoint's) in `dtype`,
    if listed."""
    if step is None:
        checkpoints = client.checkpoints(job_id)
        if not checkpoints:
            return None  # the POST says why
        step = checkpoints[-1].step
    return next((e for e in client.exports(job_id)
                 if (e.step, e.dtype, e.kind) == (step, dtype, kind)), None)
