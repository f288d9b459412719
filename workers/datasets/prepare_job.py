"""A dataset-preparation job (kind 'prepare') on its worker group: the same
preparation as `brigade data prepare` (workers/datasets/prepare.py), with
the job's rank actors as the Ray workers, so that it is admitted, listed,
followed and cancelled like any job.

Files go out in rounds: in round k rank r tokenizes file k x world + r; the
round's results are gathered, and rank 0 reports one metrics row a file
(`step` = files done, so train.steps = the number of files and `brigade logs
-f` shows a bar of files). Rank 0 reads (or trains, then broadcasts) the
tokenizer first and writes the tokenizer and the index last. The output is
the same bytes as `brigade data prepare`'s at any world size. A restart
starts again from the first file (the shards are rewritten, identical).
"""

from __future__ import annotations

from collections.abc import Callable

from workers.datasets.prepare import FileResult, tokenize_file, tokenizer_of, write_index
from workers.datasets.storage import data_storage_options
from workers.schema import PrepareSpec
from workers.schema.metrics_row import MetricRow


def prepare_on_ranks(spec: PrepareSpec, record: Callable[[dict], None]) -> list[dict]:
    """This rank's part of the job; every rank returns the rows of every file."""
    import fsspec
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    options = data_storage_options()
    files = list(spec.inputs)
    shared: list = [None]
    if rank == 0:
        fs, root = fsspec.core.url_to_fs(spec.output.rstrip("/"), **options)
        fs.makedirs(root, exist_ok=True)
        shared[0] = tokenizer_of(files, spec.tokenizer, spec.train_vocab_size, spec.field, options)
    dist.broadcast_object_list(shared, src=0)
    tokenizer_json, _, eod, dtype = shared[0]
    results: list[FileResult] = []
    rows: list[dict] = []
    for first in range(0, len(files), world):
        mine = first + rank
        done = (tokenize_file(mine, files[mine], spec.field, tokenizer_json, eod, dtype, spec.output,
                              spec.tokens_per_shard, options) if mine < len(files) else None)
        gathered: list = [None] * world
        dist.all_gather_object(gathered, done)
        for k, result in enumerate(gathered):
            if result is None:
                continue
            results.append(result)
            row = MetricRow(step=first + k + 1, file=result.file.rsplit("/", 1)[-1],
                            tokens=result.tokens, documents=result.documents,
                            shards=len(result.shards), file_s=result.seconds,
                            tokens_per_s=result.tokens / max(result.seconds, 1e-9)).as_dict()
            rows.append(row)
            record(row)
    if rank == 0:
        write_index(spec.output, results, tokenizer_json, spec.field, options)
    dist.barrier()  # every rank returns once the dataset exists
    return rows
