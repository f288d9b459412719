"""A dataset's tokenizer: a Hugging Face `tokenizers` JSON file, read
through fsspec. Its vocabulary size is what a job's `model.vocab_size` must
cover; its end-of-document token is what goes between documents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers.datasets.errors import DataError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MAX_TOKENIZER_BYTES = 64 << 20
# The end-of-document token, by the names the common tokenizers give it.
EOD_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")


def parse_tokenizer(blob: bytes, where: str) -> Tokenizer:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(blob.decode("utf-8"))
    except Exception as e:  # tokenizers raises its own Exception subclass, unexported
        raise DataError(where, f"not a tokenizers JSON file ({str(e)[:200]})") from None


def load_tokenizer(uri: str, storage_options: dict | None = None) -> Tokenizer:
    """The tokenizer at `uri`; DataError naming the file if it is missing,
    too large or does not parse."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    try:
        info = fs.info(path)
        if info.get("type") == "directory":
            raise DataError(uri, "is a directory, not a tokenizer file")
        if info["size"] > MAX_TOKENIZER_BYTES:
            raise DataError(uri, f"{info['size']} bytes is too large for a tokenizer file")
        blob = fs.cat_file(path)
    except FileNotFoundError:
        raise DataError(uri, "tokenizer file not found") from None
    except OSError as e:  # unreadable: permissions, a store that refuses
        raise DataError(uri, f"cannot read the tokenizer file ({e})") from None
    return parse_tokenizer(blob, uri)


def vocab_size(tokenizer: Tokenizer) -> int:
    """Ids run 0..vocab_size-1, added tokens included."""
    return int(tokenizer.get_vocab_size(with_added_tokens=True))


def eod_id(tokenizer: Tokenizer, where: str, token: str | None = None) -> int:
    """The id of `token`, or of the first of EOD_TOKENS the tokenizer has."""
    for name in (token,) if token else EOD_TOKENS:
        found = tokenizer.token_to_id(name)
        if found is not None:
            return int(found)
    names = token or ", ".join(EOD_TOKENS)
    raise DataError(where, f"the tokenizer has no end-of-document token ({names})")
