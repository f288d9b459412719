"""Where a job's checkpoints live: names and paths, nothing that does I/O.

    {root}/tenants/{tenant}/jobs/{job}/checkpoints/step-{step:09d}/
        __{rank}_{n}.distcp   DCP's shard files, one or more per rank
        .metadata             DCP's global plan (a pickle)
        manifest.json         ours, written last: its presence and signature
                              are the commit

Paths here are the filesystem's own paths (protocol stripped, as
`fsspec.core.url_to_fs` returns them), joined with "/" as strings: never
`pathlib`, which mangles "s3://".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MANIFEST_NAME = "manifest.json"
DCP_METADATA_NAME = ".metadata"
STEP_PREFIX = "step-"
MAX_STEP = 999_999_999  # nine digits keep the directory names in step order

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_STEP_DIR = re.compile(r"^step-(\d{9})$")


def validate_name(kind: str, value: str) -> str:
    """A tenant or job name that is safe as one path segment (no '/', no '..')."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(
            f"{kind} name {value!r} is not a safe path segment "
            "(letters, digits, '.', '_', '-'; at most 128; not starting with '.', '_' or '-')"
        )
    return value


def validate_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ValueError(f"step must be an int in 0..{MAX_STEP}, got {step!r}")
    return step


def step_dirname(step: int) -> str:
    return f"{STEP_PREFIX}{validate_step(step):09d}"


def parse_step_dirname(name: str) -> int | None:
    """The step of a directory name such as 'step-000000042', else None."""
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


def rank_file_prefix(rank: int) -> str:
    """DCP names the files of the rank at group position `rank` '__{rank}_{n}.distcp'."""
    return f"__{rank}_"


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class JobLayout:
    """The paths of one job's checkpoints under a filesystem root path."""

    root: str  # the filesystem's path of the storage root, protocol stripped
    tenant: str
    job: str

    def __post_init__(self) -> None:
        validate_name("tenant", self.tenant)
        validate_name("job", self.job)

    @property
    def prefix(self) -> str:
        """Everything the platform keeps of the job (checkpoints, exports, ...) is under here."""
        return f"{self.root.rstrip('/')}/tenants/{self.tenant}/jobs/{self.job}"

    @property
    def checkpoints(self) -> str:
        return f"{self.prefix}/checkpoints"

    def step(self, step: int) -> str:
        return f"{self.checkpoints}/{step_dirname(step)}"

    def file(self, step: int, name: str) -> str:
        return f"{self.step(step)}/{name}"

    def manifest(self, step: int) -> str:
        return self.file(step, MANIFEST_NAME)
