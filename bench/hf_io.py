"""Hugging Face weights in and out: import and export bytes/s against raw I/O of the same bytes.

    .venv/bin/python -m bench.hf_io [--reps 3] [--layers 8]

A Llama of ~106M parameters (d_model 768, 8 layers, 12 heads, MLP 2048,
vocabulary 32,000, fp32: ~425 MB) is written as Hugging Face safetensors
shards (200 MB each, with an index) by `checkpoints.safetensors_io`, and its
DCP checkpoint (the model's state, as a job saves it) by the checkpointer.
One process (a gloo world of one), each repetition interleaved so that the machine's noise hits both alike:

1. import: `HuggingFaceWeights(dir).fill(model)` into the FSDP-sharded model
   (the header reads, one ranged read per tensor straight into its local
   shard) against a raw read of the same files into buffers allocated
   beforehand; warm (page cache) and cold (the files' pages evicted);
2. export: `workers.engine.export.export_checkpoint` (verify the checkpoint's files
   against its manifest, one DCP load per tensor, the safetensors stream,
   config.json, the signed manifest) against a raw write of the export's
   byte count (4 MiB writes); both made durable (fdatasync) before the clock
   stops, and which goes first alternates, so the page cache's writeback of
   one does not land on the other.

Writes its section of docs/benchmarks.md. Files go under bench/out/ and are deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.report import OUT, Figure, Goal, cli

COMMAND = ".venv/bin/python -m bench.hf_io"
MB = 1e6
SHARD_BYTES = 200 * 10**6


def model_spec(layers: int) -> dict:
    return {"family": "llama", "n_layers": layers, "d_model": 768, "n_heads": 12,
            "ffn_dim": 2048, "vocab_size": 32000, "seq_len": 128, "norm_eps": 1e-6}


def write_hf_dir(directory: Path, spec) -> int:
    """Random fp32 weights of `spec` as safetensors shards and an index; bytes written."""
    import fsspec
    import numpy as np

    from checkpoints.safetensors_io import (
        INDEX_FILE,
        SafetensorsWriter,
        TensorEntry,
        encode_index,
        shard_names,
        shard_plan,
    )
    from workers.schema.hf_format import hf_config, tensor_shapes

    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    entries = [TensorEntry(n, "F32", s) for n, s in tensor_shapes(spec).items()]
    shards = shard_plan(entries, SHARD_BYTES)
    names = shard_names(len(shards))
    fs = fsspec.filesystem("file")
    for shard, name in zip(shards, names, strict=True):
        writer = SafetensorsWriter(fs, str(directory / name), shard)
        for e in shard:
            writer.write(e.name, (rng.standard_normal(e.shape, dtype=np.float32) * 0.02).tobytes())
        writer.close()
    if len(shards) > 1:
        (directory / INDEX_FILE).write_bytes(encode_index(shards, names))
    (directory / "config.json").write_text(json.dumps(hf_config(spec, "float32")))
    return sum(p.stat().st_size for p in directory.iterdir())


def raw_read(paths: list[Path], buffers: list[bytearray]) -> float:
    """Each file whole into its own buffer (allocated and touched beforehand,
    as a model's parameters are): the bytes in memory, nothing else."""
    start = time.perf_counter()
    for path, buf in zip(paths, buffers, strict=True):
        with open(path, "rb", buffering=0) as f:
            view, done = memoryview(buf), 0
            while n := f.readinto(view[done:]):
                done += n
    return time.perf_counter() - start


def evict(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache (a cold read), not the machine's."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def raw_write(path: Path, nbytes: int) -> float:
    chunk = memoryview(os.urandom(4 << 20))
    start = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        left = nbytes
        while left:
            n = min(left, len(chunk))
            f.write(chunk[:n])
            left -= n
        os.fdatasync(f.fileno())
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def sync(directory: Path) -> None:
    """fdatasync every file of a directory: the export made durable, as the raw write is."""
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


def measure(workdir: Path, layers: int, reps: int) -> dict:
    import torch

    from checkpoints import CheckpointTarget
    from checkpoints.checkpointer import Checkpointer
    from checkpoints.stateful import ModelOnly
    from workers.engine.distributed import LOOPBACK, open_store
    from workers.engine.export import export_checkpoint, export_request
    from workers.engine.init_weights import HuggingFaceWeights
    from workers.models import build_model
    from workers.engine.sharding import build_mesh, shard_model
    from workers.schema import ModelSpec, ShardingSpec

    torch.distributed.init_process_group("gloo", store=open_store(LOOPBACK, 1, 600), rank=0,
                                         world_size=1)
    spec = ModelSpec.model_validate(model_spec(layers))
    hf_dir = workdir / "hf"
    hf_bytes = write_hf_dir(hf_dir, spec)
    files = sorted(p for p in hf_dir.iterdir() if p.suffix == ".safetensors")
    model = build_model(spec)
    shard_model(model, ShardingSpec(), build_mesh(ShardingSpec(), 1, "cpu"))
    target = CheckpointTarget(root=f"file://{workdir}/storage", tenant="bench", job="j1",
                              secret="bench-secret")
    checkpointer = Checkpointer(target.open_store(), keep_last=None)
    checkpointer.save(1, {"app": ModelOnly(model)})
    checkpointer.close()
    request = export_request(vars(target), spec, 1, "float32", SHARD_BYTES)
    rows = []
    buffers = [bytearray(p.stat().st_size) for p in files]

    def load() -> tuple[float, int]:
        start = time.perf_counter()
        source = HuggingFaceWeights(str(hf_dir))
        source.fill(model)
        return time.perf_counter() - start, source.reader.reads

    raw_read(files, buffers)  # warm the page cache for both sides
    for _ in range(reps):
        raw_in = raw_read(files, buffers)
        ours_in, reads = load()
        evict(files)
        raw_cold = raw_read(files, buffers)
        evict(files)
        ours_cold, _ = load()
        def export() -> tuple[float, dict]:
            start = time.perf_counter()
            done = export_checkpoint(request)
            sync(Path(target.open_exports().path(done["id"])))
            return time.perf_counter() - start, done

        if len(rows) % 2:  # alternate which goes first: the page cache's writeback hits both
            raw_out = raw_write(workdir / "raw.bin", hf_bytes)
            ours_out, done = export()
        else:
            ours_out, done = export()
            raw_out = raw_write(workdir / "raw.bin", hf_bytes)
        rows.append({"raw_read_s": raw_in, "import_s": ours_in, "reads": reads,
                     "raw_read_cold_s": raw_cold, "import_cold_s": ours_cold,
                     "export_s": ours_out, "raw_write_s": raw_out, "export_bytes": done["bytes"]})
    torch.distributed.destroy_process_group()
    return {"params": spec.num_params(), "hf_bytes": hf_bytes, "files": len(files), "rows": rows}


def add_args(parser) -> None:
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)


def run(args) -> Figure:
    reps = args.reps or (1 if args.quick else 3)
    layers = args.layers or (1 if args.quick else 8)
    OUT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="hf-io-", dir=OUT))
    try:
        out = measure(workdir, layers, reps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows, nbytes = out["rows"], out["hf_bytes"]
    med = statistics.median
    import_ratio = med(r["raw_read_s"] / r["import_s"] for r in rows)
    # bytes/s against bytes/s (the raw write writes the import's byte count, ~ the export's)
    export_rate = [r["export_bytes"] / r["export_s"] / (nbytes / r["raw_write_s"]) for r in rows]
    export_ratio = med(export_rate)
    cold_ratio = med(r["raw_read_cold_s"] / r["import_cold_s"] for r in rows)
    table = ["| rep | raw read MB/s | import MB/s | import / raw | cold: raw read | cold: import "
             "| cold: import / raw | raw write MB/s | export MB/s | export / raw |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, r in enumerate(rows, 1):
        table.append(
            f"| {i} | {nbytes / r['raw_read_s'] / MB:.0f} | {nbytes / r['import_s'] / MB:.0f} | "
            f"{r['raw_read_s'] / r['import_s']:.2f}x | {nbytes / r['raw_read_cold_s'] / MB:.0f} | "
            f"{nbytes / r['import_cold_s'] / MB:.0f} | "
            f"{r['raw_read_cold_s'] / r['import_cold_s']:.2f}x | "
            f"{nbytes / r['raw_write_s'] / MB:.0f} | "
            f"{r['export_bytes'] / r['export_s'] / MB:.0f} | {export_rate[i - 1]:.2f}x |")
    body = (
        f"A Llama of {out['params'] / 1e6:.0f}M parameters, fp32: {nbytes / MB:.0f} MB in "
        f"{out['files']} safetensors files (import, {rows[0]['reads']} ranged reads of tensor "
        f"data), and its export of {rows[0]['export_bytes'] / MB:.0f} MB. One process; warm: "
        "the page cache holds the files; cold: their pages evicted first (posix_fadvise), for "
        "the raw read and the import alike. The raw read reads each file whole into a buffer "
        "allocated beforehand, as the import reads each tensor's rows into the parameter's "
        "own memory. Medians over the repetitions.\n\n" + "\n".join(table) + "\n\n"
        "The export's time includes verifying the checkpoint's files against their manifest "
        "(a sha256 of every byte, on a thread beside the writes; DCP's metadata, a pickle, "
        "first), one DCP load per tensor, the sha256 of what it writes (beside each write) and "
        "the fdatasync of its files; the raw write writes and syncs.\n")
    return Figure(
        name="hf_io", title="Hugging Face weights: import and export vs raw I/O",
        command=f"{COMMAND} --reps {reps} --layers {layers}", body=body,
        headline=f"import / raw read {import_ratio:.2f}x (cold {cold_ratio:.2f}x); "
                 f"export / raw write {export_ratio:.2f}x",
        goals=[Goal("import >= 0.8x raw read (median, page cache warm)", f"{import_ratio:.2f}x",
                    import_ratio >= 0.8),
               Goal("import >= 0.8x raw read (median, cold)", f"{cold_ratio:.2f}x",
                    cold_ratio >= 0.8),
               Goal("export >= 0.8x raw write (median)", f"{export_ratio:.2f}x",
                    export_ratio >= 0.8)],
    )


if __name__ == "__main__":
    cli("hf_io", __doc__, add_args, run)
