"""Following a job's log: server-sent events that end when the job does."""

from __future__ import annotations

import threading
import time

from api.schemas import JobProgress, LogLine
from service.states import JobState
from tests.api.test_jobs import SPEC


def test_follow_streams_lines_as_they_come_and_ends_with_the_job(client, store):
    job = client.submit(SPEC)
    store.append_log(job.id, ["before"])

    def later():
        time.sleep(0.3)
        store.append_log(job.id, ["during 1", "during 2"])
        time.sleep(0.2)
        client.cancel(job.id)

    writer = threading.Thread(target=later)
    writer.start()
    started = time.monotonic()
    events = list(client.follow(job.id))
    writer.join()
    assert time.monotonic() - started < 10
    lines = [e.line for e in events if isinstance(e, LogLine)]
    assert lines == ["before", "during 1", "during 2"]
    progress = [e for e in events if isinstance(e, JobProgress)]
    assert progress[0] == JobProgress(state=JobState.QUEUED, step=0, steps=5)
    assert progress[-1].state is JobState.CANCELLED and events[-1] is progress[-1]


def test_follow_of_a_finished_job_gives_its_lines_and_ends(client, store):
    job = client.submit(SPEC)
    store.append_log(job.id, ["a", "b"])
    client.cancel(job.id)
    assert [line.line for line in client.logs(job.id, follow=True)] == ["a", "b"]


def test_the_stream_is_server_sent_events(http, client, store):
    job = client.submit(SPEC)
    store.append_log(job.id, ["x"])
    client.cancel(job.id)
    with http.stream("GET", f"/v1/jobs/{job.id}/logs", params={"follow": "true"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    first_id = store.logs(job.id)[0].id
    assert text.startswith(f"event: log\nid: {first_id}\ndata: ")
    assert text.endswith("\n\n") and "event: end\n" in text


def test_last_event_id_resumes_after_that_line(http, client, store):
    job = client.submit(SPEC)
    store.append_log(job.id, ["1", "2", "3"])
    client.cancel(job.id)
    second = store.logs(job.id)[1].id
    with http.stream("GET", f"/v1/jobs/{job.id}/logs?follow=true",
                     headers={"Last-Event-ID": str(second - 1)}) as response:
        text = response.read().decode()
    assert '"line":"1"' not in text and '"line":"2"' in text and '"line":"3"' in text


def test_follow_reconnects_when_the_server_closes_the_stream(client, store, supervisor):
    """The test server closes a stream after stream_max_s (1 s): the client
    picks it up again after the last line, missing and repeating none."""
    assert supervisor.settings.stream_max_s == 1.0
    job = client.submit(SPEC)

    def later():
        for i in range(5):
            store.append_log(job.id, [f"line {i}"])
            time.sleep(0.6)
        client.cancel(job.id)

    writer = threading.Thread(target=later)
    writer.start()
    lines = [line.line for line in client.logs(job.id, follow=True)]
    writer.join()
    assert lines == [f"line {i}" for i in range(5)]
