"""The sample sources of token data (`data.source` tokens or text, or a
mixture of token datasets) for the engine, and the fixed sets a validation
loss is computed on: built once a rank, after the checks a restart cannot
fix (DataError, naming the file).
"""

from __future__ import annotations

from workers.datasets.errors import DataError
from workers.datasets.index import read_index
from workers.datasets.integrity import check_shard_sizes, verify_checksums
from workers.datasets.mixture import MixtureSource
from workers.datasets.storage import data_storage_options
from workers.datasets.text import TextSource
from workers.datasets.token_shards import TokenShardSource, split_windows
from workers.schema import DataSpec, EvalSpec, ModelSpec

EVAL_SEED_SALT = 0x5EED_E7A1  # the held-out set's order is not the training order


def token_source(data: DataSpec, model: ModelSpec, seed: int, *, holdout: float | None = None,
                 held_out: bool = False, rank: int = 0, world_size: int = 1,
                 storage_options: dict | None = None) -> TokenShardSource | TextSource:
    """The training source (or, with `held_out`, the held-out one) of a job's token data."""
    assert data.uri is not None  # the spec requires it for token sources
    storage_options = data_storage_options(storage_options)
    if data.source == "text":
        assert data.tokenizer is not None
        source = TextSource(data.uri, data.field, data.tokenizer, seed, model.seq_len, storage_options)
        _check_vocab(source.vocab_size, model, data.tokenizer)
        return source
    return open_tokens(data.uri, model, seed, holdout=holdout, held_out=held_out, rank=rank,
                       world_size=world_size, verify=data.verify_checksums and not held_out,
                       storage_options=storage_options)


def open_tokens(prefix: str, model: ModelSpec, seed: int, *, holdout: float | None = None,
                held_out: bool = False, rank: int = 0, world_size: int = 1, verify: bool = True,
                storage_options: dict | None = None) -> TokenShardSource:
    storage_options = data_storage_options(storage_options)
    index = read_index(prefix, storage_options)
    _check_vocab(index.vocab_size, model, f"{prefix} (its index)")
    check_shard_sizes(prefix, index, storage_options)
    if verify:  # each rank reads its share of the shards once, streamed
        verify_checksums(prefix, index, list(range(rank, len(index.shards), world_size)),
                         storage_options)
    source = TokenShardSource(prefix, seed, model.seq_len, index=index,
                              storage_options=storage_options)
    if holdout:
        try:
            train, held = split_windows(source.total_windows, holdout, model.seq_len)
        except ValueError as e:
            raise DataError(prefix, str(e)) from None
        source.windows = held if held_out else train
    return source


def mixture_source(data: DataSpec, model: ModelSpec, seed: int, global_batch: int, *,
                   holdout: float | None = None, held_out: bool = False, rank: int = 0,
                   world_size: int = 1, storage_options: dict | None = None) -> MixtureSource:
    """The training samples (or, with `held_out`, the held-out ones) of a
    job's `data.mix`: each member opened as a lone dataset is, all of one
    vocabulary."""
    assert data.mix is not None
    members = [open_tokens(m.uri, model, seed, holdout=holdout, held_out=held_out, rank=rank,
                           world_size=world_size, verify=data.verify_checksums and not held_out,
                           storage_options=storage_options) for m in data.mix]
    first = members[0]
    for member in members[1:]:
        ours, theirs = (first.index.vocab_size, first.index.eod_id), \
            (member.index.vocab_size, member.index.eod_id)
        if ours != theirs:
            raise DataError(member.prefix, f"its vocabulary ({theirs[0]} ids, end of document "
                            f"{theirs[1]}) is not that of {first.prefix} ({ours[0]} ids, end of "
                            f"document {ours[1]}): a mixture's datasets share one tokenizer")
    return MixtureSource(members, data.mix_names(), [m.weight for m in data.mix], global_batch, seed)


def eval_source(eval: EvalSpec, data: DataSpec, model: ModelSpec, seed: int, *,
                storage_options: dict | None = None) -> TokenShardSource | TextSource:
    """The fixed samples of a validation loss: another token dataset's, or
    the held-out tail of the training one's."""
    eval_seed = seed ^ EVAL_SEED_SALT
    if data.mix is not None and eval.uri is None:
        raise ValueError("a mixture's held-out samples are its members' (member_eval_sources)")
    if eval.uri is not None:
        return open_tokens(eval.uri, model, eval_seed, verify=False, storage_options=storage_options)
    return token_source(data, model, eval_seed, holdout=eval.holdout_fraction, held_out=True,
                        storage_options=storage_options)


def member_eval_sources(eval: EvalSpec, data: DataSpec, model: ModelSpec, seed: int, *,
                        storage_options: dict | None = None) -> dict[str, TokenShardSource]:
    """A mixture's held-out samples, one fixed set a member, by the member's
    name; none unless `eval.holdout_fraction` holds out from a `data.mix`."""
    if data.mix is None or eval.holdout_fraction is None:
        return {}
    return {name: open_tokens(m.uri, model, seed ^ EVAL_SEED_SALT, holdout=eval.holdout_fraction,
                              held_out=True, verify=False, storage_options=storage_options)
            for name, m in zip(data.mix_names(), data.mix, strict=True)}


def _check_vocab(dataset_vocab: int, model: ModelSpec, where: str) -> None:
    if dataset_vocab > model.vocab_size:
        raise DataError(where, f"the dataset's vocabulary ({dataset_vocab}) is larger than "
                               f"model.vocab_size ({model.vocab_size})")
