"""Bad data gets a clear error naming the file: refused at submit where the
index can be read then (`check_job_data`: a SpecError, the API's 422), else
a DataError from the ranks, which the lifecycle fails at once, without
spending a restart (tests/service/run/test_permanent_failure.py)."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from workers.cluster.errors import is_permanent
from workers.datasets.checks import check_job_data
from workers.datasets.errors import DataError
from workers.datasets.prepare import expand_inputs
from workers.datasets.sources import token_source
from workers.datasets.token_shards import TokenShardSource
from workers.schema import JobSpec, SpecError


def spec(uri: str, vocab: int = 512, **data) -> JobSpec:
    return JobSpec.model_validate({"model": {"vocab_size": vocab, "seq_len": 16},
                                   "data": {"source": "tokens", "uri": uri, **data},
                                   "train": {"steps": 2}})


@pytest.fixture
def copy(dataset, tmp_path):
    """A fresh copy of the dataset to break: (prefix, its directory)."""
    prefix, _ = dataset
    target = tmp_path / "ds"
    shutil.copytree(prefix.removeprefix("file://"), target)
    return f"file://{target}", target


def rewrite_index(directory, change) -> None:
    path = directory / "index.json"
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body))


def refusal(job: JobSpec) -> SpecError:
    with pytest.raises(SpecError) as caught:
        check_job_data(job)
    return caught.value


def test_a_good_dataset_passes(dataset):
    check_job_data(spec(dataset[0]))


def test_a_vocabulary_the_model_does_not_cover_is_refused_with_both_numbers(dataset):
    prefix, index = dataset
    error = refusal(spec(prefix, vocab=300))
    assert error.field == "data.uri"
    assert f"({index.vocab_size})" in str(error) and "(300)" in str(error)
    assert "index.json" in str(error)


def test_a_missing_index_or_shard_is_refused_naming_the_file(copy):
    prefix, directory = copy
    (directory / "shard-00001-000.bin").unlink()
    assert "shard-00001-000.bin: shard missing" in str(refusal(spec(prefix)))
    (directory / "index.json").unlink()
    assert "index.json: no dataset index" in str(refusal(spec(prefix)))


def test_a_shard_of_the_wrong_size_or_checksum_is_refused(copy):
    prefix, directory = copy
    shard = directory / "shard-00002-000.bin"
    blob = bytearray(shard.read_bytes())
    blob[10] ^= 0xFF
    shard.write_bytes(bytes(blob))
    error = str(refusal(spec(prefix)))
    assert "shard-00002-000.bin: checksum mismatch" in error
    shard.write_bytes(bytes(blob) + b"\0\0")
    assert "shard-00002-000.bin: shard is" in str(refusal(spec(prefix)))
    # At start, each rank checks its share of the checksums (the submit's were skipped, say)
    shard.write_bytes(bytes(blob))
    with pytest.raises(DataError, match="shard-00002-000.bin: checksum mismatch"):
        token_source(spec(prefix).data, spec(prefix).model, 0, rank=0, world_size=1)


def test_a_token_id_past_the_vocabulary_fails_the_read_naming_the_file(copy):
    prefix, directory = copy
    shard = directory / "shard-00000-000.bin"
    ids = np.frombuffer(shard.read_bytes(), dtype="<u2").copy()
    ids[:] = 9999  # every window of this shard
    blob = ids.tobytes()
    shard.write_bytes(blob)
    rewrite_index(directory, lambda body: body["shards"][0].update(
        sha256=hashlib.sha256(blob).hexdigest()))
    source = TokenShardSource(prefix, 0, 16)
    bad = next(i for i in range(1000) if source.locate(source._mix(0, i) % source.total_windows)[0] == 0)
    with pytest.raises(DataError, match=r"shard-00000-000.bin: token id 9999 at token \d+ is >= "
                                        r"the vocabulary size"):
        source.sample(bad)


def test_a_tokenizer_that_does_not_parse_is_refused(copy, corpus_dir):
    prefix, directory = copy
    (directory / "tokenizer.json").write_text("{not json")
    assert "tokenizer.json: not a tokenizers JSON file" in str(refusal(spec(prefix)))
    text = JobSpec.model_validate({
        "model": {"vocab_size": 512, "seq_len": 16}, "train": {"steps": 2},
        "data": {"source": "text", "uri": f"file://{corpus_dir}/inputs/part-0.jsonl",
                 "tokenizer": f"{prefix}/tokenizer.json"}})
    error = refusal(text)
    assert error.field == "data.tokenizer" and "not a tokenizers JSON file" in str(error)


def test_an_empty_input_glob_is_refused_naming_it(tmp_path):
    with pytest.raises(DataError, match=r"nothing-\*.jsonl: no input files match"):
        expand_inputs([f"file://{tmp_path}/nothing-*.jsonl"])


def test_a_data_error_crosses_processes_and_reads_as_permanent():
    import pickle

    error = pickle.loads(pickle.dumps(DataError("s3://b/x.bin", "shard missing")))
    assert isinstance(error, DataError) and error.file == "s3://b/x.bin"
    assert str(error) == "s3://b/x.bin: shard missing"
    assert is_permanent(f"rank 1 (pid 7) failed: {type(error).__name__}: {error}")
    assert not is_permanent("rank 1 (pid 7) failed: RuntimeError: Connection reset by peer")


def test_a_directory_where_a_file_should_be_is_refused_not_a_crash(copy, corpus_dir):
    prefix, directory = copy
    text = JobSpec.model_validate({
        "model": {"vocab_size": 512, "seq_len": 16}, "train": {"steps": 2},
        "data": {"source": "text", "uri": f"file://{corpus_dir}/inputs/part-0.jsonl",
                 "tokenizer": prefix}})
    assert "is a directory" in str(refusal(text))
    (directory / "index.json").unlink()
    (directory / "index.json").mkdir()
    assert "is not a dataset index" in str(refusal(spec(prefix)))
