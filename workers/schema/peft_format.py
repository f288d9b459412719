"""PEFT's LoRA adapter directory, as Brigade reads and writes it (torch-free:
the service checks an `init.adapter_uri` at submit with it).

    adapter_config.json          PEFT's LoraConfig: peft_type LORA, r, lora_alpha,
                                 lora_dropout, target_modules, ...
    adapter_model.safetensors    `base_model.model.<parameter name>` for every
                                 lora_A and lora_B weight (the adapter's name,
                                 PEFT's "default", left out as PEFT saves it)

Brigade's parameter names are Hugging Face Llama's (workers/models/llama.py)
and its adapters' PEFT's (workers/models/lora.py), so a name maps one to one.

`open_adapter(uri, adapter)` reads a directory a job continues from
(`init.adapter_uri`; fsspec and the safetensors reader imported when
called): its config must be the job's adapter (`adapter_config_mismatch`),
and the service checks its tensors' shapes from the header alone
(`adapter_weights_mismatch`) before the engine reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workers.schema import ModelSpec, SpecError
from workers.schema.adapter import AdapterSpec
from workers.schema.hf_format import tensor_shapes

if TYPE_CHECKING:
    from checkpoints.safetensors_io import SafetensorsReader

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # a PEFT file's key = this + the model's parameter name


def peft_key(name: str) -> str:
    """The key of the adapter parameter `name` in adapter_model.safetensors."""
    return PEFT_PREFIX + name


def peft_config(adapter: AdapterSpec, base: str | None = None) -> dict[str, Any]:
    """adapter_config.json for `adapter` (`base`: the base model's name or path, if known)."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": adapter.rank,
        "lora_alpha": adapter.alpha,
        "lora_dropout": adapter.dropout,
        "target_modules": sorted(adapter.targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "modules_to_save": None,
        "layers_to_transform": None,
    }


class NotAnAdapter(ValueError):
    """An adapter_config.json Brigade cannot continue from (the reason says why)."""


def adapter_of(config: Any) -> AdapterSpec:
    """The `AdapterSpec` an adapter_config.json describes; `NotAnAdapter` if it is
    not a plain LoRA adapter (DoRA, rsLoRA, biases, extra trained modules, a
    subset of layers, or target_modules as a regex are not)."""
    if not isinstance(config, dict):
        raise NotAnAdapter("adapter_config.json is not a JSON object")
    if config.get("peft_type") != "LORA":
        raise NotAnAdapter(f"peft_type is {config.get('peft_type')!r}, not 'LORA'")
    for key, plain in (("use_dora", False), ("use_rslora", False), ("bias", "none"),
                       ("fan_in_fan_out", False)):
        if config.get(key, plain) != plain:
            raise NotAnAdapter(f"{key} is {config.get(key)!r}: only plain LoRA ({key} "
                               f"{plain!r}) continues here")
    for key in ("modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise NotAnAdapter(f"{key} is set ({config.get(key)!r}): not supported")
    targets = config.get("target_modules")
    if not isinstance(targets, list) or not targets:
        raise NotAnAdapter("target_modules must be a list of module names "
                           f"(got {targets!r})")
    try:
        return AdapterSpec.model_validate({"rank": config.get("r"), "alpha": config.get("lora_alpha"),
                                           "dropout": config.get("lora_dropout") or 0.0,
                                           "targets": tuple(targets)})
    except ValueError as e:
        raise NotAnAdapter(f"not a LoRA adapter Brigade can train: {e}") from None


def adapter_mismatch(job: AdapterSpec, file: AdapterSpec) -> str | None:
    """Why a job's `adapter` cannot continue the adapter a file holds (rank,
    alpha, targets differ), or None; dropout may differ."""
    for what, mine, theirs in (("rank", job.rank, file.rank), ("alpha", job.alpha, file.alpha),
                               ("targets", sorted(job.targets), sorted(file.targets))):
        if mine != theirs:
            return f"adapter.{what} is {mine}, the adapter at init.adapter_uri has {theirs}"
    return None


def adapter_config_mismatch(data: bytes, job: AdapterSpec) -> str | None:
    """Why the adapter_config.json `data` cannot continue the job's `adapter`
    (not JSON, not plain LoRA, another rank, alpha or targets), or None."""
    try:
        config = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"{ADAPTER_CONFIG_FILE} is not JSON ({e})"
    try:
        found = adapter_of(config)
    except NotAnAdapter as e:
        return f"{ADAPTER_CONFIG_FILE}: {e}"
    return adapter_mismatch(job, found)


def targeted_weights(model: ModelSpec, adapter: AdapterSpec) -> dict[str, tuple[int, ...]]:
    """Each weight an adapter trains beside, by its Hugging Face name (a block's
    linear layer named in `adapter.targets`), and its (out, in) shape."""
    return {name: shape for name, shape in tensor_shapes(model).items()
            if name.startswith("model.layers.") and name.endswith(".weight")
            and name.split(".")[-2] in adapter.targets}


def adapter_tensor_shapes(model: ModelSpec, adapter: AdapterSpec) -> dict[str, tuple[int, ...]]:
    """Every adapter tensor of a job, by parameter name (workers/models/lora.py's;
    `peft_key` gives its key in a PEFT file): A (rank x in) and B (out x rank)
    of each targeted linear layer of every block."""
    shapes: dict[str, tuple[int, ...]] = {}
    for name, (fan_out, fan_in) in targeted_weights(model, adapter).items():
        module = name.removesuffix(".weight")
        shapes[f"{module}.lora_A.weight"] = (adapter.rank, fan_in)
        shapes[f"{module}.lora_B.weight"] = (fan_out, adapter.rank)
    return shapes


def adapter_weights_mismatch(model: ModelSpec, adapter: AdapterSpec,
                             found: Mapping[str, Sequence[int]]) -> str | None:
    """Why the tensors `found` in adapter_model.safetensors (key -> shape) are
    not the job's adapters, naming the first tensor that is not; or None."""
    expected = {peft_key(name): shape for name, shape in adapter_tensor_shapes(model, adapter).items()}
    for key, shape in expected.items():
        if key not in found:
            return f"tensor {key} is missing from {ADAPTER_WEIGHTS_FILE}"
        if tuple(found[key]) != shape:
            return (f"tensor {key} has shape {list(found[key])} in {ADAPTER_WEIGHTS_FILE}, "
                    f"the job's adapter has {list(shape)}")
    for key in sorted(found):
        if key not in expected:
            return f"tensor {key} of {ADAPTER_WEIGHTS_FILE} is not an adapter of the job's model"
    return None


def open_adapter(uri: str, adapter: AdapterSpec,
                 storage_options: Mapping[str, Any] | None = None) -> SafetensorsReader:
    """The PEFT adapter directory at `uri` (`init.adapter_uri`), its
    adapter_config.json checked against the job's `adapter`: a reader of its
    adapter_model.safetensors (headers read, no tensor yet). A `SpecError`
    at init.adapter_uri says what does not fit. The service calls it at
    submit, the engine as it fills the adapters."""
    from fsspec.core import url_to_fs

    from checkpoints.safetensors_io import SafetensorsError, SafetensorsReader

    options = dict(storage_options or {})
    try:
        fs, path = url_to_fs(uri, **options)
        config = fs.cat_file(f"{path.rstrip('/')}/{ADAPTER_CONFIG_FILE}")
    except FileNotFoundError:
        raise _refused(f"{uri} has no {ADAPTER_CONFIG_FILE}: not a PEFT adapter directory"
                       ) from None
    except OSError as e:
        raise _refused(f"{uri}: {ADAPTER_CONFIG_FILE} cannot be read ({e})") from None
    if (why := adapter_config_mismatch(config, adapter)) is not None:
        raise _refused(why)
    try:
        return SafetensorsReader(uri, options, file=ADAPTER_WEIGHTS_FILE)
    except FileNotFoundError:
        raise _refused(f"{uri} has no {ADAPTER_WEIGHTS_FILE}") from None
    except (SafetensorsError, OSError) as e:
        raise _refused(str(e)) from None


def _refused(why: str) -> SpecError:
    return SpecError("init.adapter_uri", f"init.adapter_uri: {why}")
