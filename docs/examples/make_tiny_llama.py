"""Write a tiny Hugging Face Llama to fine-tune, with nothing downloaded: a
seeded random `LlamaForCausalLM` (config.json, model.safetensors,
generation_config.json) and a byte-level tokenizer whose ids are the bytes
themselves (tokenizer.json, tokenizer_config.json), so the model reads what
Brigade's byte data feeds it and transformers' pipeline generates text from
the fine-tuned export as it stands. Deterministic: the same seed, the same
weights.

    .venv/bin/python docs/examples/make_tiny_llama.py tiny-llama [--layers 2] [--d-model 64]
        [--heads 4] [--kv-heads 2] [--ffn 128] [--context 256] [--seed 0]

What docs/examples/finetune-hf.yaml fine-tunes, once uploaded (`brigade data
upload tiny-llama models/`: the comment at its top).
"""

from __future__ import annotations

import argparse
from pathlib import Path

VOCAB = 256  # a byte each


def byte_symbols() -> list[str]:
    """The printable character that stands for each byte in a byte-level BPE
    vocabulary (byte b is symbol b): printable Latin-1 bytes stand for
    themselves, the others for the characters from U+0100 on, in byte order."""
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)}
    symbols, extra = [], 0
    for b in range(VOCAB):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(VOCAB + extra))
            extra += 1
    return symbols


def save_byte_tokenizer(directory: Path) -> None:
    """A byte-level tokenizer (no merges: token id = byte), saved as transformers saves one."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {symbol: b for b, symbol in enumerate(byte_symbols())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(str(directory))


def save_tiny_llama(directory: Path, *, layers: int = 2, d_model: int = 64, heads: int = 4,
                    kv_heads: int = 2, ffn: int = 128, context: int = 256, seed: int = 0) -> None:
    """A random Llama of that shape over the byte vocabulary, and its tokenizer, in `directory`."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=d_model, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=context, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)  # bytes have no special ids
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).save_pretrained(str(directory))
    save_byte_tokenizer(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="the directory to write (made if missing)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--ffn", type=int, default=128, help="the MLP's width")
    parser.add_argument("--context", type=int, default=256, help="max_position_embeddings")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    save_tiny_llama(args.output, layers=args.layers, d_model=args.d_model, heads=args.heads,
                    kv_heads=args.kv_heads, ffn=args.ffn, context=args.context, seed=args.seed)
    files = sorted(p.name for p in args.output.iterdir())
    print(f"{args.output}: {', '.join(files)}")


if __name__ == "__main__":
    main()
