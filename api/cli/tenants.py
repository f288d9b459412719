"""`brigade tenants ...`: the admin's commands for tenants (create, list, get,
update, delete, rotate-key). A tenant's API key is printed once, on stdout
alone, at `create` and `rotate-key`. `brigade whoami` (any key): your own
tenant, data prefix, quota and what you use of it."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.output import Output, OutputFormat, emit, when
from api.cli.remote import Key, Url, connect
from api.schemas.tenants import MAX_WEIGHT, MIN_WEIGHT, TenantKey, WhoamiPublic
from workers.schema import MAX_PRIORITY

TenantId = Annotated[str, typer.Argument(help="a tenant id (see `brigade tenants list`)")]
MaxWorkers = Annotated[int | None, typer.Option(min=0, help="workers it may run at once")]
MaxGpus = Annotated[float | None, typer.Option(min=0, help="gpus it may hold at once")]
MaxRunning = Annotated[int | None, typer.Option(min=0, help="jobs it may run at once")]
MaxQueued = Annotated[int | None, typer.Option(min=0, help="jobs it may have queued")]
MaxPriority = Annotated[int | None, typer.Option(min=0, max=MAX_PRIORITY, help="highest job priority")]
Weight = Annotated[float | None, typer.Option(
    min=MIN_WEIGHT, max=MAX_WEIGHT, help=f"its fair-share weight ({MIN_WEIGHT:g} to {MAX_WEIGHT:g})")]

Budget = Annotated[str | None, typer.Option(
    metavar="LIMIT/PERIOD", help="the most its jobs may cost a period (day, week or month), at the "
    "flavors' prices, e.g. 100/month; once spent its queued jobs wait for the next period")]

FlavorQuotas = Annotated[list[str] | None, typer.Option(
    "--flavor-quota", metavar="FLAVOR=WORKERS[:GPUS]", help=(
        "its limits on one flavor's nodes, beside the totals, e.g. a100=8:8, a100=4, a100=:8 "
        "(gpus alone); repeatable, a flavor that exists (`brigade flavors`)"))]

tenants = typer.Typer(no_args_is_help=True, help="Tenants and their API keys (the admin key only).")


@tenants.command()
def create(name: Annotated[str, typer.Argument(help="lower-case letters, digits and '-'")],
           max_workers: MaxWorkers = None, max_gpus: MaxGpus = None, max_running_jobs: MaxRunning = None,
           max_queued_jobs: MaxQueued = None, max_priority: MaxPriority = None, weight: Weight = None,
           budget: Budget = None, flavor_quota: FlavorQuotas = None, url: Url = None,
           key: Key = None) -> None:
    """Create a tenant; prints its API key (shown this once)."""
    quota = _limits(max_workers, max_gpus, max_running_jobs, max_queued_jobs)
    if flavor_quota:
        quota["flavors"] = _flavor_quotas(flavor_quota)
    with connect(url, key) as client:
        _say_key(client.create_tenant(name, quota, max_priority, weight, _budget(budget)), "created")


@tenants.command("list")
def list_tenants(output: Output = OutputFormat.table, url: Url = None, key: Key = None) -> None:
    """Every tenant, by name."""
    with connect(url, key) as client:
        page = client.tenants()
    emit(page, output, lambda: (
        ("ID", "NAME", "MAX PRIORITY", "WEIGHT", "QUOTA", "BUDGET", "CREATED"),
        [(t.id, t.name, t.max_priority, t.weight, _quota_text(t.quota.model_dump()),
          f"{t.budget.limit:g}/{t.budget.period}" if t.budget else "-",
          when(t.created_at)) for t in page.items]))


@tenants.command()
def get(tenant_id: TenantId, output: Output = OutputFormat.json, url: Url = None,
        key: Key = None) -> None:
    """One tenant (JSON unless asked otherwise)."""
    with connect(url, key) as client:
        emit(client.tenant(tenant_id), output)


@tenants.command()
def update(tenant_id: TenantId, max_workers: MaxWorkers = None, max_gpus: MaxGpus = None,
           max_running_jobs: MaxRunning = None, max_queued_jobs: MaxQueued = None,
           unlimit: Annotated[list[str] | None, typer.Option(
               help="lift this limit, e.g. max_gpus (repeatable)")] = None,
           max_priority: MaxPriority = None, weight: Weight = None, budget: Budget = None,
           no_budget: Annotated[bool, typer.Option("--no-budget", help="remove its budget")] = False,
           flavor_quota: FlavorQuotas = None,
           no_flavor_quota: Annotated[list[str] | None, typer.Option(
               metavar="FLAVOR", help="lift its limits on this flavor (repeatable)")] = None,
           output: Output = OutputFormat.json, url: Url = None, key: Key = None) -> None:
    """Change a tenant's quota limits (of the flavors named only), max priority, weight or
    budget; prints it (JSON unless asked otherwise)."""
    limits = _limits(max_workers, max_gpus, max_running_jobs, max_queued_jobs)
    flavors = {**dict.fromkeys(no_flavor_quota or ()), **_flavor_quotas(flavor_quota or [])}
    quota = {**limits, **dict.fromkeys(unlimit or ()),
             **({"flavors": flavors} if flavors else {})} or None
    with connect(url, key) as client:
        updated = client.update_tenant(tenant_id, quota, max_priority, weight, _budget(budget),
                                       no_budget=no_budget)
    emit(updated, output)


@tenants.command()
def delete(tenant_id: TenantId, url: Url = None, key: Key = None) -> None:
    """Delete a tenant, its key and its finished jobs (refused while any job is unfinished)."""
    with connect(url, key) as client:
        client.delete_tenant(tenant_id)
    typer.echo(f"{tenant_id}: deleted", err=True)


@tenants.command("rotate-key")
def rotate_key(tenant_id: TenantId, url: Url = None, key: Key = None) -> None:
    """A new API key for a tenant (printed once); the old one stops working now."""
    with connect(url, key) as client:
        _say_key(client.rotate_key(tenant_id), "new key for")


def whoami(output: Output = OutputFormat.table, url: Url = None, key: Key = None) -> None:
    """Who your key is: your tenant, your data prefix (where `brigade data
    upload` puts files; a spec's data.uri lies under it), your quota and what
    your jobs hold and wait for now."""
    with connect(url, key) as client:
        me = client.whoami()
    if output is not OutputFormat.table:
        return emit(me, output)
    rows = _whoami_rows(me)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        typer.echo(f"{name.ljust(width)}  {value}")


def _whoami_rows(me: WhoamiPublic) -> list[tuple[str, str]]:
    def of(used, limit) -> str:
        return f"{used:g} of {'unlimited' if limit is None else f'{limit:g}'}"

    quota, now = me.quota, me.usage
    rows = [("tenant", me.tenant + (f" ({me.tenant_id})" if me.tenant_id else " (the admin key)")),
            ("data prefix", me.data_prefix),
            ("running jobs", of(now.running_jobs, quota.max_running_jobs)),
            ("queued jobs", of(now.queued_jobs, quota.max_queued_jobs)),
            ("workers", of(now.workers, quota.max_workers)),
            ("gpus", of(now.gpu, quota.max_gpus)),
            ("cpus held", f"{now.cpu:g}"),
            ("max priority", str(me.max_priority)), ("weight", f"{me.weight:g}"),
            ("budget", _budget_text(me))]
    return rows


def _budget_text(me: WhoamiPublic) -> str:
    if me.budget is None:
        return "none"
    text = f"{me.budget.limit:g} a {me.budget.period}"
    if me.budget_spent is not None:
        text += f", {me.budget_spent:.2f} spent this {me.budget.period}"
    if me.budget_period_ends is not None:
        text += f" (the next from {me.budget_period_ends:%Y-%m-%d %H:%M} UTC)"
    return text


def _budget(text: str | None) -> dict | None:
    """`--budget 100/month` as the API's budget (the server checks the values)."""
    if text is None:
        return None
    limit, _, period = text.partition("/")
    try:
        return {"limit": float(limit), "period": period}
    except ValueError:
        raise typer.BadParameter(f"{text!r} is no LIMIT/PERIOD, e.g. 100/month",
                                 param_hint="--budget") from None


def _flavor_quotas(given: list[str]) -> dict[str, dict]:
    """`--flavor-quota a100=8:4` as the API's `quota.flavors` ({"a100": {"max_workers": 8,
    "max_gpus": 4}}); an empty part is no limit. The server checks the flavor exists."""
    flavors: dict[str, dict] = {}
    for text in given:
        name, sep, limits = text.partition("=")
        workers, _, gpus = limits.partition(":")
        try:
            parsed = {"max_workers": int(workers) if workers else None,
                      "max_gpus": float(gpus) if gpus else None}
        except ValueError:
            parsed = {}
        if not sep or not name or not parsed or all(v is None for v in parsed.values()) \
                or any(v is not None and v < 0 for v in parsed.values()):
            raise typer.BadParameter(
                f"{text[:80]!r} is no FLAVOR=WORKERS[:GPUS], e.g. a100=8:8 or a100=:8",
                param_hint="--flavor-quota")
        flavors[name] = parsed
    return flavors


def _limits(max_workers, max_gpus, max_running_jobs, max_queued_jobs) -> dict:
    given = {"max_workers": max_workers, "max_gpus": max_gpus,
             "max_running_jobs": max_running_jobs, "max_queued_jobs": max_queued_jobs}
    return {name: value for name, value in given.items() if value is not None}


def _quota_text(quota: dict) -> str:
    """"workers=4,gpus=2,a100.workers=2": the totals, then each flavor's limits."""
    flavors = quota.get("flavors") or {}
    limits = [(name, value) for name, value in quota.items() if name != "flavors"] + [
        (f"{flavor}.{name}", value) for flavor, of in sorted(flavors.items()) if of
        for name, value in of.items()]
    return ",".join(f"{name.replace('max_', '')}={value}"
                    for name, value in limits if value is not None) or "-"


def _say_key(tenant: TenantKey, what: str) -> None:
    typer.echo(f"{what} tenant {tenant.name} ({tenant.id}); its API key, shown this once:", err=True)
    typer.echo(tenant.api_key)
