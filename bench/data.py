"""Token data: the wait for data per step, a rank's memory on a big token set,
and `data prepare`'s throughput on Ray.

    .venv/bin/python -m bench.data [--quick] [--steps 40] [--text-mb 8]

1. Data wait per step / step time: one process (world 1, gloo, as
   `workers.engine.local` runs) trains a GPT on a token set on file:// and on S3
   (moto on 127.0.0.1, its options in BRIGADE_DATA_STORAGE_OPTIONS), the
   next batch read ahead in a thread (workers/engine/prefetch.py). The ratio is
   sum(data_wait_s) / sum(step_time_s) over the steps after the first; beside
   it, what reading one batch takes without the read-ahead.
2. RSS growth of a rank's reader (the source and read-ahead the trainer
   builds, in a process of its own) over 2,000 batches of random windows of a
   20 MB token set and of a 2 GB one: VmRSS after the first batch against
   after the last, and VmHWM. The 2 GB set is sparse files of zeros (valid
   ids) with their real sha256, made in seconds under bench/out/ and deleted.
3. `data prepare` tokens/s with 2 Ray workers (one task a file, 4 jsonl
   files of generated text) against the `tokenizers` library's own
   `encode_batch` over the same documents in one process (its Rust threads
   on every core), and the speed-up from 1 to 2 workers. Ray is started
   before the clock.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.report import OUT, Figure, Goal, cli

COMMAND = ".venv/bin/python -m bench.data"
MODEL = {"n_layers": 4, "d_model": 128, "n_heads": 4, "seq_len": 128, "vocab_size": 512}
SHARD_BYTES_BIG = 256 << 20


def make_token_set(directory: Path, total_bytes: int, sparse: bool, vocab: int = 512) -> str:
    """A token set (uint16) of about `total_bytes`: random ids, or sparse zeros."""
    import numpy as np

    from workers.datasets.index import DatasetIndex, Shard

    directory.mkdir(parents=True, exist_ok=True)
    shard_bytes = min(total_bytes, SHARD_BYTES_BIG)
    shards, rng = [], np.random.default_rng(0)
    for k in range(max(1, total_bytes // shard_bytes)):
        path = directory / f"shard-{k:05d}-000.bin"
        digest = hashlib.sha256()
        if sparse:
            with open(path, "wb") as f:
                f.truncate(shard_bytes)
            zeros = bytes(4 << 20)
            for _ in range(shard_bytes // len(zeros)):
                digest.update(zeros)
        else:
            blob = rng.integers(0, vocab, shard_bytes // 2, dtype=np.uint16).astype("<u2").tobytes()
            path.write_bytes(blob)
            digest.update(blob)
        shards.append(Shard(path.name, shard_bytes // 2, digest.hexdigest()))
    index = DatasetIndex(dtype="uint16", vocab_size=vocab, eod_id=0, shards=tuple(shards), tokenizer=None)
    (directory / "index.json").write_text(index.to_json())
    return f"file://{directory}"


# -- 1. the wait for data -------------------------------------------------------------


def wait_run(uri: str, steps: int) -> dict:
    """Train `steps` steps on `uri` in this process; the wait and step times."""
    from workers.engine.data import RankBatches
    from workers.datasets.sources import open_tokens
    from workers.engine.distributed import destroy_process_group, init_single_process
    from workers.schema import JobSpec
    from workers.engine.trainer import Trainer

    spec = JobSpec.model_validate({
        "model": MODEL, "data": {"source": "tokens", "uri": uri},
        "train": {"steps": steps, "global_batch_size": 8, "lr": 3e-3},
        "checkpoint": {"every_steps": 0}})
    init_single_process(60.0)
    try:
        rows = Trainer(spec).run()
    finally:
        destroy_process_group()
    plain = RankBatches(open_tokens(uri, spec.model, 0, verify=False), 8, 0, 1)
    reads = []
    for _ in range(10):
        start = time.perf_counter()
        plain.next_batch()
        reads.append(time.perf_counter() - start)
    later = rows[1:]
    return {"wait_s": sum(r["data_wait_s"] for r in later), "step_s": sum(r["step_time_s"] for r in later),
            "batch_read_s": statistics.median(reads), "steps": len(later),
            "median_step_s": statistics.median(r["step_time_s"] for r in later),
            "loss_first": rows[0]["loss"], "loss_last": rows[-1]["loss"]}


def measure_wait(work: Path, steps: int) -> dict:
    import fsspec
    from moto.server import ThreadedMotoServer

    uri = make_token_set(work / "wait-set", 20 << 20, sparse=False)
    out = {"file": wait_run(uri, steps)}
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"key": "test", "secret": "test",
                   "client_kwargs": {"endpoint_url": f"http://{host}:{port}"}}
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("bench-data")
        prefix = f"bench-data/{uuid.uuid4().hex[:8]}"
        fs.put(str(work / "wait-set") + "/", prefix, recursive=True)
        os.environ["BRIGADE_DATA_STORAGE_OPTIONS"] = json.dumps(options)
        out["s3"] = wait_run(f"s3://{prefix}", steps)
    finally:
        os.environ.pop("BRIGADE_DATA_STORAGE_OPTIONS", None)
        server.stop()
    return out


# -- 2. a rank's memory -----------------------------------------------------------------


READER = r"""
import json, sys, resource
from workers.engine.data import RankBatches
from workers.datasets.sources import open_tokens
from workers.engine.prefetch import BatchPrefetch
from workers.schema import ModelSpec

def status(key):
    with open("/proc/self/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith(key))) * 1024

uri, reads = sys.argv[1], int(sys.argv[2])
model = ModelSpec.model_validate(json.loads(sys.argv[3]))
batches = BatchPrefetch(RankBatches(open_tokens(uri, model, 0), 8, 0, 1))
batches.next_batch()
first = status("VmRSS:")
for _ in range(reads):
    batches.next_batch()
batches.close()
print(json.dumps({"rss_first": first, "rss_last": status("VmRSS:"), "hwm": status("VmHWM:")}))
"""


def measure_rss(work: Path, big_bytes: int, reads: int) -> dict:
    out = {}
    big = f"{big_bytes / 2**30:.0f} GB" if big_bytes >= 1 << 30 else f"{big_bytes >> 20} MB"
    for name, size, sparse in (("20 MB", 20 << 20, False), (big, big_bytes, True)):
        uri = make_token_set(work / f"rss-{size}", size, sparse=sparse)
        proc = subprocess.run([sys.executable, "-c", READER, uri, str(reads), json.dumps(MODEL)],
                              capture_output=True, text=True, check=True)
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1]) | {"bytes": size}
    return out


# -- 3. preparation on Ray ------------------------------------------------------------------


def measure_prepare(work: Path, text_mb: float) -> dict:
    import ray

    from tests.workers.datasets.corpus import documents, train_tokenizer, write_jsonl
    from workers.datasets.prepare import prepare
    from workers.datasets.text import iter_documents

    inputs = work / "prepare-in"
    per_file = max(50, int(text_mb * 1e6 / 4 / 330))  # ~330 bytes a document
    files = [write_jsonl(f"file://{inputs}/part-{k}.jsonl", documents(k, per_file)) for k in range(4)]
    text_bytes = sum(os.path.getsize(f.removeprefix("file://")) for f in files)
    tokenizer = train_tokenizer(512)
    tokenizer_uri = f"file://{work}/tokenizer.json"
    Path(tokenizer_uri.removeprefix("file://")).write_text(tokenizer.to_str())

    start = time.perf_counter()  # the library's own batch encode, one process, every core
    docs = [d for f in files for d in iter_documents(f)]
    tokens = sum(len(e.ids) + 1 for e in tokenizer.encode_batch(docs, add_special_tokens=False))
    library_s = time.perf_counter() - start

    ray.init(num_cpus=2, include_dashboard=False, address="local")
    try:
        ray.get([ray.remote(num_cpus=1)(lambda: 0).remote() for _ in range(2)])  # workers up
        runs = {}
        for workers in (1, 2, 2, 1):  # interleaved: the machine's noise hits both
            out = f"file://{work}/prepare-out-{workers}-{len(runs)}"
            start = time.perf_counter()
            index = prepare([f"file://{inputs}/*.jsonl"], out, tokenizer=tokenizer_uri, workers=workers)
            runs.setdefault(workers, []).append(time.perf_counter() - start)
            assert index.tokens == tokens, (index.tokens, tokens)
    finally:
        ray.shutdown()
    return {"tokens": tokens, "text_bytes": text_bytes, "library_s": library_s,
            "ray_s": {w: min(t) for w, t in runs.items()}}


def run(args) -> Figure:
    work = OUT / "data-bench"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    steps = 8 if args.quick else args.steps
    big = (200 << 20) if args.quick else (2 << 30)
    try:
        wait = measure_wait(work, steps)
        rss = measure_rss(work, big, 200 if args.quick else 2000)
        prep = measure_prepare(work, 0.5 if args.quick else args.text_mb)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    lines = ["### Data wait per step, with the next batch read ahead", "",
             f"A GPT ({MODEL['n_layers']} layers, d_model {MODEL['d_model']}, seq_len "
             f"{MODEL['seq_len']}), a global batch of 8, {steps} steps in one process; a 20 MB token "
             "set of random ids.", "",
             "| storage | data wait / step time | median step | one batch read without read-ahead |",
             "| --- | --- | --- | --- |"]
    ratios = {}
    for name, r in wait.items():
        ratios[name] = r["wait_s"] / r["step_s"]
        lines.append(f"| {name}:// | {ratios[name] * 100:.2f}% | {r['median_step_s'] * 1e3:.0f} ms | "
                     f"{r['batch_read_s'] * 1e3:.1f} ms |")
    lines += ["", "### A rank's memory on a 2 GB token set against a 20 MB one", "",
              "| token set | RSS after the first batch | after the last | growth | VmHWM |",
              "| --- | --- | --- | --- | --- |"]
    growth = {}
    for name, r in rss.items():
        growth[name] = r["rss_last"] - r["rss_first"]
        lines.append(f"| {name} | {r['rss_first'] / 1e6:.1f} MB | {r['rss_last'] / 1e6:.1f} MB | "
                     f"{growth[name] / 1e6:+.1f} MB | {r['hwm'] / 1e6:.1f} MB |")
    small, large = list(rss)
    gap = (rss[large]["rss_last"] - rss[small]["rss_last"]) / 1e6
    lines += ["", f"The {large} reader ends {gap:+.1f} MB from the 20 MB one (goal: within 64 MB). "
              "Both checked every shard's sha256 at start (streamed in 4 MiB chunks).", ""]
    tokens, lib = prep["tokens"], prep["library_s"]
    ray_s = prep["ray_s"]
    lines += ["### `data prepare` on Ray against the library's own batch encode", "",
              f"{prep['text_bytes'] / 1e6:.1f} MB of generated text in 4 jsonl files, {tokens:,} tokens "
              "(a 512-id BPE tokenizer); the best of 2 runs each.", "",
              "| what | seconds | tokens/s |", "| --- | --- | --- |",
              f"| `tokenizers` `encode_batch`, one process (its threads on every core) | {lib:.2f} | "
              f"{tokens / lib:,.0f} |"]
    for w in sorted(ray_s):
        lines.append(f"| `data prepare`, {w} Ray worker{'s' if w > 1 else ''} (read, encode, write "
                     f"shards and index) | {ray_s[w]:.2f} | {tokens / ray_s[w]:,.0f} |")
    speedup = ray_s[1] / ray_s[2]
    overhead = lib / ray_s[2]
    lines += ["", f"2 workers reach {overhead:.2f}x the library's one-process rate; 1 -> 2 workers: "
              f"{speedup:.2f}x. Each task runs the tokenizer on one core (TOKENIZERS_PARALLELISM=false): "
              "the cluster, not the library, parallelises.", ""]
    worst = max(ratios.values())
    return Figure(
        name="data", title="Data: token shards' wait per step, a rank's memory, preparation on Ray",
        command=f"{COMMAND} --steps {args.steps} --text-mb {args.text_mb:g}",
        body="\n".join(lines) + "\n",
        headline=(f"data wait / step: file {ratios['file'] * 100:.2f}%, S3 {ratios['s3'] * 100:.2f}%; "
                  f"RSS {large} vs 20 MB: {gap:+.1f} MB; prepare 2 workers {tokens / ray_s[2]:,.0f} tok/s "
                  f"({overhead:.2f}x the library), 1 -> 2: {speedup:.2f}x"),
        goals=[Goal("data wait <= 2% of step time", f"{worst * 100:.2f}%", worst <= 0.02),
               Goal("RSS of a 2 GB set within 64 MB of a 20 MB one", f"{gap:+.1f} MB", abs(gap) <= 64)],
    )


def add_args(parser) -> None:
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--text-mb", type=float, default=8.0)


if __name__ == "__main__":
    cli("data", __doc__, add_args, run)
