"""Documents from jsonl, parquet or plain text files (any fsspec URI), and
a small text dataset used directly (`data: {source: text, uri, field,
tokenizer}`): its documents tokenized as read into one array of ids, each
document followed by the end-of-document id, and windows of seq_len + 1
drawn from it by (seed, sample index) like the byte corpora.

"Small" is TEXT_MAX_BYTES of input (the ids of 64 MiB of text are ~64 MB
as uint32 at ~4 bytes of text a token); anything larger is refused with a
pointer to `brigade data prepare`, which streams.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from workers.datasets.errors import DataError
from workers.datasets.order import mix64
from workers.datasets.tokenizer import eod_id, load_tokenizer, vocab_size

TEXT_MAX_BYTES = 64 << 20
ENCODE_BATCH = 256  # documents a batch encode takes
FORMATS = (".jsonl", ".json", ".parquet", ".txt", ".text", ".md")


def file_format(uri: str) -> str:
    """jsonl, parquet or text, from the file's name."""
    name = uri.rsplit("/", 1)[-1].lower()
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".txt", ".text", ".md")):
        return "text"
    raise DataError(uri, f"not a jsonl, parquet or text file (by its name: one of {', '.join(FORMATS)})")


def iter_documents(uri: str, field: str = "text", storage_options: dict | None = None) -> Iterator[str]:
    """The documents of one file, in order: each line's `field` (jsonl),
    each row's `field` (parquet), or the whole file (text)."""
    import fsspec

    kind = file_format(uri)
    try:
        with fsspec.open(uri, "rb", **(storage_options or {})) as f:
            if kind == "text":
                yield f.read().decode("utf-8", errors="replace")
            elif kind == "jsonl":
                yield from _jsonl(f, uri, field)
            else:
                yield from _parquet(f, uri, field)
    except FileNotFoundError:
        raise DataError(uri, "input file not found") from None
    except IsADirectoryError:
        raise DataError(uri, "is a folder, not an input file") from None


def _jsonl(f, uri: str, field: str) -> Iterator[str]:
    for number, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise DataError(uri, f"line {number} is not JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get(field), str):
            raise DataError(uri, f"line {number} has no string field {field!r}")
        yield row[field]


def _parquet(f, uri: str, field: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(uri, "reading parquet needs pyarrow (pip install 'brigade[data]')") from None
    try:
        table = pq.ParquetFile(f)
    except Exception as e:  # pyarrow's ArrowInvalid and friends
        raise DataError(uri, f"not a parquet file ({str(e)[:200]})") from None
    if field not in table.schema_arrow.names:
        raise DataError(uri, f"no column {field!r} (columns: {', '.join(table.schema_arrow.names)})")
    for batch in table.iter_batches(columns=[field], batch_size=1024):
        for value in batch.column(0).to_pylist():
            if value is not None:
                yield str(value)


def encode_documents(tokenizer, documents: Iterator[str], eod: int) -> Iterator[np.ndarray]:
    """Each batch of documents as one array of ids, every document followed by `eod`."""
    batch: list[str] = []
    for doc in documents:
        batch.append(doc)
        if len(batch) == ENCODE_BATCH:
            yield _encoded(tokenizer, batch, eod)
            batch = []
    if batch:
        yield _encoded(tokenizer, batch, eod)


def _encoded(tokenizer, docs: list[str], eod: int) -> np.ndarray:
    parts = []
    for enc in tokenizer.encode_batch(docs, add_special_tokens=False):
        parts.append(np.asarray(enc.ids, dtype=np.uint32))
        parts.append(np.asarray([eod], dtype=np.uint32))
    return np.concatenate(parts)


def check_text_file(uri: str, storage_options: dict | None = None) -> None:
    """A text dataset one may read directly: a known format, there, and small."""
    import fsspec

    file_format(uri)
    fs, path = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    try:
        info = fs.info(path)
        if info.get("type") == "directory":
            raise DataError(uri, "is a folder, not a text dataset file")
        size = info["size"]
        with fs.open(path, "rb") as f:  # readable, not only listed
            f.read(1)
    except FileNotFoundError:
        raise DataError(uri, "text dataset not found") from None
    except OSError as e:  # a folder opened, permissions, a store that refuses
        raise DataError(uri, f"cannot read the text dataset ({type(e).__name__}: {e})") from None
    if size > TEXT_MAX_BYTES:
        raise DataError(uri, f"{size} bytes is more than a text dataset read directly may hold "
                             f"({TEXT_MAX_BYTES}); prepare it into token shards (brigade data prepare)")


class TextSource:
    """A small text dataset's windows of seq_len + 1 ids, by (seed, index)."""

    def __init__(self, uri: str, field: str, tokenizer_uri: str, seed: int, seq_len: int,
                 storage_options: dict | None = None):
        check_text_file(uri, storage_options)
        tokenizer = load_tokenizer(tokenizer_uri, storage_options)
        self.vocab_size = vocab_size(tokenizer)
        eod = eod_id(tokenizer, tokenizer_uri)
        chunks = list(encode_documents(tokenizer, iter_documents(uri, field, storage_options), eod))
        self.ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint32)
        if len(self.ids) < seq_len + 2:
            raise DataError(uri, f"{len(self.ids)} tokens is too few for seq_len {seq_len} "
                                 f"(needs at least {seq_len + 2})")
        self._mix, self.seed, self.seq_len = mix64, seed, seq_len
        self.windows = len(self.ids) - seq_len - 1

    def sample(self, index: int) -> np.ndarray:
        off = self._mix(self.seed, index) % self.windows
        return self.ids[off : off + self.seq_len + 1].astype(np.int64)
