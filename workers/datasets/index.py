"""A prepared token dataset, as stored under its prefix (any fsspec URI):

    {prefix}/index.json          written LAST: a dataset without it does not exist
    {prefix}/tokenizer.json      the Hugging Face `tokenizers` file its ids come from
    {prefix}/shard-00000-000.bin flat little-endian token ids (uint16 or uint32),
    ...                          documents one after another, each followed by eod_id

index.json:

    {"format": "brigade-tokens", "version": 1, "dtype": "uint16", "vocab_size": 512,
     "eod_id": 0, "tokenizer": "tokenizer.json", "documents": 120, "tokens": 48213,
     "shards": [{"file": "shard-00000-000.bin", "tokens": 48213, "sha256": "..."}]}

Torch- and numpy-free: the API reads an index at submit.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from workers.datasets.errors import DataError

FORMAT = "brigade-tokens"
VERSION = 1
INDEX_FILE = "index.json"
TOKENIZER_FILE = "tokenizer.json"
ITEMSIZE = {"uint16": 2, "uint32": 4}
MAX_INDEX_BYTES = 16 << 20  # an index is small: one line per shard


@dataclass(frozen=True)
class Shard:
    file: str  # relative to the dataset's prefix
    tokens: int
    sha256: str


@dataclass(frozen=True)
class DatasetIndex:
    dtype: str
    vocab_size: int
    eod_id: int
    shards: tuple[Shard, ...]
    tokenizer: str | None = TOKENIZER_FILE
    documents: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. how it was prepared

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    def to_json(self) -> str:
        body = {"format": FORMAT, "version": VERSION, "dtype": self.dtype,
                "vocab_size": self.vocab_size, "eod_id": self.eod_id,
                "tokenizer": self.tokenizer, "documents": self.documents, "tokens": self.tokens,
                "shards": [asdict(s) for s in self.shards], "extra": self.extra}
        return json.dumps(body, indent=1, sort_keys=True) + "\n"


def dtype_for(vocab_size: int) -> str:
    """The narrowest dtype that holds every id of a vocabulary."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def join(prefix: str, name: str) -> str:
    return f"{prefix.rstrip('/')}/{name}"


def parse_index(text: bytes | str, where: str) -> DatasetIndex:
    """An index from its JSON; DataError naming `where` if it is not one."""
    try:
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(where, f"not a JSON dataset index ({e})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise DataError(where, f"not a dataset index (no \"format\": \"{FORMAT}\")")
    if body.get("version") != VERSION:
        raise DataError(where, f"index version {body.get('version')!r} is not {VERSION}")
    try:
        dtype = body["dtype"]
        if dtype not in ITEMSIZE:
            raise DataError(where, f"dtype {dtype!r} is not one of {sorted(ITEMSIZE)}")
        shards = tuple(Shard(str(s["file"]), int(s["tokens"]), str(s["sha256"]))
                       for s in body["shards"])
        index = DatasetIndex(dtype=dtype, vocab_size=int(body["vocab_size"]),
                             eod_id=int(body["eod_id"]), shards=shards,
                             tokenizer=body.get("tokenizer"), documents=int(body.get("documents", 0)),
                             extra=dict(body.get("extra") or {}))
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(where, f"malformed dataset index ({type(e).__name__}: {e})") from None
    _check_consistent(index, where)
    return index


def _check_consistent(index: DatasetIndex, where: str) -> None:
    if index.vocab_size < 2 or index.vocab_size > 1 << ITEMSIZE[index.dtype] * 8:
        raise DataError(where, f"vocab_size {index.vocab_size} does not fit dtype {index.dtype}")
    if not 0 <= index.eod_id < index.vocab_size:
        raise DataError(where, f"eod_id {index.eod_id} is outside the vocabulary "
                               f"(0..{index.vocab_size - 1})")
    if not index.shards:
        raise DataError(where, "the dataset has no shards")
    for s in index.shards:
        if s.tokens < 0 or "/" in s.file or s.file in ("", ".", "..") or len(s.sha256) != 64:
            raise DataError(where, f"malformed shard entry {s.file!r}")


def read_index(prefix: str, storage_options: dict | None = None) -> DatasetIndex:
    """The index of the dataset at `prefix`; DataError naming the file if it
    is missing or malformed."""
    import fsspec

    where = join(prefix, INDEX_FILE)
    fs, path = fsspec.core.url_to_fs(where, **(storage_options or {}))
    try:
        info = fs.info(path)
        if info.get("type") == "directory" or info["size"] > MAX_INDEX_BYTES:
            raise DataError(where, "is not a dataset index (a directory, or too large)")
        blob = fs.cat_file(path)
    except FileNotFoundError:
        raise DataError(where, "no dataset index here (not a prepared dataset, or its "
                               "preparation has not finished)") from None
    except OSError as e:  # unreadable: permissions, a store that refuses
        raise DataError(where, f"cannot read the dataset index ({e})") from None
    return parse_index(blob, where)
