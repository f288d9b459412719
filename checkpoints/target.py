"""Where a job's checkpoints live: chosen by the platform, never by the job
(so not part of the job spec, nor of its hash). `secret` signs manifests.

A frozen value: the control plane makes it (`JobStorage.checkpoint_target`, service/control/storage.py)
and hands it as itself to whatever needs the job's storage, the rank actors
on Ray included (it pickles as any dataclass). `from_dict` and `to_dict` are
for where it travels as plain data (an export's request, a test's target).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from checkpoints.exports import ExportStore
from checkpoints.store import CheckpointStore


@dataclass(frozen=True, kw_only=True)
class CheckpointTarget:
    root: str
    tenant: str
    job: str
    secret: str = field(repr=False)  # never in a log line or an error's repr
    storage_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CheckpointTarget:
        """The target that `to_dict` (or a caller's plain data) describes."""
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        """The target as plain data (JSON-able), for a request that travels as such."""
        return asdict(self)

    def open_store(self) -> CheckpointStore:
        """The job's `CheckpointStore` (torch-free: the control plane lists with it)."""
        return CheckpointStore(
            self.root, tenant=self.tenant, job=self.job, secret=self.secret.encode(),
            storage_options=self.storage_options,
        )

    def open_exports(self) -> ExportStore:
        """The job's `ExportStore` (torch-free)."""
        return ExportStore(
            self.root, tenant=self.tenant, job=self.job, secret=self.secret.encode(),
            storage_options=self.storage_options,
        )

    def of_job(self, job: str) -> CheckpointTarget:
        """The same storage and secret, for another job of the same tenant (an init source)."""
        return CheckpointTarget(root=self.root, tenant=self.tenant, job=job, secret=self.secret,
                                storage_options=dict(self.storage_options))
