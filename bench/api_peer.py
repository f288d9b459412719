"""The peer of bench.api: a bare FastAPI app on SQLAlchemy and SQLite, one
route that reads one row, served the way `brigade serve` serves (one uvicorn
process, the same `uvicorn.Config` arguments (api.server.listener's SERVE_OPTIONS: uvloop and
httptools), a listener bound the same way
with TCP_NODELAY, an access log line a request to a file).

    .venv/bin/python -m bench.api_peer --database FILE --port PORT

It reads the `jobs` table of a copy of the store Brigade answers from (the
same rows: a job's columns and its stored spec), reflected, with no schema of
ours: `GET /v1/jobs/{job_id}` opens a session, selects the row and returns it
as a dict, which FastAPI encodes as JSON. No auth, no rate limit, no metrics:
what a request costs the framework, the driver and the database alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.server import wait_healthy


def build_app(database: str):
    from fastapi import FastAPI, HTTPException
    from sqlalchemy import MetaData, Table, create_engine, select
    from sqlalchemy.orm import Session

    engine = create_engine(f"sqlite:///{database}", connect_args={"check_same_thread": False})
    jobs = Table("jobs", MetaData(), autoload_with=engine)
    app = FastAPI()

    @app.get("/healthz")
    def healthz() -> dict:
        return {"ok": True}

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str) -> dict:
        with Session(engine) as session:
            row = session.execute(select(jobs).where(jobs.c.id == job_id)).mappings().one_or_none()
        if row is None:
            raise HTTPException(404, "job not found")
        return dict(row)

    return app


def serve(database: str, port: int, log_file: str) -> None:
    import uvicorn

    from api.server.listener import SERVE_OPTIONS, bind_listener

    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    listener = bind_listener("127.0.0.1", port)
    server = uvicorn.Server(uvicorn.Config(build_app(database), **SERVE_OPTIONS, log_level="info"))
    server.run(sockets=[listener])


class PeerServer:
    """`python -m bench.api_peer` in a subprocess, up until the context ends."""

    def __init__(self, database: Path, log: Path):
        from workers.engine.distributed import free_port

        self.database, self.log = database, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> PeerServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.api_peer", "--database", str(self.database),
             "--port", str(self.port), "--log", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=open(self.log.with_suffix(".err"), "wb"),
            env=dict(os.environ))
        wait_healthy("bench.api_peer", self.proc, self.url, self.log.with_suffix(".err"),
                     timeout_s=60, poll_s=0.2)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.api_peer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", required=True, help="a SQLite file with a `jobs` table")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", default=os.devnull, help="the access log")
    args = parser.parse_args()
    serve(args.database, args.port, args.log)


if __name__ == "__main__":
    main()
