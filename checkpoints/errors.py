"""The errors of the checkpoints package: all are `CheckpointError`s."""

from __future__ import annotations


class CheckpointError(Exception):
    """A checkpoint could not be saved, verified or loaded."""


class CheckpointExistsError(CheckpointError):
    """A save was asked to write into a step directory that already has files."""


class CheckpointInvalid(CheckpointError):
    """A step that is not committed: no manifest, a bad signature, or files that
    do not match their manifest. The message is the reason."""


class TornCheckpoint(CheckpointInvalid):
    """No manifest, or one cut short: a save that never finished."""
