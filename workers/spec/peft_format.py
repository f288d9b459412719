"""PEFT's LoRA adapter directory, as Brigade reads and writes it (torch-free:
the service checks an `init.adapter_uri` at submit with it).

    adapter_config.json          PEFT's LoraConfig: peft_type LORA, r, lora_alpha,
                                 lora_dropout, target_modules, ...
    adapter_model.safetensors    `base_model.model.<parameter name>` for every
                                 lora_A and lora_B weight (the adapter's name,
                                 PEFT's "default", left out as PEFT saves it)

Brigade's parameter names are Hugging Face Llama's (workers/models/llama.py)
and its adapters' PEFT's (workers/models/lora.py), so a name maps one to one.
"""

from __future__ import annotations

from typing import Any

from workers.spec.adapter import AdapterSpec

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
        return AdapterSpec(rank=config.get("r"), alpha=config.get("lora_alpha"),
                           dropout=config.get("lora_dropout") or 0.0, targets=tuple(targets))
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
