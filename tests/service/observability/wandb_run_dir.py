"""A W&B offline run's directory read back: its transaction log
(`run-{id}.wandb`, LevelDB's log format behind W&B's 7-byte header) parsed
into W&B's own protobuf records. W&B ships no reader of it in Python."""

from __future__ import annotations

import glob
import json
import os
import re
import struct
import time
from dataclasses import dataclass, field
from typing import Any

BLOCK = 32 * 1024
HEADER = 7  # the file's (":W&B", magic, version) and each record's (crc, length, type)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    run_id: str = ""
    project: str = ""
    entity: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None


def records(path: str):
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header: padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0:
            pos += left
            continue
        if pos + HEADER + length > len(data):  # still being written
            return
        parts += data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_run(path: str) -> OfflineRun:
    run = OfflineRun()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id, run.project, run.entity, run.name = r.run_id, r.project, r.entity, r.display_name
            run.tags, run.notes = list(r.tags), r.notes
            run.config.update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif kind == "config":
            run.config.update({_key(u): json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            run.summary.update({_key(u): json.loads(u.value_json) for u in record.summary.update
                                if _key(u)})
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def offline_runs(wandb_dir: str, run_id: str, count: int, timeout_s: float = 60.0) -> list[OfflineRun]:
    """The `count` offline runs of `run_id` under WANDB_DIR, oldest first (a run
    resumed offline is a directory of its own, synced into one), once each has
    its exit record: `Run.finish()` returns before W&B's core process has written
    the whole log out (seen on a loaded machine: a log of its header alone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = _offline_runs(wandb_dir, run_id)
        if len(runs) >= count and all(run.exit_code is not None for run in runs):
            return runs
        assert time.monotonic() < deadline, (
            f"{count} finished runs of {run_id} not written within {timeout_s} s: {runs}")
        time.sleep(0.2)


def _offline_runs(wandb_dir: str, run_id: str) -> list[OfflineRun]:
    # offline-run-{time}-{id}, or -{id}-{n} for a second in the same second
    pattern = re.compile(rf"offline-run-(\d{{8}}_\d{{6}})-{re.escape(run_id)}(?:-(\d+))?")
    found = []
    for path in glob.glob(f"{wandb_dir}/wandb/offline-run-*/run-{run_id}.wandb"):
        if match := pattern.fullmatch(os.path.basename(os.path.dirname(path))):
            found.append(((match[1], int(match[2] or 0)), path))
    return [read_run(path) for _, path in sorted(found)]
