"""The soak's view of `brigade serve`: real HTTP that waits out the server's
own restarts (a connection refused or a 5xx is retried, within a bound), so
that the threads that submit, sample and inject faults go on while the chaos
thread has the server down. A submit carries an `Idempotency-Key`: a retry
after a lost answer returns the job the first attempt made, never a second.
Given several replicas' URLs it goes to the next one when one fails, as a
load balancer in front of them would."""

from __future__ import annotations

import time

import httpx

RETRY_FOR_S = 120.0  # longer than a restart of the server (its start waits for Ray)


class Unavailable(RuntimeError):
    pass


class SoakClient:
    def __init__(self, url: str | list[str], key: str):
        urls = [url] if isinstance(url, str) else list(url)
        self.clients = [httpx.Client(base_url=u, headers={"Authorization": f"Bearer {key}"}, timeout=30)
                        for u in urls]
        self.http = self.clients[0]  # the one spoken to now

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def request(self, method: str, path: str, *, retry_for_s: float = RETRY_FOR_S, **kwargs):
        deadline = time.monotonic() + retry_for_s
        while True:
            try:
                r = self.http.request(method, path, **kwargs)
                if r.status_code < 500 and r.status_code != 429:
                    return r
                why = f"{r.status_code} {r.text[:200]}"
            except httpx.TransportError as e:  # the server is down (restarting) or busy
                why = repr(e)
                self._next()
            if time.monotonic() > deadline:
                raise Unavailable(f"{method} {path}: {why}")
            time.sleep(0.3)

    def _next(self) -> None:
        """Another replica, where there are several."""
        self.http = self.clients[(self.clients.index(self.http) + 1) % len(self.clients)]

    def get(self, path: str, **params):
        r = self.request("GET", path, params=params)
        assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text}"
        return r.json()

    def post(self, path: str, body: dict | None = None, *, idempotency_key: str | None = None) -> dict:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        r = self.request("POST", path, json=body, headers=headers)
        assert r.status_code in (200, 201, 202), f"POST {path}: {r.status_code} {r.text}"
        return r.json()

    def jobs(self, states: str | None = None) -> list[dict]:
        """Every job (the admin: every tenant's), page by page."""
        out: list[dict] = []
        while True:
            params: dict = {"limit": 500, "offset": len(out)}
            if states:
                params["state"] = states
            page = self.get("/v1/jobs", **params)
            out += page["items"]
            if len(out) >= page["total"] or not page["items"]:
                return out
