"""What can be known of a job's token data before it runs, read where the
service takes the job (torch-free): the index parses, the shards are there
at their sizes (and, for a dataset of at most SUBMIT_CHECKSUM_BYTES, their
sha256 matches), the tokenizer parses, and the model's vocabulary covers
the dataset's. A refusal is a SpecError at the field whose uri is at fault,
its message naming the file; what only reading every token can show (an id
past the vocabulary) is found by the ranks, which fail the job naming the
file without restarting it (workers.datasets.errors.DataError).
"""

from __future__ import annotations

from workers.datasets.errors import DataError
from workers.datasets.index import DatasetIndex, join, read_index
from workers.datasets.integrity import check_shard_sizes, verify_checksums
from workers.datasets.storage import data_storage_options
from workers.datasets.text import check_text_file
from workers.datasets.tokenizer import eod_id, load_tokenizer, vocab_size
from workers.spec import JobSpec, SpecError

SUBMIT_CHECKSUM_BYTES = 64 << 20  # datasets up to this are checksummed at submit too


def check_job_data(spec: JobSpec, storage_options: dict | None = None) -> None:
    """SpecError (naming the field and the file) unless the job's token data
    looks usable; nothing to do for byte or synthetic data."""
    data, vocab = spec.data, spec.model.vocab_size
    storage_options = data_storage_options(storage_options)
    if data.source == "tokens":
        assert data.uri is not None
        _at("data.uri", lambda: check_token_dataset(data.uri or "", vocab, storage_options))
    elif data.source == "text":
        assert data.uri is not None and data.tokenizer is not None
        _at("data.tokenizer", lambda: check_tokenizer(data.tokenizer or "", vocab, storage_options))
        _at("data.uri", lambda: check_text_file(data.uri or "", storage_options))
    if spec.eval is not None and spec.eval.uri is not None:
        _at("eval.uri", lambda: check_token_dataset(spec.eval.uri or "", vocab, storage_options))


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


def _at(field: str, check) -> None:
    try:
        check()
    except DataError as e:
        raise SpecError(field, f"{field}: {e}") from None

