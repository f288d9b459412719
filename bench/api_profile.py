"""Where a request's time goes in `brigade serve`: py-spy samples of the
server under one client, each sample put in one part.

    .venv/bin/python -m bench.api_profile [--seconds 8] [--route get|list]

py-spy (`--gil`: only the thread that holds the interpreter, which is what
one uvicorn process's throughput is made of) records the server's stacks
while one client sends back-to-back requests; each sample goes to the first
part, in the order of PARTS, that one of its frames belongs to (what matches
none of the earlier parts, a route's own lines included, counts as routing);
a part's share of the samples times the server's CPU time a request without
the profiler is its cost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

# (part, pattern over a frame "function (file:line)"): the first that any frame matches
PARTS = (
    ("access log (uvicorn's logger, its filter, the handler)", r"\(logging/|access_log\.py"),
    ("request metrics (prometheus)", r"prometheus_client/"),
    ("rate limiter", r"rate_limit\.py"),
    ("auth and the key lookup", r"tenant_for_key|_current_tenant|HTTPBearer|key_cache\.py"),
    ("the job read: session, transaction, query", r"JobStore\.|_owned_job|sqlalchemy/"),
    ("HTTP parsing and writing (uvicorn's h11 or httptools)",
     r"\(h11/|H11Protocol|RequestResponseCycle\.send|httptools|HttpToolsProtocol"),
    ("serialisation (pydantic, JSON)", r"serialize_response|model_validate|model_copy|"
                                       r"model_dump|jsonable_encoder|pydantic|render|"
                                       r"responses\.py|job_json\.py"),
    ("thread pool hops (anyio)", r"anyio/|run_in_threadpool|threading\.py|queue\.py"),
    ("dependencies and validation (FastAPI)", r"fastapi/dependencies/"),
    ("routing and middleware (Starlette, FastAPI)", r"fastapi/|starlette/|body_limit\.py"),
    ("the event loop, the rest", r""),
)

METRICS = PARTS[1][0]
REQUEST_THREADS = ("MainThread", "AnyIO worker thread")


def parts_of(raw: Path) -> tuple[Counter, int]:
    """Samples per part in a py-spy `--format raw` file (request threads only)."""
    found: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue  # a frame name that held a line break: its tail, with no count, is not a sample
        thread, *frames = stack.split(";")
        if not frames or not thread.endswith(REQUEST_THREADS):
            continue  # the control plane's own threads (the supervisor's loop), not a request
        n = int(count)
        total += n
        if "request_metrics.py" in frames[-1]:  # its own lines, not what it wraps
            found[METRICS] += n
            continue
        for part, pattern in PARTS:
            if any(re.search(pattern, f) for f in frames):
                found[part] += n
                break
    return found, total


def table(found: Counter, total: int, cpu_ms: float) -> list[str]:
    """Each part's share, and that share of the server's CPU time a request."""
    lines = ["| part | share of samples | ~us of server CPU a request |", "| --- | --- | --- |"]
    for part, _ in PARTS:
        share = found.get(part, 0) / max(1, total)
        lines.append(f"| {part} | {share * 100:.1f}% | {share * cpu_ms * 1e3:.0f} |")
    return lines


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_ms(url: str, pid: int, auth: dict, paths, seconds: float) -> tuple[float, float]:
    """(requests/s, server CPU ms a request) of one client for `seconds`, unprofiled."""
    from bench.api_client import load_round

    before = cpu_seconds(pid)
    result = asyncio.run(load_round(url, auth, paths, 1, seconds, seed=1))
    return result.rate, (cpu_seconds(pid) - before) * 1e3 / len(result.latencies)


def have_py_spy() -> bool:
    return Path(spy_binary()).exists()


def spy_binary() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def profile(url: str, pid: int, auth: dict, paths, seconds: float, out: Path) -> tuple[Counter, int]:
    """py-spy the server `pid` while one client loads it for `seconds`."""
    from bench.api_client import load_round

    spy = subprocess.Popen([spy_binary(), "record", "--pid", str(pid), "--rate", "400", "--gil",
                            "--threads", "--format", "raw", "--output", str(out), "--duration",
                            str(int(seconds)), "--nonblocking"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached
    asyncio.run(load_round(url, auth, paths, 1, seconds - 1, seed=7))
    spy.wait(timeout=60)
    return parts_of(out)


def main() -> None:
    from bench.api_store import NO_RATE_LIMIT, fill_store
    from bench.server import BrigadeServer

    parser = argparse.ArgumentParser(prog="python -m bench.api_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--route", choices=("get", "list"), default="get")
    args = parser.parse_args()
    server = BrigadeServer(env=NO_RATE_LIMIT)
    key, ids = fill_store(server, 200)
    auth = {"Authorization": f"Bearer {key}"}
    paths = ((lambda rng: f"/v1/jobs/{rng.choice(ids)}") if args.route == "get"
             else (lambda _rng: "/v1/jobs?limit=50"))
    with server:
        assert server.proc is not None
        rate, cpu_ms = server_cpu_ms(server.url, server.proc.pid, auth, paths, 4)
        found, total = profile(server.url, server.proc.pid, auth, paths, args.seconds,
                               server.data_dir / "spy.txt")
        raw = server.data_dir / "spy.txt"
        shutil.copyfile(raw, Path("bench/out") / f"api_profile_{args.route}.txt")
    print(f"{args.route}: {rate:.0f} requests/s without the profiler ({1e3 / rate:.2f} ms a "
          f"request, {cpu_ms:.2f} ms of the server's CPU); {total} samples")
    print("\n".join(table(found, total, cpu_ms)))


if __name__ == "__main__":
    main()
