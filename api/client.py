"""The Python client (SDK) for Brigade's REST API, on the API's own schemas.

    with BrigadeClient("http://127.0.0.1:8000", api_key) as brigade:
        job = brigade.submit({"model": {...}, "train": {"steps": 40}})
        for line in brigade.logs(job.id, follow=True):
            print(line.line)
        print(brigade.get(job.id).state)

`BrigadeClient()` with no URL or key takes them from `BRIGADE_URL` and
`BRIGADE_API_KEY`, else from the saved profile (`brigade login`; see
`api.profiles`).

Calls that may safely be sent twice (reads, cancel, delete, and a submit,
which always carries an `Idempotency-Key`) are retried after a 429 or a 503
(waiting as `Retry-After` says) and after a connection error, with a
bounded exponential backoff. Every non-2xx answer left raises
`BrigadeError(status, message)`; a server that cannot be reached raises
httpx's own `httpx.TransportError`.
"""

from __future__ import annotations

import functools
import hashlib
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

from api.profiles import DEFAULT_URL, resolve
from api.schemas.audit import AuditPublic
from api.schemas.cluster import ClusterPublic, NodePublic, NodesPublic
from api.schemas.data import DataFilePublic, DataFilesPublic
from api.schemas.exports import ExportPublic, ExportStartedPublic
from api.schemas.flavors import FlavorPublic, FlavorsPublic
from api.schemas.health import HealthPublic
from api.schemas.jobs import (
    CheckpointPublic,
    EventPublic,
    JobProgress,
    JobPublic,
    JobsPublic,
    LogLine,
    MetricRow,
    WorkerPublic,
)
from api.schemas.sweeps import SweepPublic, SweepsPublic
from api.schemas.tenants import TenantKey, TenantPublic, TenantsPublic, WhoamiPublic
from api.schemas.usage import UsageReport
from service.states import JobState
from workers.schema import JobSpec
from workers.schema.sweep import SweepSpec

STREAM_READ_TIMEOUT_S = 60.0  # the server sends at least a heartbeat every 15 s
RETRY_STATUSES = frozenset({429, 503})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

__all__ = ["DEFAULT_URL", "BrigadeClient", "BrigadeError", "Retry"]

T = TypeVar("T")


class BrigadeError(Exception):
    """A non-2xx answer: its status, and the server's message (naming the field)."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.field = status, message, field


class Retry:
    """How a call that may be sent again is retried: up to `attempts` sends
    in all, waiting `base_s x 2^n` (at most `max_wait_s`) after a connection
    error, or what `Retry-After` asks (also at most `max_wait_s`) after a
    429 or 503."""

    def __init__(self, attempts: int = 4, base_s: float = 0.25, max_wait_s: float = 10.0):
        self.attempts, self.base_s, self.max_wait_s = max(1, attempts), base_s, max_wait_s

    def wait_s(self, tried: int, response: httpx.Response | None) -> float:
        backoff = min(self.max_wait_s, self.base_s * 2 ** (tried - 1))
        if response is None:
            return backoff
        after = _retry_after(response.headers.get("Retry-After"))
        return min(self.max_wait_s, backoff if after is None else after)


class Unset:
    """An argument left out (where None means something: a note removed)."""


UNSET = Unset()


class BrigadeClient:
    def __init__(self, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 30.0, transport: httpx.BaseTransport | None = None,
                 *, profile: str | None = None, retry: Retry | None = None):
        connection = resolve(base_url, api_key, profile)
        self.url = connection.url.rstrip("/")
        headers = {"Authorization": f"Bearer {connection.key}"} if connection.key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers,
                                  timeout=timeout, transport=transport)
        self.retry = retry or Retry()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BrigadeClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Jobs

    def submit(self, spec: dict | JobSpec, idempotency_key: str | None = None) -> JobPublic:
        """Queue a job. Every submit carries an `Idempotency-Key` (a fresh one
        unless given), so a retry after a lost answer makes no second job."""
        body = spec.to_json() if isinstance(spec, JobSpec) else spec
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return self._call(JobPublic, "POST", "/v1/jobs", json=body, headers=headers, idempotent=True)

    def prepare_dataset(self, request: dict, idempotency_key: str | None = None) -> JobPublic:
        """Queue a dataset's preparation (`POST /v1/datasets`: inputs, output,
        tokenizer or train_vocab_size, ...): a job of kind 'prepare'."""
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return self._call(JobPublic, "POST", "/v1/datasets", json=request, headers=headers,
                          idempotent=True)

    def jobs(self, state: str | JobState | Iterable[str | JobState] | None = None,
             limit: int = 50, offset: int = 0, tenant: str | None = None,
             sweep: str | None = None,
             label: dict[str, str] | Iterable[str] | None = None) -> JobsPublic:
        """A page of jobs, newest first; the admin sees every tenant's (or `tenant`'s);
        `sweep`: only that sweep's trials; `label`: only jobs with every one of these
        labels ({key: value}, or `key=value` strings)."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if tenant:
            params["tenant"] = tenant
        if sweep:
            params["sweep"] = sweep
        if label:
            params["label"] = _labels_query(label)
        if state:
            states = [state] if isinstance(state, str | JobState) else list(state)
            params["state"] = ",".join(JobState(s).value if isinstance(s, JobState) else s for s in states)
        return self._call(JobsPublic, "GET", "/v1/jobs", params=params)

    def get(self, job_id: str) -> JobPublic:
        return self._call(JobPublic, "GET", f"/v1/jobs/{job_id}")

    def update(self, job_id: str, *, labels: dict[str, str] | None = None,
               note: str | None | Unset = UNSET) -> JobPublic:
        """Set a job's labels (all of them, replaced; None: kept) and/or its note
        (None removes it; left out: kept)."""
        body: dict[str, Any] = {} if labels is None else {"labels": labels}
        if not isinstance(note, Unset):
            body["note"] = note
        return self._call(JobPublic, "PATCH", f"/v1/jobs/{job_id}", json=body, idempotent=True)

    def cancel(self, job_id: str) -> JobPublic:
        """Cancel; a job cancelled already is answered as it is (so retried)."""
        return self._call(JobPublic, "POST", f"/v1/jobs/{job_id}/cancel", idempotent=True)

    def delete(self, job_id: str) -> None:
        """Remove a finished job with its history, checkpoints and exports."""
        self._send("DELETE", f"/v1/jobs/{job_id}")

    def suspend(self, job_id: str) -> JobPublic:
        return self._call(JobPublic, "POST", f"/v1/jobs/{job_id}/suspend")

    def resume(self, job_id: str, workers: int | None = None) -> JobPublic:
        body = {"workers": workers} if workers is not None else None
        return self._call(JobPublic, "POST", f"/v1/jobs/{job_id}/resume", json=body)

    def wait(self, job_id: str, timeout_s: float = 600.0, poll_s: float = 0.5,
             until: Iterable[JobState] | None = None) -> JobPublic:
        """Poll until the job is in one of `until` (default: any final state)."""
        wanted = set(until) if until is not None else {s for s in JobState if s.is_terminal}
        deadline = time.monotonic() + timeout_s
        while (job := self.get(job_id)).state not in wanted:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job.state.value} after {timeout_s} s")
            time.sleep(poll_s)
        return job

    # What a job leaves behind

    def events(self, job_id: str) -> list[EventPublic]:
        return self._call(list[EventPublic], "GET", f"/v1/jobs/{job_id}/events")

    def metrics(self, job_id: str, since_step: int = 0) -> list[MetricRow]:
        return self._call(list[MetricRow], "GET", f"/v1/jobs/{job_id}/metrics",
                          params={"since_step": since_step})

    def logs(self, job_id: str, follow: bool = False, after_id: int = 0,
             limit: int = 1000) -> list[LogLine] | Iterator[LogLine]:
        """One page of (up to `limit`) log lines after `after_id`; with
        `follow`, a generator of lines that ends when the job does. See
        `all_logs` for every line."""
        if follow:
            return (e for e in self.follow(job_id, after_id) if isinstance(e, LogLine))
        return self._call(list[LogLine], "GET", f"/v1/jobs/{job_id}/logs",
                          params={"after_id": after_id, "limit": limit})

    def all_logs(self, job_id: str, after_id: int = 0, page: int = 1000) -> Iterator[LogLine]:
        """Every log line after `after_id`, page by page, oldest first."""
        while True:
            lines = self._call(list[LogLine], "GET", f"/v1/jobs/{job_id}/logs",
                               params={"after_id": after_id, "limit": page})
            yield from lines
            if len(lines) < page:
                return
            after_id = lines[-1].id

    def follow(self, job_id: str, after_id: int = 0) -> Iterator[LogLine | JobProgress]:
        """The job's log stream: its lines, and its progress whenever the state
        or step changes; the last item is the final progress. A stream the
        server closes early is picked up again after the last line seen."""
        while True:
            started = time.monotonic()
            for event in self._stream_once(job_id, after_id):
                yield event
                if isinstance(event, LogLine):
                    after_id = event.id
                elif event.state.is_terminal:
                    return
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))  # at most a reconnect a second

    def _stream_once(self, job_id: str, after_id: int) -> Iterator[LogLine | JobProgress]:
        timeout = httpx.Timeout(self._http.timeout.connect, read=STREAM_READ_TIMEOUT_S)
        params: dict[str, str | int] = {"follow": "true", "after_id": after_id}
        with self._http.stream("GET", f"/v1/jobs/{job_id}/logs", params=params, timeout=timeout) as r:
            if not r.is_success:
                r.read()
                raise _error(r)
            for kind, data in _server_sent_events(r.iter_lines()):
                if kind == "log":
                    yield LogLine.model_validate_json(data)
                elif kind in ("progress", "end"):
                    yield JobProgress.model_validate_json(data)

    def checkpoints(self, job_id: str) -> list[CheckpointPublic]:
        return self._call(list[CheckpointPublic], "GET", f"/v1/jobs/{job_id}/checkpoints")

    def workers(self, job_id: str) -> list[WorkerPublic]:
        return self._call(list[WorkerPublic], "GET", f"/v1/jobs/{job_id}/workers")

    # Exports (Hugging Face-format models of committed checkpoints)

    def export(self, job_id: str, step: int | None = None, dtype: str = "float32",
               kind: str | None = None) -> ExportStartedPublic:
        """Ask for an export of `step` (None: the latest committed); it is written in the
        background. `kind`: "model", "adapter" or "merged" (None: the job's own)."""
        return self._call(ExportStartedPublic, "POST", f"/v1/jobs/{job_id}/exports",
                          json=_given(step=step, dtype=dtype, kind=kind))

    def exports(self, job_id: str) -> list[ExportPublic]:
        """The job's committed exports, oldest step first."""
        return self._call(list[ExportPublic], "GET", f"/v1/jobs/{job_id}/exports")

    def download_export(self, job_id: str, export: ExportPublic, directory: str | Path) -> list[Path]:
        """Every file of a committed export into `directory`, each checked
        against the export's sha256 (a mismatch raises `BrigadeError` and
        leaves no file of that name)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, entry in sorted(export.files.items()):
            path, digest = out / name, hashlib.sha256()
            timeout = httpx.Timeout(self._http.timeout.connect, read=STREAM_READ_TIMEOUT_S)
            url = f"/v1/jobs/{job_id}/exports/{export.id}/files/{name}"
            with self._http.stream("GET", url, timeout=timeout) as r:
                if not r.is_success:
                    r.read()
                    raise _error(r)
                with open(path, "wb") as f:
                    for chunk in r.iter_bytes(1 << 20):
                        digest.update(chunk)
                        f.write(chunk)
            if digest.hexdigest() != entry.sha256:
                path.unlink()
                raise BrigadeError(409, f"export {export.id}: {name} arrived with another sha256 "
                                        "than its manifest's")
            written.append(path)
        return written

    # Sweeps (trials of one job spec over a search space, each a job)

    def submit_sweep(self, spec: dict | SweepSpec, idempotency_key: str | None = None) -> SweepPublic:
        """Start a sweep. Like `submit`, it always carries an `Idempotency-Key`
        (a fresh one unless given), so a retry makes no second sweep."""
        body = spec.to_json() if isinstance(spec, SweepSpec) else spec
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return self._call(SweepPublic, "POST", "/v1/sweeps", json=body, headers=headers,
                          idempotent=True)

    def sweep(self, sweep_id: str) -> SweepPublic:
        """A sweep with its trials (job, params, objective, state, pruned step) and its best."""
        return self._call(SweepPublic, "GET", f"/v1/sweeps/{sweep_id}")

    def sweeps(self, state: str | Iterable[str] | None = None, limit: int = 50,
               tenant: str | None = None,
               label: dict[str, str] | Iterable[str] | None = None) -> SweepsPublic:
        """Sweeps without their trials, newest first; the admin sees every tenant's (or
        `tenant`'s); `label`: only sweeps with every one of these labels ({key: value},
        or `key=value` strings)."""
        params: dict[str, Any] = {"limit": limit}
        if tenant:
            params["tenant"] = tenant
        if label:
            params["label"] = _labels_query(label)
        if state:
            params["state"] = state if isinstance(state, str) else ",".join(state)
        return self._call(SweepsPublic, "GET", "/v1/sweeps", params=params)

    def update_sweep(self, sweep_id: str, *, labels: dict[str, str] | None = None,
                     note: str | None | Unset = UNSET) -> SweepPublic:
        """Set a sweep's labels (all of them, replaced; None: kept), which the trials made
        from then on inherit, and/or its note (None removes it; left out: kept)."""
        body: dict[str, Any] = {} if labels is None else {"labels": labels}
        if not isinstance(note, Unset):
            body["note"] = note
        return self._call(SweepPublic, "PATCH", f"/v1/sweeps/{sweep_id}", json=body, idempotent=True)

    def cancel_sweep(self, sweep_id: str) -> SweepPublic:
        """Cancel a sweep and its live trials; a finished one is answered as it is."""
        return self._call(SweepPublic, "POST", f"/v1/sweeps/{sweep_id}/cancel", idempotent=True)

    def delete_sweep(self, sweep_id: str) -> None:
        """Remove a finished sweep with its trials' jobs."""
        self._send("DELETE", f"/v1/sweeps/{sweep_id}")

    # Tenants (the admin key only)

    def create_tenant(self, name: str, quota: dict | None = None, max_priority: int | None = None,
                      weight: float | None = None, budget: dict | None = None) -> TenantKey:
        """A new tenant, with its API key (shown this once). `budget`:
        {"limit": float, "period": "day" | "week" | "month"}."""
        body = _given(name=name, quota=quota, max_priority=max_priority, weight=weight,
                      budget=budget)
        return self._call(TenantKey, "POST", "/v1/tenants", json=body)

    def tenants(self) -> TenantsPublic:
        return self._call(TenantsPublic, "GET", "/v1/tenants")

    def tenant(self, tenant_id: str) -> TenantPublic:
        return self._call(TenantPublic, "GET", f"/v1/tenants/{tenant_id}")

    def update_tenant(self, tenant_id: str, quota: dict | None = None,
                      max_priority: int | None = None, weight: float | None = None,
                      budget: dict | None = None, no_budget: bool = False) -> TenantPublic:
        """Change what is given; `quota` changes only the limits it names;
        `budget` replaces the budget, `no_budget` removes it."""
        body = _given(quota=quota, max_priority=max_priority, weight=weight, budget=budget)
        if no_budget:
            body["budget"] = None
        return self._call(TenantPublic, "PATCH", f"/v1/tenants/{tenant_id}", json=body)

    def delete_tenant(self, tenant_id: str) -> None:
        self._send("DELETE", f"/v1/tenants/{tenant_id}")

    def rotate_key(self, tenant_id: str) -> TenantKey:
        """A new API key for the tenant; its old one stops working now."""
        return self._call(TenantKey, "POST", f"/v1/tenants/{tenant_id}/keys")

    def audit(self, tenant: str | None = None, action: str | None = None,
              target: str | None = None, since: datetime | str | None = None,
              limit: int = 50, offset: int = 0) -> AuditPublic:
        """A page of the audit trail, newest first (the admin key only): by or
        concerning `tenant`, of `action` (a prefix if it ends with '.'), on
        `target`, from `since` on (a naive time is taken as UTC)."""
        if isinstance(since, datetime):
            since = (since if since.tzinfo else since.replace(tzinfo=UTC)).isoformat()
        params = _given(tenant=tenant, action=action, target=target, since=since)
        return self._call(AuditPublic, "GET", "/v1/audit",
                          params={**params, "limit": limit, "offset": offset})

    # Who you are, and your data

    def whoami(self) -> WhoamiPublic:
        """Your tenant (the admin key: `admin`), data prefix, quota and what you use of it now."""
        return self._call(WhoamiPublic, "GET", "/v1/whoami")

    def upload(self, local: str | Path, path: str) -> DataFilePublic:
        """Put a local file at `path` under your data prefix (`PUT /v1/data/{path}`,
        streamed); the answer's `uri` is what a spec's `data.uri` names. The
        server's sha256 of what it received is checked against the file's."""
        local = Path(local)
        digest = hashlib.sha256()
        with open(local, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        timeout = httpx.Timeout(self._http.timeout.connect, read=STREAM_READ_TIMEOUT_S,
                                write=STREAM_READ_TIMEOUT_S)
        with open(local, "rb") as f:  # streamed, its length declared (a 413 comes before any byte)
            stored = self._call(DataFilePublic, "PUT", f"/v1/data/{_path_in_url(path)}", content=f,
                                headers={"Content-Type": "application/octet-stream"},
                                timeout=timeout, idempotent=False)
        if stored.sha256 != digest.hexdigest():
            raise BrigadeError(409, f"{local}: arrived at {stored.uri} with another sha256 "
                                    "(changed while it was sent?)")
        return stored

    def list_data(self, prefix: str = "", limit: int = 50, offset: int = 0) -> DataFilesPublic:
        """A page of your files under your data prefix whose path starts with
        `prefix` (a folder, `raw/`, or the start of a name), by path."""
        return self._call(DataFilesPublic, "GET", "/v1/data",
                          params={"prefix": prefix, "limit": limit, "offset": offset})

    def remove_data(self, path: str) -> None:
        """Remove the file at `path` under your data prefix (a 409 while a job
        of yours that has not ended reads it)."""
        self._send("DELETE", f"/v1/data/{_path_in_url(path)}")

    # The service

    def cluster(self) -> ClusterPublic:
        return self._call(ClusterPublic, "GET", "/v1/cluster")

    def flavors(self) -> FlavorsPublic:
        """The resource flavors (the admin key only): each one's node labels and price."""
        return self._call(FlavorsPublic, "GET", "/v1/flavors")

    def put_flavor(self, name: str, labels: dict[str, str], price_per_worker_hour: float = 0.0,
                   description: str = "") -> FlavorPublic:
        """Make the flavor, or replace it whole (the admin key only)."""
        body = {"labels": labels, "price_per_worker_hour": price_per_worker_hour,
                "description": description}
        return self._call(FlavorPublic, "PUT", f"/v1/flavors/{name}", json=body)

    def delete_flavor(self, name: str) -> None:
        """Refused (409) while an unfinished job asks for the flavor."""
        self._send("DELETE", f"/v1/flavors/{name}")

    def nodes(self) -> NodesPublic:
        """The cluster's nodes, with the ranks on each (a tenant: its own jobs' ranks)."""
        return self._call(NodesPublic, "GET", "/v1/cluster/nodes")

    def drain_node(self, node_id: str, deadline_s: int | None = None,
                   reason: str | None = None) -> NodePublic:
        """Ask Ray to drain the node (the admin key only): it goes in `deadline_s`
        seconds (None: the service's default, 600), and its jobs move off it first."""
        body = {k: v for k, v in (("deadline_s", deadline_s), ("reason", reason)) if v is not None}
        return self._call(NodePublic, "POST", f"/v1/cluster/nodes/{node_id}/drain", json=body)

    def cancel_drain(self, node_id: str) -> None:
        """Refused (409) while Ray cannot take a drain back."""
        self._send("DELETE", f"/v1/cluster/nodes/{node_id}/drain")

    def usage(self, window_s: float = 86400.0, tenant: str | None = None) -> UsageReport:
        """Usage per tenant over the last `window_s` seconds (a tenant: its own)."""
        params: dict[str, Any] = {"window_s": window_s}
        if tenant:
            params["tenant"] = tenant
        return self._call(UsageReport, "GET", "/v1/usage", params=params)

    def health(self) -> HealthPublic:
        return self._call(HealthPublic, "GET", "/healthz")

    def _call(self, schema: type[T], method: str, path: str, **kwargs) -> T:
        return _adapter(schema).validate_json(self._send(method, path, **kwargs).content)

    def _send(self, method: str, path: str, *, idempotent: bool | None = None,
              **kwargs) -> httpx.Response:
        """Send; a call that may be sent twice is retried (see `Retry`)."""
        again = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
        attempts = self.retry.attempts if again else 1
        for tried in range(1, attempts + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError:
                if tried == attempts:
                    raise
                time.sleep(self.retry.wait_s(tried, None))
                continue
            if response.status_code in RETRY_STATUSES and tried < attempts:
                time.sleep(self.retry.wait_s(tried, response))
                continue
            if not response.is_success:
                raise _error(response)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")


# One validator per response type, keyed by the type form (a class, or an alias
# such as list[LogLine]): `object`, since mypy does not take type[...] as Hashable.
_adapter: Callable[[object], TypeAdapter[Any]] = functools.cache(TypeAdapter)


def _labels_query(label: dict[str, str] | Iterable[str]) -> list[str]:
    """A `label` filter as the API's repeated `key=value` parameters."""
    return [f"{k}={v}" for k, v in label.items()] if isinstance(label, dict) else list(label)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (its HTTP-date form is not used by Brigade)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _path_in_url(path: str) -> str:
    """`path` percent-encoded for a URL, its `.` and `..` segments too (sent
    as they are, an HTTP client resolves them away: the server must see them
    to refuse them)."""
    return "/".join(quote(s, safe="") if s not in (".", "..") else s.replace(".", "%2E")
                    for s in path.split("/"))


def _given(**fields) -> dict:
    return {name: value for name, value in fields.items() if value is not None}


def _error(response: httpx.Response) -> BrigadeError:
    try:
        error = response.json()["error"]
        return BrigadeError(response.status_code, error["message"], error.get("field"))
    except (ValueError, KeyError, TypeError):
        return BrigadeError(response.status_code, response.text[:500] or response.reason_phrase)


def _server_sent_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event, data) for each event of a text/event-stream; comments skipped."""
    kind = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
