"""Following a job's log: server-sent events that end when the job does."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from api.server.app import create_app
from api.client import BrigadeClient
from api.schemas.jobs import JobProgress, LogLine
from service.states import JobState
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer
from tests.api.test_jobs import SPEC

WITHIN_S = 10.0  # a line appended must reach a follower this soon, the job still running
TIMED_OUT = object()


@pytest.fixture(scope="module")
def long_streams(tmp_path_factory, ray_cluster):
    """A server whose streams stay open 60 s (the module's server closes them after 1 s):
    a line that reaches a follower within WITHIN_S came over an open stream, not at its
    close, nor at the job's end (the test ends the job only once every line arrived)."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("long-streams"), stream_max_s=60.0)
    with LiveServer(create_app(supervisor)) as live:
        yield live.url, supervisor.store
    supervisor.stop()
    supervisor.store.dispose()


@pytest.mark.ray
def test_follow_streams_each_line_while_the_job_runs_and_ends_with_the_job(long_streams):
    url, store = long_streams
    with BrigadeClient(url, ADMIN_KEY, timeout=10) as client:
        job = client.submit(SPEC)
    store.transition(job.id, JobState.STARTING, reason="admitted", workers=1, attempt=1)
    store.transition(job.id, JobState.RUNNING, reason="started")
    store.append_log(job.id, ["before"])
    arrived: queue.Queue = queue.Queue()

    def follow():
        try:
            with BrigadeClient(url, ADMIN_KEY, timeout=10) as follower:
                for event in follower.follow(job.id):
                    arrived.put(event)
        except Exception as e:  # the test reads it below
            arrived.put(e)
        arrived.put(None)  # the stream is over

    def next_line(appended_at: float) -> str:
        """The next log line that arrives, within WITHIN_S, the job still RUNNING meanwhile."""
        while True:
            try:
                event = arrived.get(timeout=max(0.0, appended_at + WITHIN_S - time.monotonic()))
            except queue.Empty:
                event = TIMED_OUT
            if event is TIMED_OUT:
                pytest.fail(f"no log line reached the follower within {WITHIN_S} s of its append, "
                            f"the job {store.get_job(job.id).state.value} all along: the stream holds "
                            "lines back", pytrace=False)
            assert event is not None and not isinstance(event, Exception), event
            if isinstance(event, LogLine):
                assert store.get_job(job.id).state is JobState.RUNNING  # it ends only below
                return event.line
            assert event.state is JobState.RUNNING, event  # a progress event, the job running

    reader = threading.Thread(target=follow, name="follower", daemon=True)
    try:
        reader.start()
        assert next_line(time.monotonic()) == "before"
        for batch in (["during 1", "during 2"], ["during 3"]):
            appended = time.monotonic()
            store.append_log(job.id, batch)
            assert [next_line(appended) for _ in batch] == batch
    finally:  # the job ends after every line arrived (or the test failed): the stream ends
        store.transition(job.id, JobState.SUCCEEDED, reason="test: done")
        reader.join(timeout=WITHIN_S)
    rest = []
    while not arrived.empty():
        rest.append(arrived.get())
    assert rest[-1] is None and rest[-2] == JobProgress(state=JobState.SUCCEEDED, step=0, steps=5), rest
    assert not [e for e in rest if isinstance(e, LogLine)], rest  # every line came before the end


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
