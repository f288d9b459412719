"""A PEFT LoRA adapter directory made in the test with `peft` itself (a dev
dependency; the engine never imports it): the adapter Brigade continues from
in `init: {uri, adapter_uri}`."""

from __future__ import annotations

from pathlib import Path

import torch

TARGETS = ["q_proj", "v_proj", "down_proj"]


def peft_adapter(base, directory: Path, *, rank: int = 4, alpha: float = 8,
                 targets: list[str] = TARGETS, seed: int = 2):
    """`base` (a transformers model, changed in place) with random LoRA
    adapters, B non-zero (`init_lora_weights=False`), saved to `directory`;
    the PeftModel."""
    import peft

    torch.manual_seed(seed)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets),
                             init_lora_weights=False)
    model = peft.get_peft_model(base, config).eval()
    model.save_pretrained(str(directory))
    return model


def continue_and_forward(rank: int, world_size: int, base_uri: str, adapter_uri: str,
                         out: str, tp: int = 1) -> None:
    """Rank `rank` builds the sharded adapter job continued from `adapter_uri`
    (FSDP, or tensor parallel over `tp` ranks) and writes its logits, and how
    many bytes of the adapter file a fill of its shards reads."""
    import json

    from tests.workers.hf_ranks import job_spec, tokens
    from workers.engine.peft_format import PeftAdapterWeights
    from workers.engine.trainer import Trainer

    job = job_spec(init={"uri": base_uri, "adapter_uri": adapter_uri},
                   adapter={"rank": 4, "alpha": 8, "targets": TARGETS},
                   parallelism={"tp": tp}, workers=world_size)
    trainer = Trainer(job)
    with torch.no_grad():
        logits = trainer.model(tokens())
    torch.save(logits, f"{out}/logits-{rank}.pt")
    assert job.adapter is not None
    again = PeftAdapterWeights(adapter_uri, job.adapter)
    again.fill(trainer.model)  # the values the build wrote, read once more to count
    Path(f"{out}/read-{rank}.json").write_text(json.dumps({"bytes": again.reader.bytes_read}))
