"""`brigade serve` in a subprocess, spoken to over real HTTP: shared by the
end-to-end tests (its own data dir; by default its own local Ray head and
SQLite, or an existing Ray cluster and another database).

Most modules' servers join the session's Ray cluster (tests/conftest.py
`shared_ray`) rather than start a head of their own:

    Server(data_dir, ray_address=shared_ray, shared=True)

and what such a server leaves on it (its groups live on when it stops, as a
control plane's successor would want them) is removed by `stop()`, so the
tests after it find the cluster whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.ray_state import ClusterState
from workers.engine.distributed import free_port

KEY = "e2e-admin-key-0123456789"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "PRUNED"}


class Server:
    """`brigade serve` on a free loopback port; restartable on the same data dir.
    `ray_address` joins that cluster instead of starting one; `env` adds to
    (or overrides) the server's environment, e.g. BRIGADE_DATABASE_URL;
    `own_group` starts it in a process group of its own (signalled as one)."""

    def __init__(self, data_dir: Path, *, ray_address: str | None = None,
                 env: dict[str, str] | None = None, own_group: bool = False, shared: bool = False):
        self.data_dir = data_dir
        self.ray_address = ray_address
        # `ray_address` is this test process's own cluster (it is connected to it): what the
        # server leaves there is removed at stop()
        self.shared = shared
        self._found: ClusterState | None = None  # what the cluster held before it started
        self.extra_env = dict(env or {})
        self.own_group = own_group
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.started = False
        self._listen_on(free_port())

    def _listen_on(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=30)

    def start(self) -> Server:
        """Start (or restart) the server and wait for /healthz. Its first start
        moves to another port if the one chosen was taken meanwhile; a restart
        keeps the port, as clients know it."""
        if self.shared and self._found is None:
            self._found = ClusterState.now()
        if self.http.is_closed:  # stopped before: its client too
            self._listen_on(self.port)
        for _ in range(3):
            if self._start_once():
                self.started = True
                return self
            assert not self.started, f"brigade serve could not listen again: {self.log_tail()}"
            self.http.close()
            self._listen_on(free_port())
        raise AssertionError(f"brigade serve found no free port: {self.log_tail()}")

    def _start_once(self) -> bool:
        """True once it answers; False if it exited because its port was taken."""
        env = dict(os.environ, BRIGADE_ADMIN_KEY=KEY, BRIGADE_RAY_NUM_CPUS="4",
                   BRIGADE_POLL_INTERVAL_S="0.2", BRIGADE_SECRET="e2e-secret-0123456789abcdef",
                   # No Hugging Face export of every job that succeeds (a Ray task that imports
                   # torch, seconds of CPU each): the modules that check that export ask for it.
                   BRIGADE_EXPORT_ON_SUCCESS="")
        env.update(self.extra_env)
        self.log_path = self.data_dir / f"serve-{time.time():.0f}.log"
        log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--data-dir", str(self.data_dir)]
        if self.ray_address:
            cmd += ["--ray-address", self.ray_address]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=self.own_group)
        log.close()
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                if "address already in use" in self.log_tail().lower():
                    return False
                raise AssertionError(f"brigade serve exited: {self.log_tail()}")
            try:
                # the server's client: a new one each poll costs ~20 ms of CPU (its TLS context)
                if self.http.get("/healthz", timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"brigade serve did not come up: {self.log_tail()}"
            time.sleep(0.3)

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log, for an assertion message."""
        try:
            return f"{self.log_path}:\n" + self.log_path.read_text(errors="replace")[-chars:]
        except (OSError, AttributeError):
            return "(no log)"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.http.close()
        if self.shared and self._found is not None:
            _clean_shared_cluster(self.ray_address, self._found)
        if not self.ray_address:
            from service.run.ray_cluster import LocalRayCluster

            LocalRayCluster(str(self.data_dir)).stop()  # in case the server could not

    # -- the REST contract --------------------------------------------------------

    def submit(self, spec: dict) -> dict:
        r = self.http.post("/v1/jobs", json=spec)
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, job_id: str) -> dict:
        r = self.http.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, job_id: str, until, timeout_s: float = 240, every_s: float = 0.2) -> dict:
        """Poll the job every `every_s` until `until(job)`; fail on a final
        state or the timeout (with the end of the server's log)."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if until(job):
                return job
            assert job["state"] not in TERMINAL, (
                f"job ended {job['state']}: {job['error']} (restarts {job['restarts']}, "
                f"preemptions {job['preemptions']}); its events:\n{self.event_lines(job_id)}")
            assert time.monotonic() < deadline, f"timed out waiting; job is {job}\n{self.log_tail()}"
            time.sleep(every_s)

    def event_lines(self, job_id: str) -> str:
        """The job's events, a line each (what a failed wait shows)."""
        return "\n".join(f"{e['time']} {e['from_state']} -> {e['to_state']}: {e['reason']}"
                         for e in self.get(f"/v1/jobs/{job_id}/events"))

    def get(self, path: str):
        r = self.http.get(path)
        assert r.status_code == 200, r.text
        return r.json()


def _clean_shared_cluster(address: str, found: ClusterState) -> None:
    """Remove what a stopped server left on this process's cluster: its actors (the
    service's namespace: its groups' ranks, its pool's, its fork servers'), then the
    placement groups made since it started; and wait for the CPUs to be free again."""
    import ray
    from ray.util.state import list_actors

    from service.run.ray_cluster import NAMESPACE

    alive = [("state", "=", "ALIVE"), ("ray_namespace", "=", NAMESPACE)]
    for actor in list_actors(address=address, filters=alive, limit=10_000, raise_on_missing_output=False):
        if actor.name:
            try:
                ray.kill(ray.get_actor(actor.name, namespace=NAMESPACE))
            except ValueError:
                pass  # gone meanwhile
    found.restore(grace_s=0)  # its groups live on by design: nothing to wait for


def spec(steps: int, workers=2, **extra) -> dict:
    """A tiny job: 2 layers, d_model 48, the builtin data, a global batch of 12."""
    return {
        "name": "e2e",
        "workers": workers,
        "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32},
        "data": {"source": "builtin"},
        "train": {"steps": steps, "global_batch_size": 12, "lr": 0.003},
        "checkpoint": {"every_steps": 10, "keep_last": 3},
        **extra,
    }


def losses_by_step(server: Server, job_id: str) -> dict[int, float]:
    return {row["step"]: row["loss"] for row in server.get(f"/v1/jobs/{job_id}/metrics")}


def uninterrupted(job: dict) -> dict[int, float]:
    """The job's loss curve trained uninterrupted in this process, a world of one:
    the curve at every world size (within round-off: tests/workers/cluster/
    test_ray_engine.py), without a job's ranks and their start-up on the cluster."""
    from workers.engine.local import run_single_process
    from workers.schema import JobSpec

    return {row["step"]: row["loss"] for row in run_single_process(JobSpec.model_validate(job))}
