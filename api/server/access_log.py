"""The access log writes request paths and client addresses as `printable`
text: a path like `/v1/jobs/%0a200 GET /admin` decodes to a newline and would
otherwise forge a second log line."""

from __future__ import annotations

import logging

from service.log_text import printable


class PrintableArgs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(a if _plain(a) else printable(a, 2048) for a in record.args)
        return True


def _plain(arg: object) -> bool:
    """Safe as it is: a number, or short text with no control or line-separator
    character (`str.isprintable` is false for each of them), as nearly every
    request's method, path and address are; the rest goes through `printable`."""
    if isinstance(arg, (int, float)):
        return True
    return isinstance(arg, str) and len(arg) <= 2048 and arg.isprintable()


def install() -> None:
    """Once per process: the filter on uvicorn's access logger."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, PrintableArgs) for f in access.filters):
        access.addFilter(PrintableArgs())
