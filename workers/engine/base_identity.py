"""The base an adapter job trains on, and the refusal to resume its adapters on another.

    base_identity(job)     the model's config (a hash of its spec) and where its
                           weights come from: a sha256 of every tensor of the
                           Hugging Face directory (`init.uri`; collective, each
                           rank digests every world-size-th tensor), or the
                           seed of a seeded base. Kept in every checkpoint's
                           manifest (workers/engine/checkpointing.py).
    check_base(saved, now) `BaseMismatch` (permanent: a restart reads the same
                           files) where a checkpoint's adapters were trained on
                           another base than the job's `init` holds now.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch.distributed as dist

from workers.engine.errors import BaseMismatch
from workers.schema import JobSpec


def base_identity(job: JobSpec) -> dict[str, Any]:
    """The base the adapters train on: the model's config (its spec's hash),
    and where its weights come from: a sha256 of every tensor of the
    Hugging Face directory (`init.uri`; collective, each rank digests every
    world-size-th tensor), or the seed of a seeded base."""
    model = job.model.model_dump(mode="json", exclude={"config_uri"})
    config = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()
    if job.init is None or job.init.uri is None:
        return {"config": config, "seed": job.train.seed}
    from checkpoints.safetensors_io import SafetensorsReader
    from workers.datasets.storage import data_storage_options

    reader = SafetensorsReader(job.init.uri, data_storage_options())
    names = sorted(reader.tensors)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    mine = {name: hashlib.sha256(reader.read_box(name)).hexdigest() for name in names[rank::world]}
    shares: list[Any] = [None] * world
    if world > 1:
        dist.all_gather_object(shares, mine)
    else:
        shares = [mine]
    tensors = {name: digest for share in shares for name, digest in share.items()}
    return {"config": config, "tensors": dict(sorted(tensors.items()))}


def check_base(saved: dict[str, Any] | None, now: dict[str, Any], step: int) -> None:
    """Refuse to resume adapters saved on another base (`BaseMismatch` names the difference)."""
    if saved is None:
        raise BaseMismatch(f"checkpoint step {step} holds no base identity: it was not saved "
                           "by an adapter job, so its adapters cannot be resumed")
    if saved.get("config") != now.get("config"):
        raise BaseMismatch(f"checkpoint step {step}'s adapters were trained on another model "
                           "config than this job's")
    if saved.get("seed") != now.get("seed"):
        raise BaseMismatch(f"checkpoint step {step}'s adapters were trained on a base seeded "
                           f"{saved.get('seed')}, this job's is {now.get('seed')}")
    old, new = saved.get("tensors") or {}, now.get("tensors") or {}
    changed = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
    if changed:
        raise BaseMismatch(f"checkpoint step {step}'s adapters were trained on other base "
                           f"weights: tensor {changed[0]} differs from init.uri's "
                           f"({len(changed)} tensors differ)")
