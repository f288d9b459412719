"""The one settings class: environment variables prefixed `BRIGADE_`.

Defaults embed everything under a data directory: SQLite, local checkpoint
storage, and a local Ray cluster started by `brigade serve`. Outside
development the secret and the admin key must be set (never defaults).
"""

from __future__ import annotations

import os
import secrets
import socket
from functools import cached_property
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BRIGADE_", extra="ignore")

    environment: str = Field("development", pattern="^(development|production)$")
    data_dir: str = Field(default_factory=lambda: os.path.join(os.getcwd(), ".data"))
    storage_uri: str | None = None  # checkpoint root; default: file://{data_dir}/storage
    storage_options: dict = Field(default_factory=dict)  # fsspec options, e.g. an S3 endpoint
    # where tenants' data lies (each under tenants/{tenant}/data/); default: file://{data_dir}/data-store
    data_uri_root: str | None = None
    database_url: str | None = None  # default: SQLite (WAL) under data_dir
    ray_address: str | None = None  # an existing cluster; default: start a local one
    ray_num_cpus: int | None = None  # for the local cluster; default: Ray's own count
    # the local head's dashboard (Ray's state API, `ray list ...`), bound to 127.0.0.1;
    # off by default: it costs the head memory and start time (see README)
    ray_dashboard: bool = False
    admin_key: str | None = None  # generated and printed once at first start if unset
    secret: str | None = None  # signs checkpoint manifests; generated under data_dir if unset
    host: str = "127.0.0.1"
    port: int = 8000
    poll_interval_s: float = 0.5  # how often the supervisor looks at its jobs
    pg_timeout_s: float = 30.0  # a hung collective fails after this
    # warm rank processes (torch imported) kept on each node for CPU jobs' next ranks, each
    # used by one job only (workers/cluster/pool.py); 0: every rank starts cold
    rank_pool_size: int = Field(2, ge=0)
    # each node's fork server (workers/cluster/fork_server.py): CPU ranks, warm or cold, are forked
    # from a process that has imported torch and the engine, not started from scratch
    fork_server: bool = True
    # a failed job restarts after restart_backoff_s * 2**(n - 1) s, at most 10 s, n its
    # failures since it last made progress (service/scheduling/restart.py)
    restart_backoff_s: float = Field(0.5, ge=0)
    # what a worker-hour of a job without a flavor costs (a flavor's is its own:
    # service/store/flavors.py `price_at`)
    default_price_per_worker_hour: float = Field(0.0, ge=0, allow_inf_nan=False)
    preemption_grace_s: float = Field(120.0, gt=0)  # checkpoint-and-stop time a preempted job gets
    # fair share between tenants: what they held over this window counts; a job
    # just started is charged a typical run's length (the median of recent runs),
    # or `fair_share_horizon_s` before any run has ended (see service.run.scheduling_pass)
    fair_share_window_s: float = Field(3600.0, gt=0)
    fair_share_horizon_s: float = Field(60.0, gt=0)
    max_body_bytes: int = 1 << 20
    # a file put under a tenant's data prefix through the API (PUT /v1/data/{path}) may be this large
    max_upload_bytes: int = Field(1 << 30, ge=1)
    rate_limit_per_s: float = Field(50.0, gt=0)  # each tenant's sustained /v1 requests per second
    rate_limit_burst: int = Field(100, ge=1)  # ... and how many it may send at once
    stream_max_s: float = 600.0  # a followed log stream closes after this; clients reconnect
    session_ttl_s: float = Field(8 * 3600.0, gt=0)  # a dashboard sign-in lasts this long
    # finished jobs (their records, history and storage) are removed this many days after
    # they ended; None: kept until deleted
    job_retention_days: float | None = Field(None, gt=0)
    # `brigade serve`'s logging (service.observability.log_config): level, text or JSON lines
    log_level: str = Field("INFO", pattern="(?i)^(debug|info|warning|error|critical)$")
    log_format: str = Field("text", pattern="^(text|json)$")
    # an MLflow tracking server every job's metrics also go to (a run per job, an
    # experiment per tenant: service.observability.tracking); None: none
    mlflow_tracking_uri: str | None = None
    # exports (Hugging Face format): safetensors files are cut at this size; a job
    # that succeeds is exported at its final checkpoint in this dtype ("" : not)
    export_max_shard_bytes: int = Field(5 * 10**9, ge=1)
    export_on_success: str = Field("float32", pattern="^(|float32|bfloat16)$")
    export_timeout_s: float = Field(3600.0, gt=0)
    # replicas on one Postgres (service/leadership.py): the leader holds a lease this long,
    # renewing it every third of it; another replica leads within about this much of its loss
    lease_s: float = Field(10.0, gt=0)
    # this replica's name in the lease, /readyz, events and audit rows; default: host-pid-random
    replica_name: str | None = Field(None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _no_default_secrets_in_production(self) -> Settings:
        if self.environment == "production":
            missing = [n for n in ("secret", "admin_key") if not getattr(self, n)]
            if missing:
                raise ValueError(
                    f"BRIGADE_{missing[0].upper()} must be set when BRIGADE_ENVIRONMENT=production"
                )
        return self

    @cached_property
    def resolved_replica_name(self) -> str:
        return self.replica_name or f"{socket.gethostname()[:100]}-{os.getpid()}-{secrets.token_hex(2)}"

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'brigade.db'}"

    @cached_property
    def resolved_storage_uri(self) -> str:
        return self.storage_uri or f"file://{Path(self.data_dir).resolve() / 'storage'}"

    @cached_property
    def resolved_data_uri_root(self) -> str:
        root = self.data_uri_root or f"file://{Path(self.data_dir).resolve() / 'data-store'}"
        return root.rstrip("/")

    def resolved_secret(self) -> str:
        """The manifest-signing secret: set, or made once and kept in data_dir."""
        return self._secret_value

    @cached_property
    def _secret_value(self) -> str:
        return self.secret or _kept_secret(Path(self.data_dir) / "secret")[0]

    def resolved_admin_key(self) -> str:
        """The admin API key: set, or made once and kept in data_dir."""
        return self.ensure_admin_key()[0]

    def ensure_admin_key(self) -> tuple[str, bool]:
        """(the admin key, whether this call generated it): the one start
        that makes the key is the one that shows it."""
        if self.admin_key:
            return self.admin_key, False
        return _kept_secret(self.admin_key_file)

    @property
    def admin_key_file(self) -> Path:
        """Where a generated admin key is kept (readable by its owner only)."""
        return Path(self.data_dir) / "admin_key"


def _kept_secret(path: Path) -> tuple[str, bool]:
    """(the secret kept at `path`, whether it was made now)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip(), False
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path.read_text().strip(), True
