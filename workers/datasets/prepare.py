"""Preparing a token dataset on Ray (`brigade data prepare`): input files
(jsonl, parquet or text; globs) tokenized in parallel, one Ray task a file,
each document followed by the end-of-document id, written as shards of at
most `tokens_per_shard` ids through fsspec, then the tokenizer, then the
index LAST (a half-written dataset has no index, so it is never read).

Deterministic: the files in sorted order, file k's shards named
`shard-{k:05d}-{part:03d}.bin`, each holding its file's ids in document
order, so the same inputs and tokenizer give byte-identical shards and index
whatever the number of workers. A task holds one shard's ids and a batch of
documents at a time, not its file.

With `train_vocab_size`, a byte-level BPE tokenizer of that size is first
trained on the same inputs (in one Ray task, the documents in input order),
with `<|endoftext|>` as its end-of-document token.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workers.datasets.errors import DataError
from workers.datasets.index import (
    INDEX_FILE,
    TOKENIZER_FILE,
    DatasetIndex,
    Shard,
    dtype_for,
    join,
)
from workers.datasets.text import encode_documents, file_format, iter_documents
from workers.datasets.tokenizer import eod_id, load_tokenizer, parse_tokenizer, vocab_size

TOKENS_PER_SHARD = 1 << 24  # 32 MiB of uint16 ids
EOD_TOKEN = "<|endoftext|>"


@dataclass(frozen=True)
class FileResult:
    file: str
    shards: list[Shard]
    documents: int
    seconds: float

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)


def expand_inputs(patterns: list[str], storage_options: dict | None = None) -> list[str]:
    """Every file the patterns (paths, URIs, globs or directories) name, as
    URIs, sorted, each once; DataError naming a pattern that matches nothing."""
    import fsspec

    found: set[str] = set()
    for pattern in patterns:
        try:
            fs, path = fsspec.core.url_to_fs(pattern, **(storage_options or {}))
            if any(c in path for c in "*?["):
                matches = [p for p in fs.glob(path) if fs.isfile(p)]
            elif fs.isdir(path):
                matches = [p for p in fs.find(path) if fs.isfile(p)]
            else:
                matches = [path] if fs.exists(path) else []
        except (OSError, ValueError) as e:  # re.error (a bad glob) is a ValueError too
            raise DataError(pattern, f"cannot list the inputs ({e})") from None
        if not matches:
            raise DataError(pattern, "no input files match")
        for match in matches:
            uri = fs.unstrip_protocol(match)
            file_format(uri)  # refuse what is not jsonl, parquet or text, by name
            found.add(uri)
    return sorted(found)


def _path_of(uri: str) -> str:
    return uri.split("://", 1)[1] if "://" in uri else uri


def train_tokenizer(inputs: list[str], field: str, size: int, storage_options: dict | None = None) -> str:
    """A byte-level BPE tokenizer of `size` ids trained on the inputs' documents
    (in order), as its JSON."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=[EOD_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    documents = (doc for uri in inputs for doc in iter_documents(uri, field, storage_options))
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return tokenizer.to_str()


def tokenize_file(number: int, uri: str, field: str, tokenizer_json: str, eod: int, dtype: str,
                  output: str, tokens_per_shard: int, storage_options: dict | None = None) -> FileResult:
    """One input file's ids as shards `shard-{number:05d}-{part:03d}.bin` under `output`."""
    import fsspec

    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core a task: the cluster parallelises
    start = time.perf_counter()
    tokenizer = parse_tokenizer(tokenizer_json.encode(), join(output, TOKENIZER_FILE))
    fs, root = fsspec.core.url_to_fs(output.rstrip("/"), **(storage_options or {}))
    fs.makedirs(root, exist_ok=True)  # a local directory (object stores have none)
    shards: list[Shard] = []
    pending: list[np.ndarray] = []
    held, documents = 0, 0

    def flush(ids: np.ndarray) -> None:
        name = f"shard-{number:05d}-{len(shards):03d}.bin"
        blob = ids.astype(np.dtype("<u2" if dtype == "uint16" else "<u4")).tobytes()
        fs.pipe_file(f"{root}/{name}", blob)
        shards.append(Shard(name, len(ids), hashlib.sha256(blob).hexdigest()))

    counted = _counting(iter_documents(uri, field, storage_options))
    for ids in encode_documents(tokenizer, counted, eod):
        pending.append(ids)
        held += len(ids)
        while held >= tokens_per_shard:
            joined = np.concatenate(pending)
            flush(joined[:tokens_per_shard])
            rest = joined[tokens_per_shard:]
            pending, held = [rest], len(rest)
    documents = counted.count
    if held:
        flush(np.concatenate(pending))
    return FileResult(uri, shards, documents, time.perf_counter() - start)


class _counting:
    def __init__(self, it):
        self.it, self.count = iter(it), 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        doc = next(self.it)
        self.count += 1
        return doc


def prepare(inputs: list[str], output: str, *, tokenizer: str | None = None, field: str = "text",
            train_vocab_size: int | None = None, workers: int = 2,
            tokens_per_shard: int = TOKENS_PER_SHARD, storage_options: dict | None = None,
            on_progress: Callable[[FileResult, int, int], None] | None = None) -> DatasetIndex:
    """Tokenize `inputs` (patterns) into a token dataset at `output`: on Ray
    (connected already), at most `workers` tasks at a time; `workers=0`: in
    this process (tests, and the one-process baseline of the benchmark).
    Returns its index."""
    import fsspec

    files = expand_inputs(inputs, storage_options)
    fs, root = fsspec.core.url_to_fs(output.rstrip("/"), **(storage_options or {}))
    if fs.exists(f"{root}/{INDEX_FILE}"):
        raise DataError(join(output, INDEX_FILE), "a dataset is already prepared here")
    fs.makedirs(root, exist_ok=True)
    tokenizer_json, _, eod, dtype = tokenizer_of(files, tokenizer, train_vocab_size, field,
                                                 storage_options, workers)
    jobs = [(number, uri, field, tokenizer_json, eod, dtype, output, tokens_per_shard, storage_options)
            for number, uri in enumerate(files)]
    results: dict[int, FileResult] = {}
    for number, result in _tokenize_all(jobs, workers):
        results[number] = result
        if on_progress is not None:
            on_progress(result, len(results), len(files))
    return write_index(output, [results[k] for k in range(len(files))], tokenizer_json, field,
                       storage_options)


def tokenizer_of(files: list[str], tokenizer: str | None, train_vocab_size: int | None, field: str,
                 storage_options: dict | None, workers: int = 0) -> tuple[str, int, int, str]:
    """(its JSON, vocabulary size, end-of-document id, the shards' dtype) of
    the tokenizer at `tokenizer`, or of one trained on `files` (in a Ray task,
    or here with workers=0)."""
    where = tokenizer or "the trained tokenizer"
    if train_vocab_size is not None:
        tokenizer_json = _call(workers, train_tokenizer, files, field, train_vocab_size, storage_options)
    elif tokenizer is not None:
        tokenizer_json = load_tokenizer(tokenizer, storage_options).to_str()
    else:
        raise ValueError("prepare needs a tokenizer (tokenizer=...) or train_vocab_size")
    parsed = parse_tokenizer(tokenizer_json.encode(), where)
    vocab = vocab_size(parsed)
    return tokenizer_json, vocab, eod_id(parsed, where), dtype_for(vocab)


def write_index(output: str, results: list[FileResult], tokenizer_json: str, field: str,
                storage_options: dict | None = None) -> DatasetIndex:
    """The tokenizer, then the index (last: now the dataset exists) of the
    files' shards, in file order."""
    import fsspec

    tokenizer = parse_tokenizer(tokenizer_json.encode(), "the tokenizer")
    vocab = vocab_size(tokenizer)
    index = DatasetIndex(dtype=dtype_for(vocab), vocab_size=vocab,
                         eod_id=eod_id(tokenizer, "the tokenizer"),
                         shards=tuple(s for r in results for s in r.shards),
                         tokenizer=TOKENIZER_FILE, documents=sum(r.documents for r in results),
                         extra={"inputs": [_path_of(r.file).rsplit("/", 1)[-1] for r in results],
                                "field": field})
    if not index.shards:
        raise DataError(results[0].file if results else output, "the inputs hold no documents")
    fs, root = fsspec.core.url_to_fs(output.rstrip("/"), **(storage_options or {}))
    fs.pipe_file(f"{root}/{TOKENIZER_FILE}", tokenizer_json.encode())
    fs.pipe_file(f"{root}/{INDEX_FILE}", index.to_json().encode())
    return index


def _call(workers: int, fn: Callable, *args):
    """fn(*args) in one Ray task (or here, with workers=0)."""
    if workers == 0:
        return fn(*args)
    import ray

    return _unwrapped(lambda: ray.get(ray.remote(num_cpus=1, max_retries=0)(fn).remote(*args)))


def _tokenize_all(jobs: list[tuple], workers: int):
    """(file number, FileResult) as each file is done; at most `workers` Ray tasks at a time."""
    if workers == 0:
        for job in jobs:
            yield job[0], tokenize_file(*job)
        return
    import ray

    task = ray.remote(num_cpus=1, max_retries=0)(tokenize_file)
    tokenizer_ref = ray.put(jobs[0][3]) if jobs else None
    queue, in_flight = list(jobs), dict[Any, int]()
    while queue or in_flight:
        while queue and len(in_flight) < workers:
            job = queue.pop(0)
            in_flight[task.remote(*job[:3], tokenizer_ref, *job[4:])] = job[0]
        done, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in done:
            number = in_flight.pop(ref)
            yield number, _unwrapped(lambda ref=ref: ray.get(ref))


def _unwrapped(get: Callable):
    """A task's own error (a DataError naming the file) rather than Ray's wrapper."""
    import ray

    try:
        return get()
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, DataError):
            raise e.cause from None
        raise
