"""Whether a token dataset's shards are what its index says: present, of
the size their token counts make, and (streamed, never held whole) of the
sha256 it records. Torch- and numpy-free: the API checks sizes at submit."""

from __future__ import annotations

import hashlib

from workers.datasets.errors import DataError
from workers.datasets.index import DatasetIndex, join

HASH_CHUNK = 4 << 20  # checksums are streamed in chunks of this


def check_shard_sizes(prefix: str, index: DatasetIndex, storage_options: dict | None = None) -> None:
    """Every shard exists and has the size its token count says (one listing
    of the prefix, not a request a shard); DataError naming the first that does not."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(prefix.rstrip("/"), **(storage_options or {}))
    try:
        listed = {entry["name"].rsplit("/", 1)[-1]: entry["size"]
                  for entry in fs.ls(root, detail=True)}
    except OSError:  # not there, or not a directory: every shard is missing
        listed = {}
    for shard in index.shards:
        uri = join(prefix, shard.file)
        size = listed.get(shard.file)
        if size is None:
            raise DataError(uri, "shard missing (named in the index, not found)")
        want = shard.tokens * index.itemsize
        if size != want:
            raise DataError(uri, f"shard is {size} bytes, the index says {shard.tokens} tokens "
                                 f"x {index.itemsize} B = {want} bytes")


def verify_checksums(prefix: str, index: DatasetIndex, shards: list[int],
                     storage_options: dict | None = None) -> None:
    """The sha256 of each of `shards` (numbers) is the index's, read in
    chunks of HASH_CHUNK; DataError naming the first that is not."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(prefix.rstrip("/"), **(storage_options or {}))
    for k in shards:
        shard = index.shards[k]
        digest = hashlib.sha256()
        try:
            with fs.open(f"{root}/{shard.file}", "rb", block_size=HASH_CHUNK) as f:
                while chunk := f.read(HASH_CHUNK):
                    digest.update(chunk)
        except FileNotFoundError:
            raise DataError(join(prefix, shard.file), "shard missing") from None
        except OSError as e:
            raise DataError(join(prefix, shard.file), f"cannot read the shard ({e})") from None
        if digest.hexdigest() != shard.sha256:
            raise DataError(join(prefix, shard.file), f"checksum mismatch: sha256 "
                                                      f"{digest.hexdigest()[:16]}..., the index "
                                                      f"says {shard.sha256[:16]}...")
