"""A prepared token dataset (in-process, no Ray) and its inputs, made once a session."""

from __future__ import annotations

import pytest

from tests.workers.datasets.corpus import write_inputs, write_tokenizer
from workers.datasets.prepare import prepare


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_tokenizer(f"file://{root}/tokenizer.json")
    write_inputs(f"file://{root}/inputs", files=4, docs_per_file=120)
    return root


@pytest.fixture(scope="session")
def dataset(corpus_dir):
    """(prefix, index) of a small dataset of several shards."""
    prefix = f"file://{corpus_dir}/dataset"
    index = prepare([f"file://{corpus_dir}/inputs/*"], prefix, tokenizer=f"file://{corpus_dir}/tokenizer.json",
                    workers=0, tokens_per_shard=3000)
    return prefix, index
