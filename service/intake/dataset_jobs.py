"""A dataset's preparation as a job (`POST /v1/datasets`): the request's
input patterns are expanded here (every file under the tenant's data
prefix, sorted), and the job is a `JobSpec` of kind 'prepare' whose steps
are the files, so that it is admitted under the tenant's quota and priority,
listed, followed and cancelled like any other (workers/datasets/prepare_job.py
runs it). Torch-free."""

from __future__ import annotations

from service.intake.data_access import check_data_uri, under_prefix
from workers.datasets.errors import DataError
from workers.datasets.storage import data_storage_options
from workers.schema import JobSpec, PrepareSpec, SpecError


def prepare_job_spec(*, tenant: str, root: str, inputs: list[str], output: str,
                     tokenizer: str | None, train_vocab_size: int | None, field: str,
                     workers: int, priority: int, name: str,
                     tokens_per_shard: int | None = None) -> JobSpec:
    """The job that prepares `inputs` (patterns) into `output`; SpecError at
    the request's field for what cannot be."""
    from workers.datasets.prepare import expand_inputs

    # relative ones are read under the tenant's prefix (service.intake.relative_uris)
    inputs = [under_prefix(pattern, tenant, root) for pattern in inputs]
    output = under_prefix(output, tenant, root)
    if tokenizer is not None:
        tokenizer = under_prefix(tokenizer, tenant, root)
    for i, pattern in enumerate(inputs):
        _under_prefix(f"inputs.{i}", pattern, tenant, root)
    try:
        files = expand_inputs(inputs, data_storage_options())
    except DataError as e:
        raise SpecError("inputs", f"inputs: {e}") from None
    prepare: dict = {"inputs": files, "output": output, "tokenizer": tokenizer,
                     "train_vocab_size": train_vocab_size, "field": field}
    if tokens_per_shard is not None:
        prepare["tokens_per_shard"] = tokens_per_shard
    return JobSpec.model_validate({
        "name": name, "kind": "prepare", "workers": workers, "priority": priority,
        "model": {}, "train": {"steps": len(files), "global_batch_size": max(8, workers)},
        "checkpoint": {"every_steps": 0}, "prepare": PrepareSpec.model_validate(prepare)})


def check_prepare(spec: PrepareSpec, tenant: str, root: str) -> None:
    """Every uri a prepare job names is the tenant's; its output holds no
    dataset yet; its tokenizer parses (a SpecError at the field otherwise)."""
    from workers.datasets.checks import check_tokenizer
    from workers.datasets.index import INDEX_FILE, join

    for field, uri in spec.uris().items():
        _under_prefix(field, uri, tenant, root)
    import fsspec

    index = join(spec.output, INDEX_FILE)
    fs, path = fsspec.core.url_to_fs(index, **data_storage_options())
    if fs.exists(path):
        raise SpecError("prepare.output", f"prepare.output: {index}: a dataset is already prepared here")
    if spec.tokenizer is not None:
        try:
            check_tokenizer(spec.tokenizer, 1 << 30, data_storage_options())
        except DataError as e:
            raise SpecError("prepare.tokenizer", f"prepare.tokenizer: {e}") from None


def _under_prefix(field: str, uri: str, tenant: str, root: str) -> None:
    check_data_uri(uri, tenant, root, field=field)
