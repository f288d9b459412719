"""What can be known of a job's data before it runs, read where the
service takes the job (torch-free): a byte-level file (`data.source: uri`)
is a file that can be read and holds a window (`workers.datasets.byte_file`);
for token data, the index parses, the shards are there
at their sizes (and, for a dataset of at most SUBMIT_CHECKSUM_BYTES, their
sha256 matches), the tokenizer parses, and the model's vocabulary covers
the dataset's; a mixture's datasets (`data.mix`) share one tokenizer. A
refusal is a SpecError at the field whose uri is at fault, its message
naming the file (a mixture's second tokenizer: both datasets and both
tokenizers); what only reading every token can show (an id
past the vocabulary) is found by the ranks, which fail the job naming the
file without restarting it (workers.datasets.errors.DataError).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from workers.datasets.byte_file import check_byte_file
from workers.datasets.errors import DataError
from workers.datasets.index import DatasetIndex, join, read_index
from workers.datasets.integrity import check_shard_sizes, verify_checksums
from workers.datasets.storage import data_storage_options
from workers.datasets.text import check_text_file
from workers.datasets.tokenizer import eod_id, load_tokenizer, vocab_size
from workers.schema import JobSpec, SpecError

T = TypeVar("T")
SUBMIT_CHECKSUM_BYTES = 64 << 20  # datasets up to this are checksummed at submit too


def check_job_data(spec: JobSpec, storage_options: dict | None = None) -> None:
    """SpecError (naming the field and the file) unless the job's data
    looks usable; nothing to do for the builtin corpus or synthetic data."""
    data, vocab = spec.data, spec.model.vocab_size
    storage_options = data_storage_options(storage_options)
    if data.source == "tokens" and data.mix is not None:
        check_mixture([m.uri for m in data.mix], vocab, storage_options)
    elif data.source == "tokens":
        assert data.uri is not None
        _at("data.uri", lambda: check_token_dataset(data.uri or "", vocab, storage_options))
    elif data.source == "uri":
        assert data.uri is not None
        _at("data.uri", lambda: check_byte_file(data.uri or "", spec.model.seq_len, storage_options))
    elif data.source == "text":
        assert data.uri is not None and data.tokenizer is not None
        _at("data.tokenizer", lambda: check_tokenizer(data.tokenizer or "", vocab, storage_options))
        _at("data.uri", lambda: check_text_file(data.uri or "", storage_options))
    if spec.eval is not None and (eval_uri := spec.eval.uri) is not None:
        _at("eval.uri", lambda: check_token_dataset(eval_uri, vocab, storage_options))


def check_token_dataset(prefix: str, model_vocab: int, storage_options: dict | None = None) -> DatasetIndex:
    index = read_index(prefix, storage_options)
    if index.vocab_size > model_vocab:
        raise DataError(join(prefix, "index.json"),
                        f"the dataset's vocabulary ({index.vocab_size}) is larger than "
                        f"model.vocab_size ({model_vocab})")
    if index.tokenizer:
        tokenizer_uri = join(prefix, index.tokenizer)
        tokenizer = load_tokenizer(tokenizer_uri, storage_options)
        if vocab_size(tokenizer) > index.vocab_size:
            raise DataError(tokenizer_uri, f"the tokenizer's vocabulary ({vocab_size(tokenizer)}) "
                                           f"is larger than the index's ({index.vocab_size})")
    check_shard_sizes(prefix, index, storage_options)
    if index.tokens * index.itemsize <= SUBMIT_CHECKSUM_BYTES:
        verify_checksums(prefix, index, list(range(len(index.shards))), storage_options)
    return index


def check_mixture(prefixes: list[str], model_vocab: int, storage_options: dict | None = None) -> None:
    """Each member a good token dataset (at `data.mix.{i}.uri`), all of the
    first one's tokenizer: the same vocabulary, end-of-document id and
    tokenizer file (by the sha256 of its canonical JSON)."""
    first: tuple[str, tuple] | None = None
    for i, prefix in enumerate(prefixes):
        field = f"data.mix.{i}.uri"
        index = _at(field, partial(check_token_dataset, prefix, model_vocab, storage_options))
        identity = (index.vocab_size, index.eod_id,
                    _at(field, partial(tokenizer_digest, prefix, index, storage_options)))
        if first is None:
            first = (prefix, identity)
        elif identity != first[1] and not _unknown_tokenizer(identity, first[1]):
            raise SpecError(field, f"{field}: {prefix} ({_described(identity)}) is not of the "
                                   f"tokenizer of data.mix.0.uri: {first[0]} "
                                   f"({_described(first[1])}); a mixture's datasets share one tokenizer")


def tokenizer_digest(prefix: str, index: DatasetIndex, storage_options: dict | None = None) -> str | None:
    """The sha256 of a dataset's tokenizer as canonical JSON (None: the index names none)."""
    if not index.tokenizer:
        return None
    canonical = load_tokenizer(join(prefix, index.tokenizer), storage_options).to_str()
    return hashlib.sha256(canonical.encode()).hexdigest()


def _unknown_tokenizer(a: tuple, b: tuple) -> bool:
    """The same vocabulary where an index names no tokenizer file: nothing more to compare."""
    return a[:2] == b[:2] and (a[2] is None or b[2] is None)


def _described(identity: tuple) -> str:
    vocab, eod, digest = identity
    tokenizer = f"tokenizer sha256 {digest[:12]}" if digest else "no tokenizer file"
    return f"vocabulary {vocab}, end of document {eod}, {tokenizer}"


def check_tokenizer(uri: str, model_vocab: int, storage_options: dict | None = None) -> int:
    """The tokenizer's vocabulary size, if it parses, has an end-of-document
    token and fits the model's vocabulary."""
    tokenizer = load_tokenizer(uri, storage_options)
    size = vocab_size(tokenizer)
    if size > model_vocab:
        raise DataError(uri, f"the tokenizer's vocabulary ({size}) is larger than "
                             f"model.vocab_size ({model_vocab})")
    eod_id(tokenizer, uri)
    return size


def _at(field: str, check: Callable[[], T]) -> T:
    try:
        return check()
    except DataError as e:
        raise SpecError(field, f"{field}: {e}") from None

