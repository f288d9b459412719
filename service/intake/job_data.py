"""A job's data at submit: every uri it names (`data.uri`, `data.tokenizer`,
`eval.uri`) lies under the tenant's data prefix (service.intake.data_access), and
token data is what its index says (workers.datasets.checks: read here, so a
missing shard, a size or checksum that does not match, a tokenizer that does
not parse or a vocabulary the model does not cover is a 422 naming the file,
not a job that fails later)."""

from __future__ import annotations

from service.intake.data_access import DataUriRefused, check_data_uri
from workers.spec import JobSpec, SpecError


def check_job_data(spec: JobSpec, tenant: str, root: str) -> None:
    if spec.prepare is not None:  # a dataset's preparation (service.intake.dataset_jobs)
        from service.intake.dataset_jobs import check_prepare

        check_prepare(spec.prepare, tenant, root)
    uris = dict(spec.data.uris())
    if spec.eval is not None and spec.eval.uri is not None:
        uris["eval.uri"] = spec.eval.uri
    for field, uri in uris.items():
        try:
            check_data_uri(uri, tenant, root)
        except DataUriRefused as e:
            raise SpecError(field, str(e).replace("data.uri", field, 1)) from None
    if spec.data.source in ("tokens", "text"):
        from workers.datasets.checks import check_job_data as check_datasets

        check_datasets(spec)
