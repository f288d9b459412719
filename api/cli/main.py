"""The `brigade` command.

    brigade serve [--host --port --data-dir --ray-address]
                            start the service (REST API + control plane on Ray);
                            prints the URL and the admin key
    brigade submit job.yaml [-F]        submit a job spec (YAML or JSON; or -f job.yaml, as
                                        kubectl's -f); prints the job id (-F, --follow:
                                        follow it; exit 0 if it succeeds, 1 otherwise)
    brigade jobs [--state S] [--tenant T] [--sweep ID] [--label K=V]
                                        list jobs (--sweep: that sweep's trials)
    brigade label ID [K=V ...] [--remove K] [--note TEXT]
                                        change a job's labels and note
    brigade get|status|events ID        one job; where it is; its state changes
    brigade metrics ID [--columns C,..] [--format csv|jsonl]
                                        its per-step metrics (loss, lr, tokens/s, ...)
    brigade logs ID [-f] [--tail N]     its whole log; -f follows it with a progress bar
    brigade wait ID                     until it ends (exit 0 if it succeeded)
    brigade cancel|suspend|delete ID    stop it (suspend: checkpoint first); remove it
    brigade resume ID [--workers N]     queue a suspended job again
    brigade checkpoints ID              its committed checkpoints
    brigade cluster | usage             capacity and queue; usage per tenant
    brigade nodes                       the nodes, their state (draining: until when, why),
                                        CPUs/GPUs used of total, the jobs on each
    brigade nodes drain NODE [--deadline 600] [--reason R]
                                        ask Ray to drain a node; its jobs move off (admin key)
    brigade flavors [put NAME --label K=V [--price P] | rm NAME]
                                        resource flavors: kinds of node by label (admin key)
    brigade login --url URL --key KEY [--profile NAME]
                                        save a profile (the CLI and BrigadeClient() read it)
    brigade tenants create|list|get|update|delete|rotate-key
                                        tenants and their API keys (the admin key)
    brigade whoami                      your tenant, data prefix, quota and what you use
    brigade audit [--tenant --action --target --since]
                                        who did what, when, from where (the admin key)
    brigade train job.yaml -n 2         run one engine config straight on Ray,
                                        without the service (a developer's tool)
    brigade data upload LOCAL [NAME]    put files under your data prefix; prints their URIs
    brigade data prefix|show|prepare    your data prefix; a token dataset's samples, decoded;
                                        tokenize files into one on Ray (--service: as a job)
    brigade sweep submit FILE [-F]      a sweep (its trials are jobs); -F follows its trials
    brigade sweep status|best|list|cancel|delete
                                        its trials; the best params as YAML; sweeps; stop, remove

Client commands take `--url` (BRIGADE_URL) and `--key` (BRIGADE_API_KEY), else
the profile's (`brigade --profile NAME`, BRIGADE_PROFILE, else the default
one), else the URL and admin key of a `brigade serve` started in this
directory (kept in its data dir, ./.data); read commands take
`--output table|json|yaml`. `--install-completion` sets up shell completion.
The CLI never imports torch.
"""

from __future__ import annotations

import gc
import inspect
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import typer

from api.cli.audit import audit
from api.cli.data import data
from api.cli.exports import export
from api.cli.flavors import flavors
from api.cli.jobs import register_job_commands
from api.cli.nodes import nodes
from api.cli.remote import PROFILE
from api.cli.service import register_service_commands
from api.cli.sweeps import sweep
from api.cli.tenants import tenants, whoami
from api.cli.train import train
from api.profiles import record_server_url

app = typer.Typer(no_args_is_help=True, help="Brigade: FSDP2 training on Ray.")
register_job_commands(app)
app.command()(export)
register_service_commands(app)
app.command()(audit)
app.command()(whoami)
app.command()(train)
app.add_typer(tenants, name="tenants")
app.add_typer(nodes, name="nodes")
app.add_typer(flavors, name="flavors")
app.add_typer(data, name="data")
app.add_typer(sweep, name="sweep")


def _one_line_summaries(group: typer.Typer) -> None:
    """Each command's line in a list of commands: its help's first paragraph
    on one line. Typer's rich list keeps a docstring's line breaks, which rich
    then wraps again: a sentence cut at the docstring's margin ("(exit" alone)."""
    for info in group.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        info.short_help = info.short_help or " ".join(text.split("\n\n")[0].split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _one_line_summaries(sub.typer_instance)


def _version(shown: bool) -> None:
    if shown:
        try:
            typer.echo(f"brigade {version('brigade')}")
        except PackageNotFoundError:  # run from a checkout that is not installed
            typer.echo("brigade (not installed)")
        raise typer.Exit()


@app.callback()
def _options(
    profile: Annotated[str | None, typer.Option(
        envvar="BRIGADE_PROFILE", help="the saved profile to use (`brigade login`)")] = None,
    _shown: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="print the version and exit")] = False,
) -> None:
    """Brigade: FSDP2 training on Ray."""
    PROFILE["name"] = profile


@app.command()
def serve(
    # No [brackets] in help: rich takes them for markup and drops them.
    host: str = typer.Option(None, help="address to listen on (default: 127.0.0.1)"),
    port: int = typer.Option(None, help="port to listen on; 0 picks a free one (default: 8000)"),
    data_dir: Path = typer.Option(None, help="database, checkpoints, keys and the URL the CLI "
                                  "finds (default: ./.data)"),
    ray_address: str = typer.Option(None, help="an existing Ray cluster (default: start a local one)"),
) -> None:
    """Start Brigade: the control plane on Ray and the REST API."""
    import uvicorn

    from api.server.app import create_app
    from api.server.listener import SERVE_OPTIONS, bind_listener, url_of
    from service.observability import log_config as service_log
    from service.runtime import ReplicaRefused, build_supervisor
    from service.settings import Settings

    given: dict[str, Any] = {"host": host, "port": port, "data_dir": data_dir and str(data_dir),
                             "ray_address": ray_address}
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    service_log.configure(settings.log_level, settings.log_format)
    listener = bind_listener(settings.host, settings.port)  # bound now: the URL printed is real
    admin_key, generated = settings.ensure_admin_key()
    try:
        supervisor = build_supervisor(settings)  # joins or starts Ray, starts supervising
    except ReplicaRefused as e:
        listener.close()
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    try:
        server = uvicorn.Server(uvicorn.Config(create_app(supervisor), **SERVE_OPTIONS,
                                               log_level=settings.log_level.lower()))
        # What start-up made (Ray's client, the app, the models) lives as long as the
        # process: out of the collector's sight, a full collection stops requests for
        # a fraction of the time it did.
        gc.freeze()
        url = url_of(listener)
        # The CLI run in this directory finds the server by it (api.profiles.local_server_url).
        record_server_url(settings.data_dir, url)
        typer.echo(f"Brigade API on {url}")
        typer.echo(_admin_key_line(settings, admin_key, generated))
        server.run(sockets=[listener])
    finally:
        supervisor.stop()
        listener.close()


def _admin_key_line(settings, key: str, generated: bool) -> str:
    """The admin key is shown once, by the start that generates it; never again."""
    if settings.admin_key:
        return "admin key: as set in BRIGADE_ADMIN_KEY"
    if generated:
        return (f"admin key (shown this once; kept in {settings.admin_key_file}, readable by "
                f"you only): {key}")
    return f"admin key: generated at first start, kept in {settings.admin_key_file}"


_one_line_summaries(app)  # once every command, serve's above included, is registered


def main() -> None:
    app()


if __name__ == "__main__":
    main()
