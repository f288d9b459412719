"""`brigade serve` in a subprocess on a free loopback port, for the benchmarks
that go through the real service (recovery, API latency): its own local Ray
head, SQLite and checkpoint storage under a temporary data dir."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench.report import OUT

KEY = "bench-admin-key-0123456789"


def wait_for(what: str, check, timeout_s: float, poll_s: float = 0.1):
    """`check()`'s first truthy value, polled every `poll_s`; TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(poll_s)


def wait_healthy(what: str, proc: subprocess.Popen, url: str, log: Path, *,
                 timeout_s: float, poll_s: float) -> None:
    """Until `url`/healthz answers 200; RuntimeError (with the log's tail) if `proc` exits first
    or it does not come up within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up in {timeout_s:g} s")
        time.sleep(poll_s)


class BrigadeServer:
    def __init__(self, env: dict[str, str] | None = None, ray_cpus: int = 4):
        OUT.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(tempfile.mkdtemp(prefix="serve-", dir=OUT))
        from workers.engine.distributed import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, BRIGADE_ADMIN_KEY=KEY, BRIGADE_RAY_NUM_CPUS=str(ray_cpus),
                        BRIGADE_POLL_INTERVAL_S="0.2", BRIGADE_SECRET="bench-secret-0123456789abcdef",
                        **(env or {}))
        self.proc: subprocess.Popen | None = None
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=60)
        self.log = self.data_dir / "serve.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.data_dir.resolve() / 'brigade.db'}"

    def __enter__(self) -> BrigadeServer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port), "--data-dir", str(self.data_dir)],
                stdout=log, stderr=subprocess.STDOUT, env=self.env,
            )
        wait_healthy("brigade serve", self.proc, self.url, self.log, timeout_s=180, poll_s=0.3)
        return self

    def __exit__(self, *exc) -> None:
        self.http.close()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        from service.run.ray_cluster import LocalRayCluster

        LocalRayCluster(str(self.data_dir)).stop()  # in case the server could not
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def get(self, path: str, **params):
        r = self.http.get(path, params=params)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: dict | None = None) -> dict:
        r = self.http.post(path, json=body)
        if r.status_code >= 400:
            raise RuntimeError(f"POST {path}: {r.status_code} {r.text}")
        return r.json()


def parse_time(value: str) -> float:
    """A timestamp of the API (ISO 8601) as Unix seconds; naive means UTC."""
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()
