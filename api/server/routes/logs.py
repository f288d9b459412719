"""A job's log: a page of lines as JSON, or (`?follow=true`) a stream of
server-sent events until the job ends.

    event: log        id: <line id>   data: LogLine
    event: progress                   data: JobProgress (whenever state or step changes)
    event: end                        data: JobProgress (the job is final; the stream closes)

A stream closes without `end` after `settings.stream_max_s` (proxies cut long
ones anyway); the client reconnects, and its `Last-Event-ID` header (or
`after_id`) resumes after the last line it got.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from api.schemas.jobs import JobProgress, LogLine
from api.server.deps import OwnedJob, SettingsDep, StoreDep
from api.server.routes.jobs import ERRORS, MAX_INDEX, Index

MAX_LINES = 10_000
HEARTBEAT_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERRORS)


@router.get(
    "/{job_id}/logs",
    response_model=list[LogLine],
    responses={200: {"content": {"text/event-stream": {}},
                     "description": "JSON lines, or with follow=true server-sent events"}},
)
def job_logs(
    request: Request,
    job: OwnedJob,
    store: StoreDep,
    settings: SettingsDep,
    follow: bool = False,
    after_id: Index = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LINES)] = 1000,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=32)] = None,
):
    if not follow:
        return [LogLine.model_validate(r) for r in store.logs(job.id, after_id=after_id, limit=limit)]
    if last_event_id and last_event_id.isdigit():
        after_id = max(after_id, min(int(last_event_id), MAX_INDEX))
    poll_s = min(settings.poll_interval_s, 0.5)
    stream = _follow(request, store, job.id, after_id, poll_s, time.monotonic() + settings.stream_max_s)
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _follow(request: Request, store, job_id: str, after_id: int, poll_s: float,
                  deadline: float) -> AsyncIterator[str]:
    last_progress, last_sent = None, time.monotonic()
    while time.monotonic() < deadline and not await request.is_disconnected():
        # The state is read before the lines: a job seen final has written all it will.
        job = await to_thread.run_sync(store.get_job, job_id)
        lines = await to_thread.run_sync(partial(store.logs, job_id, after_id=after_id, limit=MAX_LINES))
        for record in lines:
            line = LogLine.model_validate(record)
            after_id = line.id
            yield _event("log", line.model_dump_json(), ident=str(line.id))
        progress = JobProgress(state=job.state, step=job.step, steps=job.spec.train.steps)
        if job.state.is_terminal and len(lines) < MAX_LINES:
            yield _event("end", progress.model_dump_json())
            return
        if progress != last_progress:
            last_progress = progress
            yield _event("progress", progress.model_dump_json())
        elif not lines and time.monotonic() - last_sent > HEARTBEAT_S:
            yield ": keep-alive\n\n"
        elif not lines:
            await asyncio.sleep(poll_s)
            continue
        last_sent = time.monotonic()
        if len(lines) < MAX_LINES:
            await asyncio.sleep(poll_s)


def _event(kind: str, data: str, ident: str | None = None) -> str:
    head = f"event: {kind}\n" + (f"id: {ident}\n" if ident else "")
    return head + f"data: {data}\n\n"


