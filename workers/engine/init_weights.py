"""A job's initial weights from elsewhere (`init` in the spec), filled into
the model after it is built and sharded: every rank reads only its own shard.

    HuggingFaceWeights   a Hugging Face model directory (safetensors, one file
                         or sharded), read through fsspec by box: each rank
                         reads the rows (or columns) of every tensor its local
                         DTensor shard covers, and nothing else
    load_job_weights     a committed checkpoint of another of the tenant's
                         jobs (DCP, resharded to this job's layout): the model,
                         and the optimizer state or data cursor if asked

`weight_source(job)` picks the job's source for the sharded build
(workers/engine/build.py takes it from its caller): `HuggingFaceWeights` for
`init.uri`, else seeded random. `HuggingFaceWeights.fill(model)` writes each parameter's
local shard (`param.to_local()`), at the offsets its DTensor placements
give (`workers.engine.shard_reads.read_local`, which a PEFT adapter's
reads share), straight from the file where the dtypes agree, else
converting the file's (bf16, fp16, fp32) to the parameter's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from checkpoints.checkpointer import Checkpointer
from checkpoints.safetensors_io import SafetensorsError, SafetensorsReader
from checkpoints.stateful import ModelAndOptimizer, ModelOnly
from workers.datasets.storage import data_storage_options
from workers.engine.build import (
    SeededInit,
    WeightSource,
    adapter_tensors,
    copy_full,
    named_tensors,
    seed_of,
)
from workers.engine.shard_reads import read_local
from workers.engine.train_state import TrainState
from workers.models.lora import lora_init
from workers.schema import AdapterSpec, InitSpec, JobSpec, SpecError

if TYPE_CHECKING:
    from checkpoints import CheckpointTarget


@dataclass
class HuggingFaceWeights:
    """Weights from a Hugging Face model directory at `uri` (any fsspec URI)."""

    uri: str
    storage_options: Mapping[str, Any] = field(default_factory=data_storage_options)  # as the service read it

    def __post_init__(self) -> None:
        try:
            self.reader = SafetensorsReader(self.uri, self.storage_options)
        except FileNotFoundError as e:  # the spec's to fix: a SpecError, not restarted
            raise SpecError("init.uri", f"init.uri: {self.uri} has no such file "
                                        f"({e.args[0] if e.args else e})") from None
        except SafetensorsError as e:  # not a model directory; another OSError may pass: restarted
            raise SpecError("init.uri", f"init.uri: {e}") from None

    def fill(self, model: nn.Module) -> None:
        """Write every parameter's local shard from the files."""
        tensors = self.reader.tensors
        with torch.no_grad():
            for key, param in named_tensors(model):
                if key not in tensors:
                    raise SpecError("init.uri", f"init.uri: tensor {key} is missing from "
                                                f"{self.uri}")
                info = tensors[key]
                if tuple(info.shape) != tuple(param.shape):
                    raise SpecError("init.uri", f"init.uri: tensor {key} has shape "
                                    f"{list(info.shape)}, the model has {list(param.shape)}")
                read_local(self.reader, key, param)


def weight_source(job: JobSpec) -> WeightSource:
    """The job's initial weights for the build: a Hugging Face directory's
    (`init.uri`, each rank reading its slices), else seeded random (`init.job`
    loads its checkpoint over them after the build: `initialise`); with an
    adapter, the adapters' after the base's (workers/engine/adapters.py)."""
    base: WeightSource = SeededInit(job.train.seed)
    if job.init is not None and job.init.uri is not None:
        base = HuggingFaceWeights(job.init.uri)
    if job.adapter is None:
        return base
    return AdapterWeights(base, job.train.seed,
                          None if job.init is None else job.init.adapter_uri, job.adapter)


def load_job_weights(init: InitSpec, source: CheckpointTarget, *, model: nn.Module,
                     optimizer: torch.optim.Optimizer, train_state: TrainState) -> int:
    """Load the source job's committed step `init.step` (collective: every
    rank calls it): the model, resharded to this job's layout; also the
    optimizer state (`resume_optimizer`) and the data cursor into
    `train_state` (`resume_data`). Returns the step loaded.

    An unset step is the source's latest committed one: the job waited for
    its source to succeed (service/run/dependencies.py), so that step no
    longer changes, and every attempt of the job reads the same weights."""
    store = source.open_store()
    step = init.step
    if step is None:
        latest = store.latest_committed()
        if latest is None:
            raise SpecError("init.job", f"init.job {source.job} has no committed checkpoint")
        step = latest.step
    checkpointer = Checkpointer(store, keep_last=None)
    try:
        state = (ModelAndOptimizer(model, optimizer) if init.resume_optimizer
                 else ModelOnly(model))
        result = checkpointer.load({"app": state}, step=step)
    finally:
        checkpointer.close()
    assert result is not None  # a named step that does not verify raises
    if init.resume_data:
        train_state.batches.load_state_dict(result.extra["data"])
    return result.step


def initialise(init: InitSpec, target: CheckpointTarget | None, *, model: nn.Module,
               optimizer: torch.optim.Optimizer, train_state: TrainState) -> str:
    """After the build, on a fresh start: what `init` asks beyond the build's
    weight source (a job's checkpoint); says where the weights came from."""
    if init.uri is not None:  # filled as the model was built (`weight_source`)
        return f"weights from {init.uri}"
    assert init.job is not None
    if target is None:
        raise SpecError("init.job", "init.job reads the job's checkpoints: it needs the "
                                    "service's checkpoint storage (a checkpoint target)")
    step = load_job_weights(init, target.of_job(init.job), model=model, optimizer=optimizer,
                            train_state=train_state)
    return f"weights from job {init.job} step {step}"


@dataclass
class AdapterWeights:
    """The base's weights from `base`, then each adapter's: from `adapter_uri`
    (a PEFT adapter directory, checked against the job's `adapter`) where
    given, else seeded by (`seed`, its name)."""

    base: WeightSource
    seed: int
    adapter_uri: str | None = None
    adapter: AdapterSpec | None = None

    def fill(self, model: nn.Module) -> None:
        self.base.fill(model)
        if self.adapter_uri is not None:
            from workers.engine.peft_format import PeftAdapterWeights

            assert self.adapter is not None  # the spec allows an adapter_uri only with one
            PeftAdapterWeights(self.adapter_uri, self.adapter).fill(model)
            return
        for name, tensor in adapter_tensors(model):
            full = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
            lora_init(name, full, torch.Generator().manual_seed(seed_of(self.seed, name)))
            copy_full(tensor, full)
