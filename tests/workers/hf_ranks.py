"""A tiny Hugging Face Llama made in the test, and what the ranks of the
import and export tests run (module-level, so spawned ranks import them)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from checkpoints import CheckpointTarget
from workers.schema import JobSpec

SECRET = "hf-test-secret"
# d_model 64, 4 heads, 2 kv heads; vocab 256 (byte data); rms eps as Hugging Face's default
MODEL = {"family": "llama", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2,
         "ffn_dim": 96, "vocab_size": 256, "seq_len": 32, "norm_eps": 1e-6}


def hf_llama(directory: Path, *, tied: bool = False, max_shard_size: str | None = None,
             seed: int = 1):
    """A random LlamaForCausalLM of MODEL's shape, saved to `directory`; the model."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rms_norm_eps=1e-6, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(directory), **kwargs)
    return model


def hf_tokenizer(directory: Path) -> None:
    """A word-level tokenizer over MODEL's vocabulary (`<unk>`, `<s>`, `</s>`, then `w0`..),
    saved into `directory` as transformers saves one (tokenizer.json, tokenizer_config.json)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(253)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                         unk_token="<unk>").save_pretrained(str(directory))


def job_spec(**sections) -> JobSpec:
    raw = {"model": dict(MODEL), "train": {"steps": 3, "global_batch_size": 4, "lr": 1e-3},
           "checkpoint": {"every_steps": 0}}
    raw.update(sections)
    return JobSpec.model_validate(raw)


def tokens() -> torch.Tensor:
    return torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(7))


def import_and_forward(rank: int, world_size: int, uri: str, out: str, tp: int = 1) -> None:
    """Rank `rank` builds the sharded model (FSDP, or tensor parallel over
    `tp` ranks), fills its shards from `uri`, and writes its logits and how
    much it read."""
    from workers.engine.init_weights import HuggingFaceWeights
    from workers.engine.trainer import Trainer

    trainer = Trainer(job_spec(parallelism={"tp": tp}, workers=world_size))
    source = HuggingFaceWeights(uri)
    source.fill(trainer.model)
    with torch.no_grad():
        logits = trainer.model(tokens())
    torch.save(logits, f"{out}/logits-{rank}.pt")
    Path(f"{out}/read-{rank}.json").write_text(json.dumps(
        {"reads": source.reader.reads, "bytes": source.reader.bytes_read}))


def train_and_save(rank: int, world_size: int, root: str, out: str) -> None:
    """A source job trained 3 steps at this world size, checkpointed; rank 0
    writes the full parameters."""
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=root, tenant="acme", job="source", secret=SECRET)
    trainer = Trainer(job_spec(checkpoint={"every_steps": 3}), target)
    trainer.run()
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v
            for k, v in trainer.model.state_dict().items()}
    if rank == 0:
        torch.save(full, f"{out}/source.pt")
