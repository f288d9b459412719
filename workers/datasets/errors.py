"""A job's data that is wrong in a way a restart cannot fix.

Torch-, numpy- and Ray-free (the control plane refuses bad data at submit with
it), and picklable so that it crosses from a rank to the driver.
"""

from __future__ import annotations


class DataError(ValueError):
    """A job's data is wrong in a way a restart cannot fix (a missing or
    corrupt shard, a token id outside the vocabulary, a tokenizer that does
    not parse): the job fails at once, naming `file`, without using up its
    restarts. The control plane tells it apart by `is_permanent` on the
    message that crosses from the rank."""

    def __init__(self, file: str, message: str):
        super().__init__(f"{file}: {message}")
        self.file = file

    def __reduce__(self):
        return _data_error, (self.file, str(self))


def _data_error(file: str, text: str) -> DataError:
    error = DataError(file, "")
    error.args = (text,)
    return error
