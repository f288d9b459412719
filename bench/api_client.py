"""The load generator of bench.api: a raw HTTP/1.1 client on asyncio streams,
one keep-alive connection per simulated client.

httpx costs the client ~0.4 ms of CPU a request, on the same 2 cores as the
server it measures; this one writes a prebuilt request and reads the answer
by its Content-Length (or its chunks), a few tens of microseconds. The same
client measures the peer and Brigade, and its own CPU time is reported.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Connection:
    """One keep-alive connection; requests go one after another on it."""

    def __init__(self, host: str, port: int, headers: dict[str, str]):
        self.host, self.port = host, port
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    async def get(self, path: str) -> tuple[int, bytes]:
        """(status, body) of `GET path`."""
        assert self._reader is not None and self._writer is not None
        self._writer.write(f"GET {path} HTTP/1.1\r\n{self._head}\r\n".encode())
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length, chunked = None, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            return status, await self._chunks()
        return status, await self._reader.readexactly(length or 0)

    async def _chunks(self) -> bytes:
        assert self._reader is not None
        parts = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append(await self._reader.readexactly(size + 2))
            if size == 0:
                return b"".join(parts)


@dataclass
class Round:
    """What one round of load measured."""

    latencies: list[float] = field(default_factory=list)  # seconds, each request
    codes: dict[int, int] = field(default_factory=dict)
    wall_s: float = 0.0
    client_cpu_s: float = 0.0  # this process's CPU time during the timed part

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall_s if self.wall_s else 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for code, n in self.codes.items() if code >= 500)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def load_round(url: str, headers: dict[str, str], paths: Callable[[random.Random], str],
                     clients: int, seconds: float, seed: int, warmup: int = 3,
                     think_s: float = 0.0) -> Round:
    """`clients` connections, each sending GETs of `paths(rng)` back to back
    (or, with `think_s`, after a random pause of mean `think_s`: an open-ish
    load) for `seconds`, all starting the timed part together after `warmup`
    untimed requests each."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    result = Round()
    gate, ready = asyncio.Event(), [0]
    stop_at = [0.0]

    async def client(i: int) -> None:
        rng = random.Random(seed * 100_003 + i)
        conn = await Connection(host, int(port), headers).open()
        try:
            for _ in range(warmup):
                await conn.get(paths(rng))
            ready[0] += 1
            if ready[0] == clients:
                stop_at[0] = time.perf_counter() + seconds
                gate.set()
            await gate.wait()
            if think_s:
                await asyncio.sleep(rng.random() * 2 * think_s)
            while time.perf_counter() < stop_at[0]:
                path = paths(rng)
                start = time.perf_counter()
                status, _ = await conn.get(path)
                result.latencies.append(time.perf_counter() - start)
                result.codes[status] = result.codes.get(status, 0) + 1
                if think_s:
                    await asyncio.sleep(rng.expovariate(1 / think_s))
        finally:
            conn.close()

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    await gate.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*tasks)
    result.wall_s = time.perf_counter() - t0
    result.client_cpu_s = time.process_time() - cpu0
    return result
