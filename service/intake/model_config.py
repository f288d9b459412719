"""`model: {config_uri: ...}` resolved at submit: the Hugging Face config.json
under the tenant's data prefix (any fsspec scheme; `service.intake.data_access`)
is read once and turned into the model's fields (`workers.schema.hf_config`), and
the job is stored with those fields, not the URI: the engine never reads it,
and a later change of the file changes no job.

`init: {uri: DIR}` with no model of its own sets `model.config_uri` to
DIR/config.json (`JobSpec`): the same path, with its refusals at `init.uri`,
the field the spec wrote.

Refused with a 422 at `model.config_uri`: a URI outside the prefix, a file
that is not there, not JSON or too large, and a model that Brigade's Llama
cannot represent (the key is named); the resolved model is then checked
like any other (e.g. `sharding.blocks_per_unit` against its layers).
"""

from __future__ import annotations

from service.intake.data_access import check_data_uri
from workers.datasets.storage import data_storage_options
from workers.schema import JobSpec, SpecError
from workers.schema.hf_config import FIELD, resolve_config_uri
from workers.schema.model import config_in


def resolve_model(spec: JobSpec, tenant: str, data_root: str) -> JobSpec:
    """`spec` with its model read from `model.config_uri` (unchanged without one)."""
    uri = spec.model.config_uri
    if uri is None:
        return spec
    try:
        return resolve_config_uri(spec, check_data_uri(uri, tenant, data_root, field=FIELD),
                                  data_storage_options())
    except SpecError as e:
        if e.field != FIELD or not read_from_init(spec):
            raise
        why = str(e).removeprefix(f"{FIELD}: ").removeprefix(f"{FIELD} ")
        raise SpecError("init.uri", f"init.uri (the model is read from its config.json): {why}"
                        ) from None


def read_from_init(spec: JobSpec) -> bool:
    """Whether the model's config_uri is the config.json of `init.uri` (the spec gave no model)."""
    init = spec.init
    return (init is not None and init.uri is not None
            and spec.model.config_uri == config_in(init.uri))
