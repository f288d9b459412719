"""Data that passes every check at submit and fails the ranks that read it,
for the tests of a job that fails at run time on its data (tests/chaos,
tests/soak, tests/api): a token dataset whose index, shard size and checksum
are right but whose ids lie past its vocabulary, which only reading every
token can show (workers/datasets/checks.py). Its job fails at once, naming
the shard, without spending a restart (a `DataError`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import fsspec

SHARD = "shard-00000-000.bin"


def write_out_of_vocabulary_dataset(where: Path | str, vocab_size: int = 256, tokens: int = 512,
                                    storage_options: dict | None = None) -> str:
    """The dataset, written at `where` (a local folder, made, or an fsspec
    URI): its URI, a `data: {source: tokens, uri: ...}` for a model of
    `vocab_size` or more."""
    uri = f"file://{where}" if isinstance(where, Path) else where.rstrip("/")
    blob = vocab_size.to_bytes(2, "little") * tokens  # every id one past the vocabulary (uint16)
    index = {"format": "brigade-tokens", "version": 1, "dtype": "uint16", "vocab_size": vocab_size,
             "eod_id": 0, "tokenizer": None, "documents": 1, "tokens": tokens,
             "shards": [{"file": SHARD, "tokens": tokens, "sha256": hashlib.sha256(blob).hexdigest()}]}
    fs, root = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    fs.makedirs(root, exist_ok=True)
    fs.pipe(f"{root}/{SHARD}", blob)
    fs.pipe(f"{root}/index.json", json.dumps(index).encode())  # last, as a preparation writes it
    return uri
