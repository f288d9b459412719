"""Sharded checkpoints through fsspec: layout, signed manifest, commit,
listing, retention, and collective save/load with resharding.

This package imports nothing else of Brigade's. Importing it does not import
torch (the control plane lists checkpoints with `CheckpointStore`); the
collective side is `checkpoints.checkpointer.Checkpointer`.
"""

from checkpoints.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointInvalid,
    TornCheckpoint,
)
from checkpoints.manifest import FileEntry, Manifest, decode_bytes, encode_bytes
from checkpoints.store import CheckpointInfo, CheckpointStore, Rejection
from checkpoints.target import CheckpointTarget

__all__ = [
    "CheckpointError",
    "CheckpointExistsError",
    "CheckpointInfo",
    "CheckpointInvalid",
    "CheckpointStore",
    "CheckpointTarget",
    "FileEntry",
    "Manifest",
    "Rejection",
    "TornCheckpoint",
    "decode_bytes",
    "encode_bytes",
]
