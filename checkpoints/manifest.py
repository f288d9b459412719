"""The manifest: what a committed step holds, signed with the service's secret.

The signature is an HMAC-SHA256 over the canonical JSON of every field but
`hmac` itself (sorted keys, no spaces, ASCII, no NaN). It covers tenant, job and
step, so a manifest copied to another job's or step's directory does not verify
there. DCP's `.metadata` is a pickle: it is listed here with its checksum, and
a step whose manifest does not verify is never handed to DCP.

Each file's checksum names its algorithm (`FileEntry.algo`): a checkpoint's
files are hashed with BLAKE3 (`CHECKPOINT_DIGEST`: cryptographic, so the
signed manifest stays tamper-evident, and 2.5x sha256's speed on one core
here); an export's with sha256 (`checkpoints.exports`). Format 1 manifests
(every file a sha256, `{"size", "sha256"}`) are still read, so checkpoints
written before BLAKE3 keep resuming; only format 2 is written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from checkpoints.errors import CheckpointInvalid, TornCheckpoint

FORMAT_VERSION = 2  # each file's digest names its algorithm
_SHA256_ONLY_FORMAT = 1  # every file a sha256: read, never written
_HMAC_KEY = "hmac"

DIGEST_ALGOS = ("blake3", "sha256")
CHECKPOINT_DIGEST = "blake3"


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    size: int
    algo: str  # one of DIGEST_ALGOS
    digest: str  # hex

    @property
    def sha256(self) -> str:
        """The digest of an entry hashed with sha256 (an export's files: what
        the API serves); AttributeError for any other algorithm."""
        if self.algo != "sha256":
            raise AttributeError(f"this file's digest is {self.algo}, not sha256")
        return self.digest


@dataclass(frozen=True, kw_only=True)
class Manifest:
    tenant: str
    job: str
    step: int
    world_size: int
    created_at: str  # ISO 8601, UTC
    files: dict[str, FileEntry]  # name in the step directory -> size and checksum
    extra: dict[str, Any] = field(default_factory=dict)  # the engine's: cursor, RNG, config hash
    format: int = FORMAT_VERSION

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files.values())

    @property
    def created_at_datetime(self) -> datetime:
        return datetime.fromisoformat(self.created_at)

    def to_json(self, secret: bytes) -> bytes:
        """The signed manifest, as written to `manifest.json` (format 2 only)."""
        if self.format != FORMAT_VERSION:
            raise ValueError(f"manifests are written in format {FORMAT_VERSION}, not {self.format}")
        body = asdict(self)
        signed = dict(body, **{_HMAC_KEY: sign(body, secret)})
        return json.dumps(signed, sort_keys=True, indent=1, allow_nan=False).encode()

    @classmethod
    def from_json(cls, data: bytes, secret: bytes) -> Manifest:
        """Parse and verify; raises `CheckpointInvalid` with the reason."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TornCheckpoint(f"manifest is not valid JSON ({exc})") from None
        if not isinstance(raw, dict) or not isinstance(raw.get(_HMAC_KEY), str):
            raise CheckpointInvalid("manifest has no signature")
        claimed = raw.pop(_HMAC_KEY)
        try:
            expected = sign(raw, secret)
        except ValueError as exc:
            raise CheckpointInvalid(f"manifest cannot be canonicalised ({exc})") from None
        if not hmac.compare_digest(claimed, expected):
            raise CheckpointInvalid(
                "manifest HMAC mismatch (edited, or signed with another secret)"
            )
        fmt = raw.get("format")
        if fmt not in (_SHA256_ONLY_FORMAT, FORMAT_VERSION):
            raise CheckpointInvalid(f"manifest format {fmt!r} is unknown")
        try:
            files = {name: _file_entry(entry, fmt) for name, entry in raw.pop("files").items()}
            return cls(files=files, **raw)
        except (AttributeError, KeyError, TypeError) as exc:
            raise CheckpointInvalid(f"manifest fields are malformed ({exc})") from None


def _file_entry(entry: dict[str, Any], fmt: int) -> FileEntry:
    if fmt == _SHA256_ONLY_FORMAT:
        if set(entry) != {"size", "sha256"}:
            raise TypeError(f"a format 1 file entry has a size and a sha256, not {sorted(entry)}")
        return FileEntry(size=entry["size"], algo="sha256", digest=entry["sha256"])
    parsed = FileEntry(**entry)
    if parsed.algo not in DIGEST_ALGOS:
        raise TypeError(f"digest algorithm {parsed.algo!r} is not one of {', '.join(DIGEST_ALGOS)}")
    return parsed


def canonical_json(value: Any) -> bytes:
    """The one byte string a JSON value signs as; ValueError if it is not JSON."""
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        )
    except TypeError as exc:
        raise ValueError(f"not JSON-serialisable: {exc}") from None
    return text.encode()


def sign(body: dict[str, Any], secret: bytes) -> str:
    return hmac.new(check_secret(secret), canonical_json(body), hashlib.sha256).hexdigest()


def check_secret(secret: bytes) -> bytes:
    if not isinstance(secret, bytes) or not secret:
        raise ValueError("the checkpoint signing secret must be non-empty bytes")
    return secret


def finite(value: Any) -> Any:
    """`value` as JSON can hold it: a NaN or infinite float is None (a metrics
    row in a manifest's extra, or in the job store)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def snapshot_extra(extra: dict[str, Any] | None) -> dict[str, Any]:
    """A JSON copy of the caller's `extra`, taken now (the caller may go on
    mutating its dict while an async save runs); ValueError if not JSON."""
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise ValueError(f"extra must be a dict, got {type(extra).__name__}")
    try:
        return json.loads(canonical_json(extra))
    except ValueError as exc:
        raise ValueError(f"checkpoint extra is {exc}") from None


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def encode_bytes(data: bytes) -> str:
    """Bytes (an RNG state, say) as a base64 string that fits in `extra`."""
    return base64.b64encode(data).decode("ascii")


def decode_bytes(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
