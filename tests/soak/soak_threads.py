"""The threads that run beside a soak's jobs: the one that submits them over
time, the samplers (every tenant's running workers through the API, every
rank actor alive through Ray's public state API) and the chaos thread, which
injects the planned faults one after another into whatever runs then.

Each thread records what it did or saw in the shared `Observations`; the
checks (soak_checks.py) read it once the soak is over.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.broken_data import write_out_of_vocabulary_dataset
from tests.chaos.chaos_harness import RayProbe, free_bytes, kill_leader
from tests.e2e.replica_harness import FAILOVER_S, Replicas
from tests.e2e.serve_harness import Server
from tests.soak.soak_checks import ranks_on_ray
from tests.soak.soak_client import SoakClient
from tests.soak.soak_plan import (
    TENANTS,
    FaultPlan,
    JobPlan,
    SoakPlan,
    aimed_victims,
    chaos_victims,
    ripe,
)

ACTIVE = "STARTING,RUNNING,SUSPENDING,PREEMPTING,RESTARTING,CANCELLING,PRUNING"
POOL = "brigade-pool-"  # service/control/leader.py pool_prefix: warm ranks keep the pool's names
SPACE_LEFT = 48 << 10  # what the filler leaves free: less than any rank's shard
# A SIGKILL with an aim looks this long for a victim of it; one aimed at recovery in place
# that found none goes after the next fault (the jobs of 2+ ranks that can be saved in place
# come and go: a few in the soak, each a few seconds), at most DEFERS times, and on its last
# try (or the schedule's) it looks for AIM_FOR_S, then takes any running job.
TRY_S = 5.0
DEFERS = 4
AIM_FOR_S = 30.0
FOLLOW_S = 0.05  # how often a job aimed at is read again, until its step is the one to kill at


@dataclass
class Observations:
    lock: threading.Lock = field(default_factory=threading.Lock)
    submitted: dict[str, JobPlan] = field(default_factory=dict)  # job id -> its plan
    references: dict[tuple[str, int], str] = field(default_factory=dict)  # (config, ws) -> job id
    reference_runs: list[str] = field(default_factory=list)  # every reference job made, reruns too
    references_final: threading.Event = field(default_factory=threading.Event)  # chaos waits on it
    pids: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    quota_samples: int = 0
    ray_samples: int = 0
    pooled_ranks_seen: int = 0  # warm ranks the Ray sampler tied to a job (summed over its samples)
    in_place_candidates: set[str] = field(default_factory=set)  # jobs a recovery in place could save
    samples_with_one: int = 0  # quota samples that saw one such job running at least
    violations: list[str] = field(default_factory=list)  # what a sampler saw that must never be
    peak: dict[str, tuple[int, int]] = field(default_factory=dict)  # tenant -> (workers, jobs) seen
    faults: list[dict] = field(default_factory=list)  # one per injected fault
    errors: list[str] = field(default_factory=list)  # a thread that died, and why

    def violation(self, what: str) -> None:
        with self.lock:
            if len(self.violations) < 200:
                self.violations.append(what)


class Loop(threading.Thread):
    """A daemon thread that calls `once()` every `every_s` until stopped; an
    exception ends it and is recorded (the checks fail on it)."""

    def __init__(self, name: str, obs: Observations, every_s: float):
        super().__init__(name=name, daemon=True)
        self.obs, self.every_s, self.stopped = obs, every_s, threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                if self.once():
                    return
                self.stopped.wait(self.every_s)
        except BaseException as e:  # noqa: BLE001 - recorded, the soak fails on it
            with self.obs.lock:
                self.obs.errors.append(f"{self.name}: {e!r}")

    def once(self) -> bool:  # True: done
        raise NotImplementedError

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=150)


class Submitter(Loop):
    """Submits every planned job at its time, as its tenant, with an idempotency key."""

    def __init__(self, obs: Observations, plan: SoakPlan, clients: dict[str, SoakClient],
                 data_dir: Path):
        super().__init__("submitter", obs, 0.05)
        self.plan, self.clients, self.data_dir = plan, clients, data_dir
        self.todo = list(plan.job_plans)
        self.t0 = time.monotonic()

    def run(self) -> None:
        self.t0 = time.monotonic()  # the plan's times count from the thread's start
        super().run()

    def once(self) -> bool:
        while self.todo and time.monotonic() - self.t0 >= self.todo[0].at_s:
            job = self.todo.pop(0)
            bad = None
            if job.bad_data:  # token ids past the vocabulary: past the submit checks, not the ranks
                bad = write_out_of_vocabulary_dataset(
                    self.data_dir / "data-store" / "tenants" / job.tenant / "data" / f"bad-{job.index}")
            made = self.clients[job.tenant].post("/v1/jobs", job.spec(bad),
                                                 idempotency_key=f"soak-{self.plan.seed}-{job.index}")
            with self.obs.lock:
                self.obs.submitted[made["id"]] = job
        return not self.todo


class QuotaSampler(Loop):
    """Every tenant's held workers and running jobs, from one listing of the
    active jobs (one read of the store): never over its quota. Also collects
    every rank pid the jobs had (the leak check looks for them at the end)."""

    def __init__(self, obs: Observations, admin: SoakClient):
        super().__init__("quota-sampler", obs, 1.0)
        self.admin = admin
        self.quota = {t.name: t for t in TENANTS}

    def once(self) -> bool:
        active = self.admin.jobs(ACTIVE)
        held: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for job in active:
            held[job["tenant"]][0] += job["workers"] or 0
            held[job["tenant"]][1] += 1
        for tenant, (workers, jobs) in held.items():
            with self.obs.lock:
                was = self.obs.peak.get(tenant, (0, 0))
                self.obs.peak[tenant] = (max(was[0], workers), max(was[1], jobs))
            quota = self.quota.get(tenant)
            if quota and (workers > quota.max_workers or jobs > quota.max_running_jobs):
                self.obs.violation(f"tenant {tenant} held {workers} workers in {jobs} jobs, over its "
                                   f"quota ({quota.max_workers} workers, {quota.max_running_jobs} jobs): "
                                   + ", ".join(f"{j['id']} {j['state']} x{j['workers']}"
                                               for j in active if j["tenant"] == tenant))
        with self.obs.lock:
            submitted = dict(self.obs.submitted)
        candidates = {j["id"] for j in aimed_victims([j for j in active if j["state"] == "RUNNING"
                                                      and j["id"] in submitted], "in_place")}
        with self.obs.lock:
            self.obs.in_place_candidates |= candidates
            self.obs.samples_with_one += bool(candidates)
        for job in active:
            if job["state"] == "RUNNING":
                pids = {w["pid"] for w in self.admin.get(f"/v1/jobs/{job['id']}/workers") if w["pid"]}
                with self.obs.lock:
                    self.obs.pids[job["id"]].update(pids)
        with self.obs.lock:
            self.obs.quota_samples += 1
        return False


class RaySampler(Loop):
    """The rank actors alive on the cluster, through Ray itself: the named
    ones by the state API, the pooled ones by their own answer to whose they
    are (soak_checks.ranks_on_ray). One attempt of a job at a time (a job never
    runs twice at once), and no tenant's ranks over its max_workers."""

    def __init__(self, obs: Observations, probe: RayProbe):
        super().__init__("ray-sampler", obs, 3.0)
        self.probe = probe
        self.quota = {t.name: t.max_workers for t in TENANTS}

    def once(self) -> bool:
        # One instant from reads that take time: the named ranks listed between two reads
        # of the pooled ones' answers, and of those only the ones that gave the same answer
        # both times (alive before and after the listing: alive at it). A single read of each
        # could see an attempt's pooled ranks just before their kill and the next attempt's
        # named ranks just after it.
        before = self.probe.assignments(POOL)
        names = self.probe.leftovers("brigade-j-")
        after = self.probe.assignments(POOL)
        pooled = {name: answer for name, answer in after.items() if before.get(name) == answer}
        alive = ranks_on_ray(names, pooled)
        with self.obs.lock:
            tenant_of = {job_id: plan.tenant for job_id, plan in self.obs.submitted.items()}
            self.obs.ray_samples += 1
            self.obs.pooled_ranks_seen += sum(isinstance(a, list) for a in pooled.values())
        by_tenant: dict[str, int] = defaultdict(int)
        for job_id, attempts in alive.items():
            if len(attempts) > 1:
                self.obs.violation(f"job {job_id} had attempts {sorted(attempts)} alive at once on Ray")
            by_tenant[tenant_of.get(job_id, "admin")] += sum(len(ranks) for ranks in attempts.values())
        for tenant, n in by_tenant.items():
            if tenant in self.quota and n > self.quota[tenant]:
                self.obs.violation(f"tenant {tenant} had {n} rank actors alive on Ray, over its "
                                   f"max_workers {self.quota[tenant]}")
        return False


class Chaos(Loop):
    """The planned faults, one every `fault_gap_s`: SIGKILL or SIGTERM to a
    random rank of a random running job (soak_plan.chaos_victims: never a
    reference, a job that must fail, or one already hit MAX_HITS times; a
    SIGKILL's aim first, soak_plan.aimed_victims: in turn, a job that
    recovery in place can save and one only a restart can),
    `brigade serve` SIGKILLed and started again, the leading replica SIGKILLed
    (where there are replicas: another must lead within FAILOVER_S, and the
    lost one starts again, a follower), the checkpoint disk (a tmpfs)
    filled until a save fails. None before every reference run is final
    (`Observations.references_final`): a server restart or a full disk would
    interrupt a reference as surely as a signal to its rank."""

    def __init__(self, obs: Observations, plan: SoakPlan, server: Server | None, admin: SoakClient,
                 storage: Path | None, replicas: Replicas | None = None):
        super().__init__("chaos", obs, plan.fault_gap_s)
        self.plan, self.server, self.admin, self.storage = plan, server, admin, storage
        self.replicas = replicas
        self.todo = list(plan.fault_plans)
        self.hits: dict[str, int] = defaultdict(int)
        self.deferred: dict[int, int] = defaultdict(int)  # id(fault plan) -> times put back

    def run(self) -> None:
        while not self.obs.references_final.wait(0.5):
            if self.stopped.is_set():
                return
        if not self.stopped.wait(self.plan.fault_gap_s):  # the first fault, a gap in: jobs running
            super().run()

    def once(self) -> bool:
        fault = self.todo.pop(0)
        started = time.time()
        if fault.kind in ("sigkill", "sigterm"):
            last = self.deferred[id(fault)] >= DEFERS or not self.todo
            record = self._signal_a_rank(fault, aim_for_s=AIM_FOR_S if last else TRY_S, last=last)
            if record is None:  # nothing of its aim now: after the next fault, again
                self.deferred[id(fault)] += 1
                self.todo.insert(1, fault)
                return False
            if fault.aim:
                record["deferred"] = self.deferred[id(fault)]
        elif fault.kind == "serve_restart":
            record = self._restart_serve()
        elif fault.kind == "leader_kill":
            record = self._kill_leader()
        else:
            record = self._fill_disk()
        with self.obs.lock:
            self.obs.faults.append({"kind": fault.kind, "at": started, **record})
        return not self.todo

    def _victims(self) -> list[dict]:
        with self.obs.lock:
            submitted, references = dict(self.obs.submitted), set(self.obs.reference_runs)
        return chaos_victims(self.admin.jobs("RUNNING"), submitted, references, self.hits)

    def _signal_a_rank(self, fault: FaultPlan, *, aim_for_s: float = AIM_FOR_S,
                       last: bool = True) -> dict | None:
        """SIGKILL or SIGTERM to a random rank of a random running job past its
        first step and short of its last (where there is one). A SIGKILL with
        an aim (soak_plan.aimed_victims) looks for a job of its aim for
        `aim_for_s` first, and one aimed at recovery in place is followed
        until it is `ripe` (past its first snapshot): the kill point is chosen,
        not happened upon, since a tiny job's window is a few steps of a
        fraction of a second each. Not the `last` try: None where no job of
        its aim came (it is tried again later); the last takes any job then
        (`aimed` False)."""
        rng = random.Random(fault.seed)
        started = time.monotonic()
        deadline = started + 60 + (aim_for_s if fault.aim else 0)
        seen: set[str] = set()  # the aim's candidates
        while time.monotonic() < deadline:
            victims = sorted(self._victims(), key=lambda j: j["id"])
            # Mid-run where there is a choice: past its first step, short of its last.
            stepping = [j for j in victims if 1 <= j["step"] < j["spec"]["train"]["steps"]] or victims
            aimed = aimed_victims(victims, fault.aim) if fault.aim else []
            seen |= {j["id"] for j in aimed}
            if aimed and fault.aim == "in_place":
                job = self._follow(rng.choice(aimed), deadline)
                aimed = [job] if job is not None else []
                if not aimed:
                    continue  # it left the window: look again
            if fault.aim and not aimed:
                if time.monotonic() - started < aim_for_s:
                    time.sleep(0.2)
                    continue
                if not last:
                    return None
            if aimed or stepping:
                job = rng.choice(aimed or stepping)
                workers = sorted(self.admin.get(f"/v1/jobs/{job['id']}/workers"), key=lambda w: w["rank"])
                pids = [w for w in workers if w["pid"]]
                if pids:
                    victim = rng.choice(pids)
                    try:
                        os.kill(victim["pid"], signal.SIGKILL if fault.kind == "sigkill" else signal.SIGTERM)
                    except ProcessLookupError:
                        continue  # it ended meanwhile: pick again
                    killed_at = time.time()  # what the fault's cost is counted from (soak_goodput.py)
                    self.hits[job["id"]] += 1
                    aim = ({"aim": fault.aim, "aimed": bool(aimed), "aim_candidates": len(seen)}
                           if fault.aim else {})
                    return {"job": job["id"], "rank": victim["rank"], "pid": victim["pid"],
                            "killed_at": killed_at, "workers": job["workers"],
                            "step": job["step"], "steps": job["spec"]["train"]["steps"], **aim}
            time.sleep(0.2)
        return {"skipped": "no running job to hit within 60 s"}

    def _follow(self, job: dict, deadline: float) -> dict | None:
        """The job, read again every FOLLOW_S until it is `ripe` (then it), or
        None once it is no longer one to aim at."""
        while time.monotonic() < deadline:
            now = ripe(job)
            if now is None:
                return None
            if now:
                return job
            time.sleep(FOLLOW_S)
            job = self.admin.get(f"/v1/jobs/{job['id']}")
        return None

    def _kill_leader(self) -> dict:
        """SIGKILL to the leading replica's process group (its host lost); the
        time until another says it leads is the fault's `down_s`."""
        if self.replicas is None:
            return {"skipped": "one server: no leader to kill"}
        old, new, failover_s = kill_leader(self.replicas)
        if failover_s > FAILOVER_S:
            with self.obs.lock:
                self.obs.violations.append(f"{new.name} led {failover_s:.1f} s after {old.name} was "
                                           f"killed, over {FAILOVER_S:g} s")
        old.start()  # its pod again: a follower now
        return {"replica": old.name, "new_leader": new.name, "down_s": round(failover_s, 2)}

    def _restart_serve(self) -> dict:
        if self.server is None:
            return {"skipped": "replicas: their faults are leader kills"}
        t0 = time.monotonic()
        self.server.kill()
        self.server.start()
        return {"down_s": time.monotonic() - t0}

    def _fill_disk(self) -> dict:
        if self.storage is None:
            return {"skipped": "no tmpfs under the checkpoint storage"}
        filler = self.storage / "soak-filler.bin"
        with open(filler, "wb", buffering=0) as f:  # all but a few KB: the next save of any job fails
            left = free_bytes(self.storage) - SPACE_LEFT
            chunk = b"\0" * (1 << 20)
            try:
                while left > 0:
                    left -= f.write(chunk[:min(left, len(chunk))])
            except OSError as e:  # the jobs' saves beside it took the rest first: full all the same
                if e.errno != errno.ENOSPC:
                    raise
        t0 = time.monotonic()
        failed: list[str] = []
        seen: set[str] = set()  # every job that ran while the disk was full (a short one ends fast)
        while not failed and time.monotonic() - t0 < self.plan.disk_full_max_s:
            seen |= {job["id"] for job in self.admin.jobs("RUNNING")}
            for job_id in sorted(seen):
                rows = self.admin.get(f"/v1/jobs/{job_id}/metrics")
                if any(r.get("checkpoint_error") for r in rows):
                    failed.append(job_id)
            time.sleep(0.3)
        full_s = time.monotonic() - t0
        filler.unlink()
        return {"full_s": full_s, "saves_failed_in": failed}
