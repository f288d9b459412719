"""How `brigade serve` logs: one handler on the root logger (uvicorn's
loggers too), at `BRIGADE_LOG_LEVEL`, as text or as one JSON object a line
(`BRIGADE_LOG_FORMAT=text|json`).

A record about a job carries its `job_id` and `tenant`: given as `extra`
(`job_fields(job)`), or taken from the context a job's runner thread runs in
(`about_job`), so every record its thread logs names the job without each
call saying so. Messages are made printable (one line: a tenant's name or a
rank's error cannot forge a record).
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO

from service.log_text import printable

_JOB: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "brigade_job", default=None)
MESSAGE_LIMIT = 8192
_MARK = "_brigade_handler"


@contextmanager
def about_job(job_id: str, tenant: str | None) -> Iterator[None]:
    """Records logged in this context (this thread, from here) name the job."""
    token = _JOB.set((job_id, tenant))
    try:
        yield
    finally:
        _JOB.reset(token)


def job_fields(job) -> dict:
    """`extra=` for a record about this job (a `JobRecord`)."""
    return {"job_id": job.id, "tenant": job.tenant}


class JobContext(logging.Filter):
    """Sets `job_id` and `tenant` on every record (None: not about a job)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _JOB.get()
        if getattr(record, "job_id", None) is None:
            record.job_id = current[0] if current else None
        if getattr(record, "tenant", None) is None:
            record.tenant = current[1] if current else None
        return True


class TextFormat(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = printable(super().format(record), MESSAGE_LIMIT)
        job, tenant = getattr(record, "job_id", None), getattr(record, "tenant", None)
        if job:
            text += f" [job={job} tenant={tenant or '-'}]"
        return text


class JsonFormat(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": printable(record.getMessage(), MESSAGE_LIMIT),
        }
        for name in ("job_id", "tenant"):
            if (value := getattr(record, name, None)) is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = printable(self.formatException(record.exc_info), MESSAGE_LIMIT)
        return json.dumps(entry)


def configure(level: str = "INFO", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Log at `level` and above, as `fmt` ("text" or "json"), to `stream`
    (stderr); called again, it replaces the handler it installed before."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    setattr(handler, _MARK, True)
    handler.addFilter(JobContext())
    handler.setFormatter(JsonFormat() if fmt == "json" else TextFormat())
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # theirs, through ours
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
