"""A page of jobs' JSON made from kept pieces is what pydantic writes for
`JobsPublic`, and a job that changed is written anew (no server needed)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

from api.server.job_json import JobJson
from api.schemas.jobs import JobPublic, JobsPublic
from service.states import JobState
from service.store.records import JobRecord

SPEC = {"name": "n", "workers": 2, "model": {"n_layers": 1, "d_model": 32, "n_heads": 2,
                                              "seq_len": 16},
        "train": {"steps": 10}, "checkpoint": {"async": True}}
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def record(job_id: str, **changes) -> JobRecord:
    fields = dict(id=job_id, tenant="acme", name="n", state=JobState.QUEUED, stored_spec=SPEC,
                  priority=0, workers=None, requested_workers=None, step=0, restarts=0,
                  preemptions=0, latest_checkpoint=None, attempt=0, error=None,
                  idempotency_key=None, created_at=NOW, started_at=None, finished_at=None,
                  updated_at=NOW)
    return JobRecord(**{**fields, **changes})


def pydantic_page(records, total, limit, offset) -> bytes:
    return JobsPublic(items=[JobPublic.model_validate(r) for r in records], total=total,
                      limit=limit, offset=offset).model_dump_json(by_alias=True).encode()


def test_a_page_is_byte_for_byte_what_pydantic_writes():
    jobs = JobJson()
    records = [record("j-000000000001"), record("j-000000000002", state=JobState.RUNNING,
                                                 workers=2, step=7, started_at=NOW,
                                                 latest_checkpoint={"step": 5, "world_size": 2})]
    for _ in range(2):  # made, then kept
        assert jobs.page(records, 12, 2, 4) == pydantic_page(records, 12, 2, 4)
    assert jobs.page([], 0, 50, 0) == pydantic_page([], 0, 50, 0)
    assert json.loads(jobs.page(records, 12, 2, 4))["items"][0]["spec"]["checkpoint"]["async"]


def test_a_job_that_changed_is_written_anew():
    jobs = JobJson()
    before = record("j-000000000001", state=JobState.RUNNING, step=3)
    jobs.of(before)
    for change in ({"step": 4}, {"state": JobState.SUCCEEDED}, {"error": "boom"},
                   {"latest_checkpoint": {"step": 3, "world_size": 1}}, {"workers": 1}):
        after = dataclasses.replace(before, **change)
        assert jobs.of(after) == JobPublic.model_validate(after).model_dump_json(
            by_alias=True).encode()
        assert jobs.of(after) != jobs.of(before)
