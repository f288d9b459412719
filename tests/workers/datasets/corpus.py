"""Made-up text for the data tests (nothing is downloaded): documents of
sentences from a small grammar, a BPE tokenizer of ~512 ids trained on them
with `tokenizers`, and jsonl / parquet / text input files."""

from __future__ import annotations

import json
import random

import fsspec

SUBJECTS = ["the cook", "a rank", "the shard", "every tenant", "the scheduler", "a worker"]
VERBS = ["reads", "writes", "gathers", "scatters", "checkpoints", "trains"]
OBJECTS = ["the recipe", "its gradients", "a token", "the index", "one window", "the model"]
ENDINGS = [" quickly.", " again.", " at step {n}.", " on node {n}.", "."]


def documents(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        sentences = []
        for _ in range(rng.randint(2, 6)):
            ending = rng.choice(ENDINGS).format(n=rng.randint(0, 99))
            sentences.append(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{ending}")
        out.append(" ".join(sentences).capitalize())
    return out


def train_tokenizer(vocab_size: int = 512, seed: int = 0):
    """A byte-level BPE tokenizer with <|endoftext|>, trained on generated text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(documents(seed, 400), trainer=trainer)
    return tok


def write_tokenizer(uri: str, vocab_size: int = 512, storage_options: dict | None = None) -> str:
    with fsspec.open(uri, "w", **(storage_options or {})) as f:
        f.write(train_tokenizer(vocab_size).to_str())
    return uri


def write_jsonl(uri: str, docs: list[str], field: str = "text", storage_options: dict | None = None) -> str:
    with fsspec.open(uri, "w", **(storage_options or {})) as f:
        for i, doc in enumerate(docs):
            f.write(json.dumps({"id": i, field: doc}) + "\n")
    return uri


def write_parquet(uri: str, docs: list[str], field: str = "text",
                  storage_options: dict | None = None) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": list(range(len(docs))), field: docs})
    with fsspec.open(uri, "wb", **(storage_options or {})) as f:
        pq.write_table(table, f)
    return uri


def write_inputs(root: str, files: int = 4, docs_per_file: int = 60,
                 storage_options: dict | None = None) -> list[str]:
    """`files` input files under `root`, alternately jsonl and parquet."""
    out = []
    for k in range(files):
        docs = documents(100 + k, docs_per_file)
        if k % 2:
            out.append(write_parquet(f"{root}/part-{k}.parquet", docs, storage_options=storage_options))
        else:
            out.append(write_jsonl(f"{root}/part-{k}.jsonl", docs, storage_options=storage_options))
    return out
