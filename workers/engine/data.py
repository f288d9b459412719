"""Resumable data whose order is a function of (seed, global sample index) only.

Sample `i` of a job is the same tokens whatever the world size; a step takes
the next `global_batch` indices and rank `r` of `n` takes a contiguous range
of them, the batch split as evenly as it goes (8 over 3: indices 0-2, 3-5,
6-7; `workers.schema.split_evenly`). The cursor (the next global sample index) is all a
checkpoint needs to continue the exact order; a mixture's (`data.mix`,
`workers.datasets.mixture`) carries its members' cursors beside it.
"""

from __future__ import annotations

import functools
import os
import sysconfig
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist

from workers.datasets.byte_file import min_bytes, read_byte_file
from workers.datasets.errors import DataError
from workers.datasets.mixture import MixtureSource
from workers.datasets.order import mix64
from workers.schema import DataSpec, EvalSpec, ModelSpec, split_evenly

BUILTIN_CORPUS_BYTES = 1 << 20  # 1 MiB of the Python standard library's source


class SampleSource(Protocol):
    """What `RankBatches` draws from: sample `index`, seq_len+1 token ids."""

    def sample(self, index: int) -> np.ndarray: ...


class SyntheticSource:
    """Arithmetic progressions mod vocab with a per-sample start and stride:
    learnable, so a falling loss says the engine trains."""

    def __init__(self, seed: int, seq_len: int, vocab_size: int):
        self.seed, self.seq_len, self.vocab = seed, seq_len, vocab_size

    def sample(self, index: int) -> np.ndarray:
        h = mix64(self.seed, index)
        start, stride = h % self.vocab, 1 + (h >> 32) % 7
        return (start + stride * np.arange(self.seq_len + 1, dtype=np.int64)) % self.vocab


class ByteCorpusSource:
    """Windows of seq_len+1 bytes at offsets drawn from (seed, index)."""

    def __init__(self, data: np.ndarray, seed: int, seq_len: int, name: str):
        if len(data) < min_bytes(seq_len):  # the data's fault: a DataError, not restarted
            raise DataError(name, f"{len(data)} bytes is too short for seq_len {seq_len} "
                                  f"(needs at least {min_bytes(seq_len)})")
        self.data, self.seed, self.seq_len = data, seed, seq_len
        self.windows = len(data) - seq_len - 1

    def sample(self, index: int) -> np.ndarray:
        off = mix64(self.seed, index) % self.windows
        return self.data[off : off + self.seq_len + 1].astype(np.int64)


@functools.lru_cache(maxsize=1)
def builtin_corpus() -> np.ndarray:
    """The standard library's own source text, byte-level: on every machine,
    no download. Files in sorted order, capped at BUILTIN_CORPUS_BYTES."""
    stdlib = sysconfig.get_paths()["stdlib"]
    chunks, total = [], 0
    for name in sorted(os.listdir(stdlib)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(stdlib, name), "rb") as f:
            blob = f.read()
        chunks.append(blob)
        total += len(blob)
        if total >= BUILTIN_CORPUS_BYTES:
            break
    return np.frombuffer(b"".join(chunks)[:BUILTIN_CORPUS_BYTES], dtype=np.uint8)


def read_bytes(uri: str, seq_len: int) -> np.ndarray:
    """A byte-level data file, whole, through the data's storage options
    (`workers.datasets.byte_file`: a DataError naming it where it is not one)."""
    return np.frombuffer(read_byte_file(uri, seq_len), dtype=np.uint8)


def build_source(data: DataSpec, model: ModelSpec, seed: int,
                 eval: EvalSpec | None = None, *, global_batch: int | None = None) -> SampleSource:
    """The training samples (a token dataset's less what `eval.holdout_fraction`
    holds out); a mixture's schedule needs the job's `global_batch`."""
    if data.source in ("tokens", "text"):
        from workers.datasets.sources import mixture_source, token_source

        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        holdout = eval.holdout_fraction if eval is not None else None
        if data.mix is not None:
            if global_batch is None:
                raise ValueError("a mixture's source needs the job's global batch size")
            return mixture_source(data, model, seed, global_batch, holdout=holdout, rank=rank,
                                  world_size=world)
        return token_source(data, model, seed, holdout=holdout, rank=rank, world_size=world)
    if data.source == "synthetic":
        return SyntheticSource(seed, model.seq_len, model.vocab_size)
    if data.source == "builtin":
        return ByteCorpusSource(builtin_corpus(), seed, model.seq_len, "builtin corpus")
    assert data.uri is not None  # the spec requires it with source 'uri'
    return ByteCorpusSource(read_bytes(data.uri, model.seq_len), seed, model.seq_len, data.uri)


@dataclass
class RankBatches:
    """This rank's share of each global batch, and the resumable cursor."""

    source: SampleSource
    global_batch: int
    rank: int
    world_size: int
    next_sample: int = 0  # the cursor: the first global index of the next step

    def share(self) -> range:
        """This rank's offsets within a step's global batch."""
        counts = split_evenly(self.global_batch, self.world_size)
        first = sum(counts[: self.rank])
        return range(first, first + counts[self.rank])

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows = np.stack([self.source.sample(self.next_sample + i) for i in self.share()])
        self.next_sample += self.global_batch
        t = torch.from_numpy(rows)
        return t[:, :-1], t[:, 1:]

    def samples_seen(self) -> dict[str, int]:
        """A mixture's samples drawn from each member so far, by name ({} for one source)."""
        if isinstance(self.source, MixtureSource):
            return self.source.samples_seen(self.next_sample)
        return {}

    def state_dict(self) -> dict:
        state: dict = {"next_sample": self.next_sample}
        if isinstance(self.source, MixtureSource):  # its members' cursors too
            state["mix_cursors"] = self.source.cursors(self.next_sample)
        return state

    def load_state_dict(self, state: dict) -> None:
        self.next_sample = int(state["next_sample"])
        if isinstance(self.source, MixtureSource) and "mix_cursors" in state:
            self.source.resume_at(self.next_sample, state["mix_cursors"])
