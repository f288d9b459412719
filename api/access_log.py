"""The access log writes request paths and client addresses as `printable`
text: a path like `/v1/jobs/%0a200 GET /admin` decodes to a newline and would
otherwise forge a second log line."""

from __future__ import annotations

import logging

from service.log_text import printable


class PrintableArgs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(a if isinstance(a, (int, float)) else printable(a, 2048)
                                for a in record.args)
        return True


def install() -> None:
    """Once per process: the filter on uvicorn's access logger."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, PrintableArgs) for f in access.filters):
        access.addFilter(PrintableArgs())
