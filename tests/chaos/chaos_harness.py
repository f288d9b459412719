"""What the chaos scenarios share: one `brigade serve` (on the session's Ray
cluster; its own SQLite and checkpoint storage), the job spec every scenario runs, a probe of
Ray's state for leaked actors and placement groups, and fast waits.

Every scenario is a real fault on real processes: signals to the rank
actors' and the server's processes, bytes flipped in a real shard file, the
checkpoint directory of a job swapped for a plain file on the real disk, a
real full disk (a small tmpfs mounted where a job's checkpoints go), the
leading replica of several SIGKILLed (`kill_leader`, on replicas of
tests/e2e/replica_harness.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.ci import skip_or_fail
from tests.e2e.replica_harness import FAILOVER_S, Replica, Replicas
from tests.e2e.serve_harness import Server

INTERVAL = 10  # checkpoint.every_steps of every scenario
STEPS = 80
PG_TIMEOUT_S = 5  # a hung rank is found within this (+ 10 s), and it bounds a collective
ENV = {
    "BRIGADE_RAY_NUM_CPUS": "4",  # two jobs of two ranks at once
    "BRIGADE_POLL_INTERVAL_S": "0.1",
    "BRIGADE_RESTART_BACKOFF_S": "1.0",  # RESTARTING lasts >= 1 s: a controller kill can land in it
    # Warm rank processes for two 2-rank jobs at once: two jobs submitted together start
    # alike (one on warm ranks, one cold, the first would finish before the other got going)
    "BRIGADE_RANK_POOL_SIZE": "4",
    "BRIGADE_PG_TIMEOUT_S": str(PG_TIMEOUT_S),
    "BRIGADE_RAY_DASHBOARD": "true",  # the leak checks read Ray's public state API
}


def chaos_spec(name: str, steps: int = STEPS, *, in_place: bool = True, **extra) -> dict:
    """A tiny job that checkpoints every INTERVAL steps; the same engine
    config for every scenario (the name and max_restarts are not part of it,
    nor the in-memory snapshots: the same math), so one uninterrupted
    reference run serves them all. With recovery in place on (the product's
    default) a lost rank is replaced in place; `in_place=False` (snapshots
    off) takes the whole-group restart from disk, the path a scenario about
    a torn save, a hung rank or a restart itself is about, with blocking saves
    (what those scenarios' bounds are written for: an async save's failure is
    told at the next save, and a kill can cost the save in flight too)."""
    if not in_place:
        extra["checkpoint"] = {"every_steps": INTERVAL, "keep_last": 3, "async": False,
                               **extra.get("checkpoint", {}), "memory_every_steps": 0}
    return {
        "name": name,
        "workers": 2,
        "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "vocab_size": 256},
        "data": {"source": "builtin"},
        "train": {"steps": steps, "global_batch_size": 4, "lr": 0.003, "warmup_steps": 5},
        "checkpoint": {"every_steps": INTERVAL, "keep_last": 3},
        "max_restarts": 4,
        **extra,
    }


def start_server(data_dir: Path, ray_address: str) -> Server:
    """A server on the session's Ray cluster (tests/conftest.py `shared_ray`)."""
    return Server(data_dir, env=ENV, ray_address=ray_address, shared=True).start()


def wait_for(server: Server, job_id: str, until, timeout_s: float = 180, every_s: float = 0.05) -> dict:
    """Poll the job fast (a fault must land inside a short window) until `until(job)`."""
    return server.wait(job_id, until, timeout_s=timeout_s, every_s=every_s)


def rank_pids(server: Server, job_id: str) -> list[int]:
    return [w["pid"] for w in server.get(f"/v1/jobs/{job_id}/workers")]


def checkpoint_dir(server: Server, job_id: str) -> Path:
    return server.data_dir / "storage" / "tenants" / "admin" / "jobs" / job_id / "checkpoints"


def committed_steps(directory: Path) -> list[int]:
    """Step directories with a manifest (what a listing would call committed, signature aside)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(n[5:]) for n in names
                  if n.startswith("step-") and (directory / n / "manifest.json").exists())


@contextlib.contextmanager
def tmpfs(directory: Path, size: str):
    """A tmpfs of `size` mounted on `directory` (made if missing) while inside:
    a real disk that fills. Where mounting is not permitted (no root) it skips
    the test, saying why; under CI (tests/ci.py), which runs as root, it fails
    it instead: there the full-disk test and the soak must really run."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                             capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        skip_or_fail("a real full disk needs a tmpfs mounted by the test: no `mount` here")
    if out.returncode != 0:
        skip_or_fail("a real full disk needs a tmpfs mounted by the test, and mounting is not "
                     f"permitted here (needs root): {out.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30)


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def tree_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def metrics(server: Server, job_id: str) -> list[dict]:
    return server.get(f"/v1/jobs/{job_id}/metrics")


def states(server: Server, job_id: str) -> list[str]:
    return [e["to_state"] for e in server.get(f"/v1/jobs/{job_id}/events")]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


_PROBE = textwrap.dedent("""
    import json, sys, ray
    from ray.util.state import list_actors, list_placement_groups
    head = sys.argv[1]  # the server's head (without it the state API may pick another cluster)
    ray.init(address=head, namespace="brigade", logging_level="ERROR")
    list_actors(head, limit=1)  # the head's dashboard answers
    print("ready", flush=True)
    def alive(prefix):
        return [a.name for a in list_actors(head, filters=[("state", "!=", "DEAD")], limit=10_000)
                if a.name.startswith(prefix)]

    def assignments(prefix):  # each alive pooled rank's own word on its group: [group, rank] or None
        asked = {}
        for name in alive(prefix):
            try:
                asked[ray.get_actor(name).assignment.remote()] = name
            except ValueError:
                continue  # gone meanwhile
        ready, late = ray.wait(list(asked), num_returns=len(asked), timeout=5) if asked else ([], [])
        out = {asked[ref]: "no answer" for ref in late}
        for ref in ready:
            try:
                out[asked[ref]] = ray.get(ref)
            except ray.exceptions.RayError:
                pass  # died meanwhile: not alive
        return out

    for line in sys.stdin:
        command = line.strip()
        if command.startswith("assigned:"):
            print(json.dumps(assignments(command.removeprefix("assigned:"))), flush=True)
            continue
        pgs = [p.name for p in list_placement_groups(head, filters=[("state", "!=", "REMOVED")],
                                                     limit=10_000) if p.name.startswith(command)]
        print(json.dumps(alive(command) + pgs), flush=True)
""")


class RayProbe:
    """A driver of its own on the server's Ray head (a subprocess, so that this
    test process's Ray, if any, is left alone): what is alive there, by name,
    through Ray's public state API (the chaos server's head runs its dashboard,
    on loopback: BRIGADE_RAY_DASHBOARD)."""

    def __init__(self, data_dir: Path | None = None, *, address: str | None = None,
                 token: str | None = None):
        """The head of `data_dir`'s server, or the one at `address` (whose own
        auth `token`, if it has one: tests/e2e/ray_nodes.py)."""
        if address is None:
            address = json.loads((data_dir / "ray.json").read_text())["address"]
        env = dict(os.environ, RAY_AUTH_MODE="token", **({"RAY_AUTH_TOKEN": token} if token else {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PROBE, address], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env,
        )
        assert self.proc.stdout.readline().strip() == "ready", "the Ray probe could not connect"

    def leftovers(self, prefix: str) -> list[str]:
        """The names of the actors and placement groups alive that begin with `prefix`."""
        return self._ask(prefix)

    def assignments(self, prefix: str) -> dict[str, list | None | str]:
        """Each alive actor of `prefix` (a rank pool's: workers/cluster/pool.py) and
        what it answers to `assignment()`: [group, rank] once a group took it,
        None while idle, "no answer" where it did not answer within 5 s. A
        pooled rank keeps the pool's name, so its own answer is what ties it
        to a job on Ray's side."""
        return self._ask(f"assigned:{prefix}")

    def _ask(self, line: str):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def assert_nothing_left(probe: RayProbe, job_id: str, pids: set[int], within_s: float = 30) -> None:
    """No actor or placement group of any attempt of the job, and no rank process, is left."""
    deadline = time.monotonic() + within_s
    while True:
        left = probe.leftovers(f"brigade-{job_id}-") + [f"pid {p}" for p in pids if alive(p)]
        if not left:
            return
        assert time.monotonic() < deadline, f"job {job_id} left behind: {left}"
        time.sleep(0.3)


class PidWatch:
    """Every rank pid a job had, sampled while the test waits on it."""

    def __init__(self, server: Server, job_id: str):
        self.server, self.job_id, self.pids = server, job_id, set()

    def sample(self) -> list[int]:
        pids = rank_pids(self.server, self.job_id)
        self.pids.update(pids)
        return pids


def kill_leader(replicas: Replicas) -> tuple[Replica, Replica, float]:
    """SIGKILL to the leading replica's process group (its host lost), then
    wait for another to lead: (the old leader, the new one, the seconds
    between). The old one is left dead: `old.start()` brings it back (a
    follower)."""
    old = replicas.leader()
    t0 = time.monotonic()
    old.kill()
    new = replicas.leader(timeout_s=FAILOVER_S + 60, other_than=old)
    return old, new, time.monotonic() - t0
