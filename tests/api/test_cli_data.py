"""`brigade data show`: a dataset's index and its first samples decoded
with its own tokenizer, as a job of that seq_len and seed reads them; a bad
prefix is an error naming the file, exit status 1. (`data prepare` on Ray:
tests/workers/datasets; through the service: tests/api/test_dataset_jobs.py.)"""

from __future__ import annotations

from typer.testing import CliRunner

from api.cli.main import app
from tests.workers.datasets.corpus import write_inputs, write_tokenizer
from workers.datasets.prepare import prepare
from workers.datasets.token_shards import TokenShardSource
from workers.datasets.tokenizer import load_tokenizer


def test_data_show_prints_the_index_and_decoded_samples(tmp_path):
    write_tokenizer(f"file://{tmp_path}/tok.json")
    write_inputs(f"file://{tmp_path}/in", files=2, docs_per_file=30)
    uri = f"file://{tmp_path}/ds"
    index = prepare([f"file://{tmp_path}/in/*"], uri, tokenizer=f"file://{tmp_path}/tok.json", workers=0)
    result = CliRunner().invoke(app, ["data", "show", uri, "--samples", "2", "--seq-len", "24",
                                      "--seed", "5"])
    assert result.exit_code == 0, result.output
    assert f"{index.tokens} tokens (uint16) in {len(index.shards)} shards, 60 documents" in result.output
    tokenizer = load_tokenizer(f"{uri}/tokenizer.json")
    source = TokenShardSource(uri, 5, 24)
    for i in range(2):
        assert f"--- sample {i} (25 tokens)" in result.output
        assert tokenizer.decode(source.sample(i).tolist(), skip_special_tokens=False) in result.output
    missing = CliRunner().invoke(app, ["data", "show", f"file://{tmp_path}/nothing"])
    assert missing.exit_code == 1 and "nothing/index.json: no dataset index" in missing.output
