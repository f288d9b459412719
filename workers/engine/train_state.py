"""The train loop's resumable state besides the model and optimizer: the
step, the data cursor, the RNG and the metrics rows not yet recorded.

One `Stateful`, owned by the `Trainer` and handed to the checkpoints
(workers/engine/checkpointing.py), which save its `state_dict()` in the signed
manifest's `extra` and give it back with `load_state_dict` at a resume. The
keys are those the manifests have always had: step, data, rng, metrics.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful

from checkpoints import decode_bytes, encode_bytes
from checkpoints.manifest import finite


class TrainState(Stateful):
    """`step` (optimizer steps taken), `batches` (the data cursor: a
    `Stateful` of its own) and the unrecorded metrics rows.

    A row stays unrecorded until its reader acknowledges it (`acknowledge`,
    from the reader's thread): a checkpoint carries those rows, so that a
    group that ends before they were read (a rank killed, the control plane
    down) loses none."""

    def __init__(self, batches: Stateful) -> None:
        self.step = 0
        self.batches = batches
        self._unrecorded: list[dict] = []
        self._rows_lock = threading.Lock()  # the reader acknowledges from another thread

    # -- the metrics rows --------------------------------------------------------

    def record(self, row: dict) -> None:
        """A step's row, unrecorded until acknowledged."""
        with self._rows_lock:
            self._unrecorded.append(row)

    def acknowledge(self, step: int) -> None:
        """The rows up to `step` are recorded by their reader."""
        with self._rows_lock:
            self._unrecorded = [row for row in self._unrecorded if row["step"] > step]

    def unrecorded(self) -> list[dict]:
        """The rows not known to be recorded, oldest first (from an earlier
        attempt's checkpoint too, until acknowledged)."""
        with self._rows_lock:
            return list(self._unrecorded)

    # -- Stateful ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """As JSON (the manifest's `extra` holds it); the unrecorded rows,
        this step's included, marked where this step is the one saved."""
        return {
            "step": self.step,
            "data": self.batches.state_dict(),
            "rng": encode_bytes(torch.get_rng_state().numpy().tobytes()),
            "metrics": [_json_row(row, self.step) for row in self.unrecorded()],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = int(state_dict["step"])
        with self._rows_lock:
            self._unrecorded = [dict(row) for row in state_dict.get("metrics", [])]
        self.batches.load_state_dict(state_dict["data"])
        rng = torch.frombuffer(bytearray(decode_bytes(state_dict["rng"])), dtype=torch.uint8)
        torch.set_rng_state(rng)


    # -- in memory (workers/engine/snapshot.py) --------------------------------------

    def snapshot_state(self) -> dict[str, Any]:
        """`state_dict`'s keys, held in memory rather than written: the RNG
        state a tensor, the rows as they are (copied, none marked saved)."""
        return {
            "step": self.step,
            "data": copy.deepcopy(self.batches.state_dict()),
            "rng": torch.get_rng_state(),
            "metrics": copy.deepcopy(self.unrecorded()),
        }

    def load_snapshot_state(self, state: dict[str, Any]) -> None:
        """Back to a `snapshot_state()` (the read-ahead batch dropped)."""
        self.step = int(state["step"])
        with self._rows_lock:
            self._unrecorded = copy.deepcopy(state["metrics"])
        self.batches.load_state_dict(copy.deepcopy(state["data"]))
        torch.set_rng_state(state["rng"].clone())


def _json_row(row: dict, saved: int) -> dict:
    """A metrics row as the manifest can hold it: JSON has no NaN or infinity
    (the store keeps them as None too); the saved step's row says it was saved."""
    out = {k: finite(v) for k, v in row.items()}
    if row["step"] == saved:
        out["checkpoint_step"] = saved
    return out
