"""A byte-level data file (`data: {source: uri, uri: ...}`): any fsspec URI,
its bytes the token ids. The service checks it at submit and the ranks read
it whole at start, through the same functions and the same storage options
(BRIGADE_DATA_STORAGE_OPTIONS, `workers.datasets.storage`): a file that is
not there, is a folder, cannot be read, or holds fewer bytes than one
window of `seq_len + 1` (and one to draw from) is a `DataError` naming it:
a 422 at `data.uri` at submit, a failure without a restart at run time.

Torch- and numpy-free (the API reads it at submit).
"""

from __future__ import annotations

from workers.datasets.errors import DataError
from workers.datasets.storage import data_storage_options


def min_bytes(seq_len: int) -> int:
    """The fewest bytes a byte corpus may hold: one window of seq_len + 1 and one more to draw from."""
    return seq_len + 2


def check_byte_file(uri: str, seq_len: int, storage_options: dict | None = None) -> int:
    """The file's size, if it is a file that can be read and holds at least
    `min_bytes(seq_len)`; DataError naming it otherwise. Reads one byte."""
    fs, path = _fs(uri, storage_options)
    try:
        info = fs.info(path)
        if info.get("type") == "directory":
            raise DataError(uri, "is a folder, not a file (data.source 'uri' reads one file's bytes)")
        size = int(info.get("size") or 0)
        with fs.open(path, "rb") as f:
            f.read(1)
    except FileNotFoundError:
        raise DataError(uri, "no such file") from None
    except IsADirectoryError:
        raise DataError(uri, "is a folder, not a file (data.source 'uri' reads one file's bytes)"
                        ) from None
    except OSError as e:  # permissions, a store that refuses
        raise DataError(uri, f"cannot be read ({type(e).__name__}: {e})") from None
    _check_size(uri, size, seq_len)
    return size


def read_byte_file(uri: str, seq_len: int, storage_options: dict | None = None) -> bytes:
    """The whole file (what a rank trains on), checked as at submit."""
    fs, path = _fs(uri, storage_options)
    try:
        blob = fs.cat_file(path)
    except FileNotFoundError:
        raise DataError(uri, "no such file (it was there at submit: moved or deleted since?)"
                        ) from None
    except IsADirectoryError:
        raise DataError(uri, "is a folder, not a file (data.source 'uri' reads one file's bytes)"
                        ) from None
    except PermissionError as e:  # another OSError (a store's hiccup) may pass: restarted
        raise DataError(uri, f"cannot be read ({type(e).__name__}: {e})") from None
    _check_size(uri, len(blob), seq_len)
    return blob


def _fs(uri: str, storage_options: dict | None):
    from fsspec.core import url_to_fs

    try:
        return url_to_fs(uri, **data_storage_options(storage_options))
    except (ValueError, ImportError) as e:  # an unknown scheme, its library missing
        raise DataError(uri, f"cannot be opened ({type(e).__name__}: {e})") from None


def _check_size(uri: str, size: int, seq_len: int) -> None:
    if size < min_bytes(seq_len):
        raise DataError(uri, f"{size} bytes is too short for seq_len {seq_len} "
                             f"(needs at least {min_bytes(seq_len)})")
