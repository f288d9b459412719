"""A small text dataset read directly: jsonl and parquet tokenized as read,
each document followed by the end-of-document id, windows by (seed, index)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.workers.datasets.corpus import documents, write_jsonl, write_parquet
from workers.datasets.errors import DataError
from workers.datasets.text import TEXT_MAX_BYTES, TextSource
from workers.datasets.tokenizer import load_tokenizer


def test_jsonl_and_parquet_give_the_same_ids_and_samples(tmp_path, corpus_dir):
    tokenizer = f"file://{corpus_dir}/tokenizer.json"
    docs = documents(5, 30)
    a = TextSource(write_jsonl(f"file://{tmp_path}/a.jsonl", docs, field="body"), "body", tokenizer, 1, 16)
    b = TextSource(write_parquet(f"file://{tmp_path}/b.parquet", docs, field="body"), "body",
                   tokenizer, 1, 16)
    assert np.array_equal(a.ids, b.ids)
    tok = load_tokenizer(tokenizer)
    eod = tok.token_to_id("<|endoftext|>")
    assert int((a.ids == eod).sum()) == len(docs) and a.ids[-1] == eod
    assert tok.decode(a.ids[: list(a.ids).index(eod)].tolist()) == docs[0]
    assert all(np.array_equal(a.sample(i), b.sample(i)) for i in range(10))
    assert a.sample(0).shape == (17,)


def test_a_missing_field_or_a_large_file_is_refused(tmp_path, corpus_dir):
    tokenizer = f"file://{corpus_dir}/tokenizer.json"
    uri = write_jsonl(f"file://{tmp_path}/a.jsonl", documents(1, 3))
    with pytest.raises(DataError, match="a.jsonl: line 1 has no string field 'body'"):
        TextSource(uri, "body", tokenizer, 0, 16)
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate(TEXT_MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(DataError, match="brigade data prepare"):
        TextSource(f"file://{big}", "text", tokenizer, 0, 16)
