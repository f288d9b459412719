"""`data prepare` on Ray over jsonl and parquet files, to file:// and to
s3:// (moto), byte-identical on a second run; then a 2-rank job on the
prepared shards whose loss falls, resumed at world sizes 1 and 3 on the same
curve, with a validation loss equal at world sizes 1 and 2."""

from __future__ import annotations

import uuid

import fsspec
import pytest

from tests.workers.datasets.corpus import write_inputs
from tests.workers.engine_spec import engine_spec
from workers.datasets.prepare import prepare
from workers.cluster.group import WorkerGroup

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

SECRET = "datasets-test-secret-0123456789abcdef"


def files_of(uri: str, options: dict | None = None) -> dict[str, bytes]:
    fs, root = fsspec.core.url_to_fs(uri, **(options or {}))
    return {path.rsplit("/", 1)[-1]: fs.cat_file(path) for path in sorted(fs.find(root))}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A dataset prepared on Ray (2 tasks at a time) with a tokenizer trained on Ray."""
    root = tmp_path_factory.mktemp("prepare")
    inputs = write_inputs(f"file://{root}/in", files=4, docs_per_file=150)
    first = f"file://{root}/out-1"
    seen = []
    index = prepare([f"file://{root}/in/*.jsonl", f"file://{root}/in/*.parquet"], first,
                    train_vocab_size=512, workers=2, tokens_per_shard=4096,
                    on_progress=lambda result, done, total: seen.append((done, total)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert index.documents == 600 and len(index.shards) > 4 and index.dtype == "uint16"
    assert index.extra["inputs"] == sorted(u.rsplit("/", 1)[-1] for u in inputs)
    return root, first, index


def test_prepare_is_byte_identical_on_a_second_run_and_on_s3(prepared, moto_s3, s3_bucket):
    root, first, index = prepared
    again = f"file://{root}/out-2"
    prepare([f"file://{root}/in"], again, train_vocab_size=512, workers=1, tokens_per_shard=4096)
    assert files_of(again) == files_of(first)  # a directory input, 1 worker: the same bytes
    s3 = f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}/corpus"
    prepare([f"file://{root}/in/*"], s3, tokenizer=f"{first}/tokenizer.json", workers=2,
            tokens_per_shard=4096, storage_options=moto_s3)
    assert files_of(s3, moto_s3) == files_of(first)
    with pytest.raises(ValueError, match="already prepared"):
        prepare([f"file://{root}/in/*"], first, tokenizer=f"{first}/tokenizer.json", workers=2)


def job(uri: str, **train) -> dict:
    return engine_spec(30, model={"vocab_size": 512, "seq_len": 32},
                       data={"source": "tokens", "uri": uri},
                       train={"global_batch_size": 6, **train},
                       eval={"holdout_fraction": 0.1, "every_steps": 10, "batches": 2})


def target(root, name: str) -> dict:
    return {"root": f"file://{root}/store", "tenant": "acme", "job": name, "secret": SECRET,
            "storage_options": {}}


def test_a_job_trains_on_prepared_shards_and_resumes_at_other_sizes(prepared, fork_pool):
    root, uri, _ = prepared
    spec = job(uri)
    with WorkerGroup(2, pool=fork_pool) as group:
        straight = group.train(spec)[0]
        for n in (1, 3):
            first = group.train(spec, checkpoint=target(root, f"ws{n}"), stop_after=10)[0]
            assert [m["loss"] for m in first] == [m["loss"] for m in straight[:10]]
    losses = [m["loss"] for m in straight]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0, losses
    evals = {m["step"]: m["eval_loss"] for m in straight if "eval_loss" in m}
    assert sorted(evals) == [10, 20, 30] and evals[30] < evals[10]
    assert all(m["data_wait_s"] < m["step_time_s"] for m in straight)
    for n in (1, 3):
        with WorkerGroup(n, pool=fork_pool) as group:
            if n == 1:  # the validation loss of the same weights at world size 1
                alone = group.train(spec, stop_after=10)[0]
                assert alone[-1]["eval_loss"] == pytest.approx(evals[10], rel=1e-5, abs=1e-5)
            resumed = group.train(spec, checkpoint=target(root, f"ws{n}"))[0]
        assert [m["step"] for m in resumed] == list(range(11, 31))
        assert [m["loss"] for m in resumed] == pytest.approx(losses[10:], rel=1e-4)
        for m in resumed:
            if "eval_loss" in m:
                assert m["eval_loss"] == pytest.approx(evals[m["step"]], rel=1e-5), (n, m["step"])


def test_a_shard_gone_after_submit_fails_the_ranks_as_permanent_naming_it(prepared, tmp_path, fork_pool):
    import shutil

    from service.run.lifecycle import GroupOutcome
    from workers.cluster.errors import RankFailedError

    root, uri, index = prepared
    broken = tmp_path / "broken"
    shutil.copytree(uri.removeprefix("file://"), broken)
    gone = index.shards[-1].file
    (broken / gone).unlink()
    with WorkerGroup(1, pool=fork_pool) as group, pytest.raises(RankFailedError) as caught:
        group.train(job(f"file://{broken}"))
    assert f"{gone}: shard missing" in str(caught.value)
    assert GroupOutcome.failed(caught.value).permanent  # FAILED at once, no restart spent
