"""A job's `init` checked at submit, from headers and records alone (no
torch in the control plane), and fixed so that the job reads the same
weights at every attempt:

- `init.uri`: under the tenant's data prefix (422 at `init.uri` otherwise,
  `service.intake.data_access`); a Hugging Face model directory whose safetensors
  headers hold every parameter of the job's model with its shape, and
  whose config.json agrees on what shapes cannot tell (rotary base, norm
  epsilon, tied head): a mismatch is a 422 naming the tensor or the field.
- `init.adapter_uri` (with `init.uri`): under the same prefix, a PEFT LoRA
  adapter directory whose adapter_config.json is the job's `adapter` (rank,
  alpha, targets) and whose adapter_model.safetensors holds every adapter
  tensor of the model at its shape: a 422 at `init.adapter_uri` otherwise.
- `init.job`: one of the tenant's own jobs (another tenant's is a 404, as
  everywhere), of the same model shapes. One that has ended needs a
  committed checkpoint at `init.step`; an unset step becomes its latest
  committed one now. One still to end is waited for, as a job in `after`
  is (service/run/dependencies.py): an unset step stays unset (the engine
  loads the source's latest committed step, fixed once it has succeeded:
  every attempt reads the same weights), and a step it has not committed yet
  puts the source in `after`; once it succeeded, the scheduling pass fails the
  job if the step is not there (service/run/dependency_gate.py). With
  `init.resume_optimizer`, its optimizer's state must be this job's kind
  (the same optimizer, and momentum or none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from checkpoints import CheckpointStore
from checkpoints.safetensors_io import SafetensorsError, SafetensorsReader
from service.intake.data_access import check_data_uri
from service.store.errors import JobNotFound
from workers.datasets.storage import data_storage_options
from workers.schema import JobSpec, SpecError
from workers.schema.hf_format import config_mismatch, model_mismatch, weights_mismatch
from workers.schema.peft_format import adapter_weights_mismatch, open_adapter

if TYPE_CHECKING:
    from service.store import JobRecord, JobStore


def resolve_init(spec: JobSpec, tenant: str, *, data_root: str, store: JobStore,
                 checkpoints_of: Callable[[JobRecord], CheckpointStore]) -> JobSpec:
    """The spec with its `init` checked and fixed (its uri normalised, its step set)."""
    init = spec.init
    if init is None:
        return spec
    if init.uri is not None:
        uri = check_data_uri(init.uri, tenant, data_root, field="init.uri")
        check_weights(spec, uri)
        fixed = {"uri": uri}
        if init.adapter_uri is not None:
            fixed["adapter_uri"] = check_data_uri(init.adapter_uri, tenant, data_root,
                                                  field="init.adapter_uri")
            check_adapter(spec, fixed["adapter_uri"])
        return spec.model_copy(update={"init": init.model_copy(update=fixed)})
    assert init.job is not None
    source = store.get_job(init.job, tenant=tenant)
    if source is None:
        raise JobNotFound(init.job)
    why = model_mismatch(spec.model, source.spec.model)
    if why is not None:
        raise SpecError("init.job", f"init.job {init.job}: {why}")
    if init.resume_optimizer and optimizer_state(spec) != optimizer_state(source.spec):
        raise SpecError("init.resume_optimizer", (
            f"init.resume_optimizer: job {init.job} kept the state of "
            f"{describe_optimizer(source.spec)}, this job trains with "
            f"{describe_optimizer(spec)}: the state does not carry over (leave it fresh)"))
    if not source.state.is_terminal and (init.step is None or init.job in spec.after):
        return spec  # it waits for the source to succeed (service/run/dependencies.py)
    committed = {c.step for c in checkpoints_of(source).list_committed()}
    if not source.state.is_terminal and init.step not in committed:  # a step still to come
        return spec.model_copy(update={"after": [*spec.after, init.job]})
    if not committed:
        raise SpecError("init.job", f"init.job {init.job} has no committed checkpoint")
    if init.step is None:
        return spec.model_copy(update={"init": init.model_copy(update={"step": max(committed)})})
    if init.step not in committed:
        raise SpecError("init.step", f"init.step: job {init.job} has no committed checkpoint "
                                     f"at step {init.step} (it has {sorted(committed)[-5:]})")
    return spec


def optimizer_state(spec: JobSpec) -> tuple[str, bool]:
    """What an optimizer's checkpointed state is made of: the optimizer, and
    whether it keeps a momentum buffer (SGD keeps none without momentum)."""
    return spec.train.optimizer, bool(spec.train.momentum)


def describe_optimizer(spec: JobSpec) -> str:
    train = spec.train
    return repr(train.optimizer) + (f" (momentum {train.momentum})" if train.momentum else "")


def check_weights(spec: JobSpec, uri: str) -> None:
    """The model directory at `uri` fits the job's model (SpecError naming what does not)."""
    try:
        reader = SafetensorsReader(uri, data_storage_options())  # as the ranks read it
        config = reader.config()
    except FileNotFoundError as e:
        raise SpecError("init.uri", f"init.uri: {uri} has no such file ({e.args[0] if e.args else e})"
                        ) from None
    except (SafetensorsError, OSError) as e:
        raise SpecError("init.uri", f"init.uri: {e}") from None
    found = {name: info.shape for name, info in reader.tensors.items()}
    problem = weights_mismatch(spec.model, found)
    if problem is not None:
        raise SpecError("init.uri", f"init.uri: {problem[1]}")
    field_problem = config_mismatch(spec.model, config)
    if field_problem is not None:
        raise SpecError(field_problem[0], f"init.uri: {field_problem[1]}")


def check_adapter(spec: JobSpec, uri: str) -> None:
    """The PEFT adapter directory at `uri` is the job's adapter (its config's
    rank, alpha and targets) with every tensor of it at its shape (SpecError
    at init.adapter_uri naming what does not fit)."""
    assert spec.adapter is not None  # the spec allows an adapter_uri only with an adapter
    reader = open_adapter(uri, spec.adapter, data_storage_options())
    found = {name: info.shape for name, info in reader.tensors.items()}
    problem = adapter_weights_mismatch(spec.model, spec.adapter, found)
    if problem is not None:
        raise SpecError("init.adapter_uri", f"init.adapter_uri: {problem}")
