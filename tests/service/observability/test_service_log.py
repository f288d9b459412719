"""The service's logging: text or one JSON object a line, at the level set;
a record about a job names it and its tenant, from `extra` or from the
context its runner's thread runs in; messages stay one printable line."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest

from service.observability import log_config as service_log


@pytest.fixture
def captured():
    stream = io.StringIO()
    yield stream
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, service_log._MARK, False)]:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)


def records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_records_name_the_job_from_the_runners_context(captured):
    service_log.configure("info", "json", stream=captured)
    log = logging.getLogger("service.run.runner")

    def runner():
        with service_log.about_job("j-1", "team-a"):
            log.info("job %s: RUNNING -> SUCCEEDED", "j-1")

    thread = threading.Thread(target=runner)
    thread.start()
    thread.join()
    log.debug("not at INFO")
    log.warning("two\nlines", extra={"job_id": "j-2", "tenant": "team-b"})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("no job")
    first, second, third = records(captured)
    assert (first["job_id"], first["tenant"], first["level"]) == ("j-1", "team-a", "INFO")
    assert first["message"] == "job j-1: RUNNING -> SUCCEEDED" and first["logger"] == "service.run.runner"
    assert (second["job_id"], second["message"]) == ("j-2", "two\\nlines")
    assert "job_id" not in third and "ValueError: boom" in third["exception"]


def test_text_records_and_a_second_configure_replaces_the_first(captured):
    service_log.configure("INFO", "json", stream=io.StringIO())
    service_log.configure("WARNING", "text", stream=captured)
    log = logging.getLogger("service.supervisor")
    log.info("dropped")
    with service_log.about_job("j-3", None):
        log.warning("restarting")
    assert captured.getvalue().count("\n") == 1
    assert captured.getvalue().rstrip().endswith("WARNING service.supervisor: restarting [job=j-3 tenant=-]")
    assert sum(getattr(h, service_log._MARK, False) for h in logging.getLogger().handlers) == 1


def test_the_settings_refuse_an_unknown_level_or_format():
    from pydantic import ValidationError

    from service.settings import Settings

    assert Settings(log_level="debug", log_format="json").log_format == "json"
    for bad in ({"log_level": "loud"}, {"log_format": "xml"}):
        with pytest.raises(ValidationError):
            Settings(**bad)
