"""`brigade data`: your data prefix, and token datasets.

    brigade data upload LOCAL [NAME]        put a local file (or each file of a local
                                            folder) under your data prefix, through the
                                            API; prints each one's URI (for data.uri)
    brigade data prefix                     your data prefix (a URI)
    brigade data ls [PREFIX]                your files under it (path, bytes, modified,
                                            sha256 of an upload), those whose path
                                            starts with PREFIX (a folder: raw/)
    brigade data rm PATH                    remove one (refused while a job of yours
                                            that has not ended reads it)
    brigade data show URI [--samples 3]     a dataset's index, and samples decoded
                                            with its own tokenizer (what a job reads)
    brigade data prepare --input GLOB ... --output PREFIX (--tokenizer T |
                         --train-tokenizer --vocab-size N) [--field text] [--workers 2]
                                            tokenize files into token shards on Ray

`upload`, `prefix`, `ls` and `rm` speak to the service (`PUT`, `GET` and
`DELETE /v1/data/...`, `GET /v1/whoami`). `show` and `prepare` read and write through fsspec (file://,
s3://, ...; `--storage-options` takes fsspec options as JSON). `prepare` runs
on a Ray cluster directly (like `brigade train`: `--ray-address`, or a local
one); with `--service` it is queued as a job of the service instead (`POST
/v1/datasets`; `-f` follows it). None imports torch; `prepare` imports ray
when it runs on Ray.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from api.cli.output import Output, OutputFormat, emit, plain
from api.cli.remote import Key, Url, connect, end_with, follow_with_progress
from api.schemas.data import DataFilePublic

data = typer.Typer(no_args_is_help=True,
                   help="Your data prefix: upload to it, list it, remove a file; token datasets: "
                        "look at one, prepare one.")

Options = Annotated[str | None, typer.Option(
    "--storage-options", envvar="BRIGADE_DATA_STORAGE_OPTIONS",
    help='fsspec options as JSON, e.g. {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}')]


def _options(raw: str | None) -> dict:
    try:
        return json.loads(raw) if raw else {}
    except ValueError as e:
        raise typer.BadParameter(f"--storage-options is not JSON: {e}") from None


def _fail(error: Exception) -> typer.Exit:
    typer.echo(f"error: {error}", err=True)
    return typer.Exit(1)


@data.command()
def upload(
    local: Annotated[Path, typer.Argument(
        exists=True, readable=True, help="a local file, or a folder (each file under it)")],
    name: Annotated[str | None, typer.Argument(
        help="where under your data prefix (default: LOCAL's name; ending with '/': a folder "
             "to put it in)")] = None,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """Put a local file, or each file of a local folder, under your data
    prefix (through the API, streamed); prints where each one went: its URI,
    for a spec's data.uri or `data prepare --input`."""
    files = _files_to_upload(local, name)
    if not files:
        raise _fail(ValueError(f"{local}: no file to upload"))
    stored = []
    with connect(url, key) as client:
        for source, target in files:
            put = client.upload(source, target)
            stored.append({"local": str(source), **plain(put)})
            if output is OutputFormat.table:
                verb = "replaced" if put.replaced else "uploaded"
                typer.echo(f"{verb} {source} ({put.bytes} bytes): {put.uri}")
    if output is not OutputFormat.table:
        emit(stored, output)


def _files_to_upload(local: Path, name: str | None) -> list[tuple[Path, str]]:
    """(local file, path under the prefix) for a file, or for each file
    under a folder (by name, hidden ones too; links followed)."""
    base = local.resolve().name if name is None else name
    if base.endswith("/"):
        base += local.resolve().name
    if local.is_file():
        return [(local, base)]
    return [(f, f"{base}/{f.relative_to(local).as_posix()}")
            for f in sorted(local.rglob("*")) if f.is_file()]


@data.command()
def prefix(url: Url = None, key: Key = None) -> None:
    """Your data prefix: the URI your files go under (`data upload`) and a
    spec's data.uri must lie under."""
    with connect(url, key) as client:
        typer.echo(client.whoami().data_prefix)


LS_PAGE = 500  # files asked for at a time


@data.command("ls")
def list_files(
    prefix: Annotated[str, typer.Argument(
        help="only paths that start with this: a folder (raw/) or the start of a name")] = "",
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """Your files under your data prefix (every page), by path: size, last
    write, and the sha256 of what was uploaded (where the server knows it)."""
    files: list[DataFilePublic] = []
    with connect(url, key) as client:
        while True:
            page = client.list_data(prefix, limit=LS_PAGE, offset=len(files))
            files += page.items
            if not page.items or len(files) >= page.total:
                break

    def table():
        return (("PATH", "BYTES", "MODIFIED", "SHA256"),
                [(f.path, f.bytes, f.modified.isoformat(timespec="seconds") if f.modified else "-",
                  f.sha256 or "-") for f in files])

    emit(files, output, table)


@data.command("rm")
def remove(
    path: Annotated[str, typer.Argument(help="a file's path under your data prefix (as ls prints it)")],
    url: Url = None,
    key: Key = None,
) -> None:
    """Remove one file under your data prefix (refused while a job of yours
    that has not ended reads it)."""
    with connect(url, key) as client:
        client.remove_data(path)
    typer.echo(f"removed {path}")


@data.command()
def show(
    uri: Annotated[str, typer.Argument(help="a dataset's prefix (where its index.json is)")],
    samples: Annotated[int, typer.Option(min=0, help="samples to decode")] = 3,
    seq_len: Annotated[int, typer.Option(min=1, help="the job's model.seq_len")] = 64,
    seed: Annotated[int, typer.Option(min=0, help="the job's train.seed")] = 0,
    storage_options: Options = None,
) -> None:
    """A dataset's index, then samples 0..N-1 as a job with this seq_len and seed reads them."""
    from workers.datasets.errors import DataError
    from workers.datasets.index import join, read_index
    from workers.datasets.token_shards import TokenShardSource
    from workers.datasets.tokenizer import load_tokenizer

    options = _options(storage_options)
    try:
        index = read_index(uri, options)
        typer.echo(f"{uri}: {index.tokens} tokens ({index.dtype}) in {len(index.shards)} shards, "
                   f"{index.documents} documents; vocabulary {index.vocab_size}, end of document "
                   f"{index.eod_id}, tokenizer {index.tokenizer}")
        if not samples:
            return
        if not index.tokenizer:
            raise DataError(uri, "the dataset records no tokenizer: nothing to decode with")
        tokenizer = load_tokenizer(join(uri, index.tokenizer), options)
        source = TokenShardSource(uri, seed, seq_len, index=index, storage_options=options)
        for i in range(samples):
            ids = source.sample(i).tolist()
            typer.echo(f"--- sample {i} ({len(ids)} tokens)")
            typer.echo(tokenizer.decode(ids, skip_special_tokens=False))
    except DataError as e:
        raise _fail(e) from None


@data.command()
def prepare(
    input: Annotated[list[str], typer.Option(
        "--input", help="jsonl, parquet or text files: paths, URIs or globs (repeatable)")],
    output: Annotated[str, typer.Option(help="the dataset's prefix (a URI; must not hold one yet)")],
    tokenizer: Annotated[str | None, typer.Option(help="a tokenizers JSON file's uri")] = None,
    train_tokenizer: Annotated[bool, typer.Option(
        "--train-tokenizer", help="train a byte-level BPE tokenizer on the inputs first")] = False,
    vocab_size: Annotated[int | None, typer.Option(min=2, help="with --train-tokenizer")] = None,
    field: Annotated[str, typer.Option(help="the documents' field in jsonl and parquet")] = "text",
    workers: Annotated[int, typer.Option(min=1, help="Ray tasks at a time (one a file)")] = 2,
    tokens_per_shard: Annotated[int, typer.Option(min=1)] = 1 << 24,
    ray_address: Annotated[str | None, typer.Option(envvar="BRIGADE_RAY_ADDRESS")] = None,
    storage_options: Options = None,
    service: Annotated[bool, typer.Option(
        "--service", help="queue it as a job of the service (POST /v1/datasets) instead; "
                          "prints its id")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", "-F", help="with --service: follow it")] = False,
    priority: Annotated[int, typer.Option(min=0, help="with --service")] = 0,
    url: Url = None,
    key: Key = None,
) -> None:
    """Tokenize files into a token dataset on Ray: shards, the tokenizer, the index last."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from workers.datasets.errors import DataError
    from workers.datasets.prepare import prepare as run_prepare

    if train_tokenizer == (tokenizer is not None) or train_tokenizer != (vocab_size is not None):
        raise typer.BadParameter("give --tokenizer T, or --train-tokenizer with --vocab-size N")
    if service:
        request = {"inputs": input, "output": output, "tokenizer": tokenizer,
                   "train_vocab_size": vocab_size, "field": field, "workers": workers,
                   "priority": priority, "tokens_per_shard": tokens_per_shard}
        with connect(url, key) as client:
            job = client.prepare_dataset(request)
            typer.echo(job.id)
            if follow:
                end_with(follow_with_progress(client, job.id), job.id)
        return
    options = _options(storage_options)
    _connect(ray_address)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("files tokenized", total=None)
        tokens = [0]

        def progress(result, done: int, total: int) -> None:
            tokens[0] += result.tokens
            bar.update(task, completed=done, total=total,
                       description=f"files tokenized ({tokens[0]} tokens)")

        try:
            index = run_prepare(input, output, tokenizer=tokenizer, field=field,
                                train_vocab_size=vocab_size, workers=workers,
                                tokens_per_shard=tokens_per_shard, storage_options=options,
                                on_progress=progress)
        except DataError as e:
            raise _fail(e) from None
    typer.echo(f"{output}: {index.tokens} tokens in {len(index.shards)} shards from "
               f"{index.documents} documents (vocabulary {index.vocab_size}, {index.dtype})")


def _connect(address: str | None) -> None:
    import ray

    if address:
        ray.init(address=address)
    else:  # a cluster of our own on this machine, as `brigade train` does
        ray.init(address="local", include_dashboard=False)
