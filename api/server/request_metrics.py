"""Request counts and latency by route template, method and status
(`brigade_http_requests_total`, `brigade_http_request_duration_seconds`).

The route is the template that matched (`/v1/jobs/{job_id}`), never the
path itself, so ids do not each make a series; a request no route matched
counts under "unmatched". A pure ASGI middleware: a streamed answer (a
followed log) is timed until its last byte."""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram

REQUESTS = Counter("brigade_http_requests", "HTTP requests answered.",
                   ["method", "route", "status"], registry=None)
LATENCY = Histogram("brigade_http_request_duration_seconds", "Time to answer an HTTP request.",
                    ["method", "route", "status"], registry=None,
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60))
HTTP_METRICS = (REQUESTS, LATENCY)


class RequestMetrics:
    def __init__(self, app):
        self.app = app
        # (method, route, status) -> its counter and histogram: `labels()` looks
        # them up under a lock and from keyword arguments, each request
        self._series: dict[tuple[str, str, str], tuple] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            key = (scope["method"], route, str(status[0]))
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = (REQUESTS.labels(*key), LATENCY.labels(*key))
            series[0].inc()
            series[1].observe(time.perf_counter() - started)
