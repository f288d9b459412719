"""The client's retries against a real HTTP server (a tiny one in this test,
on a loopback port) that answers 429 or 503 first, or is not up yet: calls
that may be sent twice are retried after Retry-After or a bounded backoff;
one that may not (suspend) is never sent twice."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from api.client import BrigadeClient, BrigadeError, Retry
from workers.engine.distributed import free_port
from workers.schema import JobSpec

SPEC = {"name": "tiny", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}
JOB = {"id": "j-000000000001", "tenant": "admin", "name": "tiny", "state": "QUEUED",
       "spec": JobSpec.model_validate(SPEC).to_json(), "created_at": "2026-01-01T00:00:00Z"}


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next of `script` ((status, headers),
    the last repeated), recording what it was sent."""

    def __init__(self, script, port: int = 0):
        super().__init__(("127.0.0.1", port), _Handler)
        self.script, self.seen = list(script), []
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    def _answer(self):
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        server.seen.append((self.command, self.path, self.headers.get("Idempotency-Key"),
                            time.monotonic()))
        status, headers = server.script.pop(0) if len(server.script) > 1 else server.script[0]
        body = json.dumps(JOB if status < 300 else {"error": {"message": f"busy ({status})"}}).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


FAST = Retry(attempts=5, base_s=0.05, max_wait_s=1.0)


def test_a_read_waits_as_retry_after_says_then_succeeds():
    with Scripted([(429, {"Retry-After": "0.3"}), (503, {"Retry-After": "0"}), (200, {})]) as server, \
            BrigadeClient(server.url, "k", retry=FAST) as client:
        assert client.get("j-000000000001").id == "j-000000000001"
    times = [t for *_, t in server.seen]
    assert len(times) == 3 and times[1] - times[0] >= 0.29


def test_a_submit_is_retried_with_the_same_idempotency_key():
    with Scripted([(429, {"Retry-After": "0.05"}), (201, {})]) as server, \
            BrigadeClient(server.url, "k", retry=FAST) as client:
        client.submit(SPEC)
    keys = [key for method, _, key, _ in server.seen]
    assert [m for m, *_ in server.seen] == ["POST", "POST"] and keys[0] and keys[0] == keys[1]


def test_retry_after_is_bounded_and_attempts_are_too():
    retry = Retry(attempts=3, base_s=0.01, max_wait_s=0.1)
    with Scripted([(429, {"Retry-After": "3600"})]) as server, \
            BrigadeClient(server.url, "k", retry=retry) as client:
        started = time.monotonic()
        with pytest.raises(BrigadeError) as caught:
            client.get("j-000000000001")
        assert time.monotonic() - started < 1.0
    assert caught.value.status == 429 and len(server.seen) == 3


def test_a_call_that_may_not_be_sent_twice_is_not():
    with Scripted([(503, {"Retry-After": "0"}), (200, {})]) as server, \
            BrigadeClient(server.url, "k", retry=FAST) as client:
        with pytest.raises(BrigadeError) as caught:
            client.suspend("j-000000000001")
    assert caught.value.status == 503 and len(server.seen) == 1


def test_a_server_not_up_yet_is_waited_for():
    port = free_port()
    servers = []
    late = threading.Timer(0.3, lambda: servers.append(Scripted([(200, {})], port=port).__enter__()))
    late.start()
    try:
        with BrigadeClient(f"http://127.0.0.1:{port}", "k",
                           retry=Retry(attempts=8, base_s=0.1, max_wait_s=0.4)) as client:
            assert client.get("j-000000000001").state.value == "QUEUED"
    finally:
        late.join()
        for server in servers:
            server.__exit__()
