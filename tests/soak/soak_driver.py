"""A soak: many tenants' jobs through one `brigade serve` while faults land,
then everything that must hold checked at once (tests/soak/test_soak.py in
CI, `python -m bench.soak` for the long one).

    result = run_soak(SoakPlan(jobs=100), data_dir)
    assert not result.problems, result.explain()

The server is the chaos tests' (tests/chaos/chaos_harness.py: its own Ray
head with the dashboard on loopback, SQLite, a short process-group timeout),
or with `plan.replicas` > 1 that many replicas (tests/e2e/replica_harness.py:
one fresh Postgres database, one Ray head of the soak's own with its
dashboard), spoken to through every replica's URL as a load balancer would;
the checkpoint storage is a tmpfs the soak mounts, so that "the disk is full"
is a real ENOSPC. First one uninterrupted reference run per (config, world
size) that the jobs have, at a priority nothing preempts, alone on the
cluster: no tenant's job beside it and no fault (a reference's curve is what
every job is held to, so it must be uninterrupted; one that a transient
failure restarted is run again). Then the tenants' jobs arrive over
`submit_over_s` while the chaos thread works through its faults.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.chaos_harness import ENV, RayProbe, alive, tmpfs
from tests.e2e.replica_harness import Replicas, ray_head
from tests.postgres import fresh_database
from tests.e2e.serve_harness import KEY, TERMINAL, Server
from tests.soak.soak_checks import (check_events, check_final, check_losses, check_recoveries,
                                    check_rows, report)
from tests.soak.soak_client import SoakClient
from tests.soak.soak_goodput import (
    RANK_SIGNALS,
    check_goodput,
    cluster_goodput,
    cost_by_kind,
    ending_costs,
    fault_costs,
)
from tests.soak.soak_plan import TENANTS, SoakPlan, job_spec
from tests.soak.soak_threads import POOL, Chaos, Observations, QuotaSampler, RaySampler, Submitter

SOAK_ENV = {
    **ENV,
    "BRIGADE_POLL_INTERVAL_S": "0.2",
    "BRIGADE_PREEMPTION_GRACE_S": "30",
    "BRIGADE_RATE_LIMIT_PER_S": "1000",  # the samplers poll: never the limiter's 429s
    "BRIGADE_RATE_LIMIT_BURST": "1000",
    "BRIGADE_EXPORT_ON_SUCCESS": "",
    # The CPU is what a soak runs short of (every rank of every job is a process that
    # imports torch): of warm ranks, two (the chaos tests keep four) idle at the end.
    "BRIGADE_RANK_POOL_SIZE": "2",
}
RANK_POOL_SIZE = int(SOAK_ENV["BRIGADE_RANK_POOL_SIZE"])  # idle warm ranks it keeps
REFERENCE_PRIORITY = 1000  # the admin's reference runs: never preempted
STORIES, STORY_LINES = 5, 40  # jobs a check failed on told in full (events, log), lines of log each


@dataclass
class SoakResult:
    plan: SoakPlan
    report: dict
    problems: list[str] = field(default_factory=list)
    log_tail: str = ""
    stories: str = ""  # the first jobs a check failed on: their events and log

    def explain(self) -> str:
        shown = "\n".join(f"- {p}" for p in self.problems[:60])
        more = f"\n... and {len(self.problems) - 60} more" if len(self.problems) > 60 else ""
        return (f"{len(self.problems)} problems:\n{shown}{more}\nreport: "
                f"{json.dumps(self.report, indent=1, default=str)}\n{self.stories}\n{self.log_tail}")


def run_soak(plan: SoakPlan, data_dir: Path, *, say=print) -> SoakResult:
    storage = data_dir / "storage"
    disk = tmpfs(storage, "768m") if plan.disk_fills else contextlib.nullcontext()
    with disk:
        if plan.replicas > 1:
            return _on_replicas(plan, data_dir, storage if plan.disk_fills else None, say)
        server = Server(data_dir, env=SOAK_ENV).start()
        try:
            return _soak(plan, Deployment(server, None, RayProbe(data_dir)), data_dir,
                         storage if plan.disk_fills else None, say)
        finally:
            server.stop()


def _on_replicas(plan: SoakPlan, data_dir: Path, storage: Path | None, say) -> SoakResult:
    """The soak through `plan.replicas` replicas on Postgres and a Ray head of its own
    (their checkpoints under data_dir/storage, the tmpfs, as the one server's)."""
    with ray_head(num_cpus=int(SOAK_ENV["BRIGADE_RAY_NUM_CPUS"]), dashboard=True) as head, \
            fresh_database() as url:
        replicas = Replicas(data_dir, head, url, n=plan.replicas, env=SOAK_ENV)
        try:
            replicas.start()
            probe = RayProbe(address=head.address, token=head.token)
            return _soak(plan, Deployment(None, replicas, probe), data_dir, storage, say)
        finally:
            replicas.stop()


@dataclass
class Deployment:
    """What the soak runs against: one server, or replicas; and a probe of its Ray head."""

    server: Server | None
    replicas: Replicas | None
    probe: RayProbe

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas] if self.replicas else [self.server.url]

    def log_tail(self, chars: int) -> str:
        if self.replicas:
            return self.replicas.log_tails(chars // len(self.replicas.replicas))
        return self.server.log_tail(chars)


def _soak(plan: SoakPlan, deployment: Deployment, data_dir: Path, storage: Path | None,
          say) -> SoakResult:
    start = time.monotonic()
    obs = Observations()
    admin = SoakClient(deployment.urls, KEY)
    clients = {t.name: SoakClient(deployment.urls, admin.post("/v1/tenants", t.body())["api_key"])
               for t in TENANTS}
    probe = deployment.probe
    try:
        result = _run(plan, deployment, data_dir, storage, obs, admin, clients, probe, start, say)
    finally:
        probe.close()
        for c in (admin, *clients.values()):
            c.close()
    if result.problems:
        result.log_tail = deployment.log_tail(6000)
    say(f"soak: {json.dumps(result.report, default=str)}")
    return result


def _run(plan: SoakPlan, deployment: Deployment, data_dir: Path, storage: Path | None, obs: Observations,
         admin: SoakClient, clients: dict[str, SoakClient], probe: RayProbe, start: float,
         say) -> SoakResult:
    """The references, then the jobs and the faults, the drain and the checks."""
    submitter = Submitter(obs, plan, clients, data_dir)
    chaos = Chaos(obs, plan, deployment.server, admin, storage, deployment.replicas)
    threads = [QuotaSampler(obs, admin), RaySampler(obs, probe)]
    try:
        for t in threads:
            t.start()
        keys = plan.reference_keys()
        failed = _run_references(keys, admin, obs)
        say(f"soak: {len(keys)} references final after {time.monotonic() - start:.0f} s "
            f"({len(obs.reference_runs)} runs)")
        if failed:
            return SoakResult(plan, {"references": obs.references}, failed)
        obs.references_final.set()
        say(f"soak: {plan.jobs} jobs over {plan.submit_over_s:g} s, {len(plan.fault_plans)} faults")
        for t in (submitter, chaos):
            t.start()
            threads.append(t)
        submitter.join(timeout=plan.submit_over_s + 300)
        chaos.join(timeout=len(plan.fault_plans) * (plan.fault_gap_s + 150))
        say(f"soak: all submitted and {len(obs.faults)} faults injected after "
            f"{time.monotonic() - start:.0f} s; draining")
        with obs.lock:
            ids = list(obs.submitted)
        stuck = _wait_final(admin, ids, deadline=time.monotonic() + plan.drain_timeout_s)
        say(f"soak: drained after {time.monotonic() - start:.0f} s ({len(stuck)} not final)")
    finally:
        for t in threads:
            t.stop()
    return _check(plan, admin, obs, probe, stuck, time.monotonic() - start)


def _run_references(keys: list[tuple[str, int]], admin: SoakClient, obs: Observations,
                    *, runs: int = 2, timeout_s: float = 240) -> list[str]:
    """Run every reference at once, alone, to the end; one that did not end
    an uninterrupted success (a rendezvous timed out on a loaded machine) is
    run again, `runs` times at most. The problems: the keys still without one."""
    todo = list(keys)
    for run in range(runs):
        made = {}
        for config, ws in todo:
            name = f"soak-ref-{config}-ws{ws}" + (f"-run{run + 1}" if run else "")
            made[(config, ws)] = admin.post("/v1/jobs", job_spec(config, name, ws,
                                                                 priority=REFERENCE_PRIORITY))["id"]
        with obs.lock:
            obs.reference_runs += made.values()
        stuck = _wait_final(admin, list(made.values()), deadline=time.monotonic() + timeout_s)
        if stuck:
            return [f"reference runs not final within {timeout_s:g} s: {stuck}"]
        by_id = {j["id"]: j for j in admin.jobs()}
        todo = []
        for key, job_id in made.items():
            if _uninterrupted(by_id[job_id]):
                obs.references[key] = job_id
            else:
                todo.append(key)
        if not todo:
            return []
    return [f"no uninterrupted reference run of {key} in {runs} runs" for key in todo]


def _uninterrupted(job: dict) -> bool:
    return job["state"] == "SUCCEEDED" and not job["restarts"] and not job["preemptions"]


def _wait_final(admin: SoakClient, ids: list[str], deadline: float) -> list[str]:
    """Wait until every job is final; the ones that are not by the deadline."""
    waiting = set(ids)
    while waiting and time.monotonic() < deadline:
        final = {j["id"] for j in admin.jobs() if j["state"] in TERMINAL}
        waiting -= final
        time.sleep(1.0)
    return sorted(waiting)


def _check(plan: SoakPlan, admin: SoakClient, obs: Observations, probe: RayProbe,
           stuck: list[str], seconds: float) -> SoakResult:
    problems = [f"job {j}: not final {plan.drain_timeout_s:g} s after the last submission" for j in stuck]
    problems += [f"a soak thread died: {e}" for e in obs.errors]
    problems += obs.violations
    problems += [f"fault not injected: {f}" for f in obs.faults if "skipped" in f]
    if len(obs.faults) != len(plan.fault_plans):
        problems.append(f"{len(obs.faults)} of {len(plan.fault_plans)} faults injected")
    jobs = admin.jobs()
    by_id = {j["id"]: j for j in jobs}
    # None lost, none twice: the store holds exactly the jobs submitted (a
    # retried submit after a lost answer made no second one).
    made = set(obs.submitted) | set(obs.reference_runs)
    if set(by_id) != made or len(jobs) != len(made) or len(obs.submitted) != plan.jobs:
        problems.append(f"the store holds {len(jobs)} jobs for {len(obs.submitted)} submitted of "
                        f"{plan.jobs} planned (+{len(obs.reference_runs)} reference runs): missing "
                        f"{sorted(made - set(by_id))[:10]}, extra {sorted(set(by_id) - made)[:10]}")
    rows = {i: admin.get(f"/v1/jobs/{i}/metrics") for i in by_id}
    references: dict[str, dict[int, dict[int, float]]] = {}
    for (config, ws), ref_id in obs.references.items():
        ref = by_id[ref_id]
        if not _uninterrupted(ref):
            problems.append(f"reference {ref['name']} was not an uninterrupted success: {ref}")
        references.setdefault(config, {})[ws] = {r["step"]: r["loss"] for r in rows[ref_id]}
    events: dict[str, list[dict]] = {}
    stories: list[str] = []  # of the jobs a check failed on: their events and log
    for job_id, job_plan in obs.submitted.items():
        job = by_id.get(job_id)
        if job is None:
            continue
        events[job_id] = admin.get(f"/v1/jobs/{job_id}/events")
        found = (check_final(job, job_plan) + check_events(job, events[job_id])
                 + check_recoveries(job, events[job_id]) + check_rows(job, job_plan, rows[job_id])
                 + check_losses(job, job_plan, rows[job_id], references.get(job_plan.config, {})))
        if found and len(stories) < STORIES:
            stories.append(_story(admin, job, events[job_id]))
        problems += found
    problems += _leftovers(probe, obs)
    faults = obs.faults
    summary = report(jobs, obs.submitted, {i: rows[i] for i in obs.submitted}, faults, seconds, events)
    problems += _price_faults(summary, admin, obs, by_id, events, rows, seconds)
    summary["quota_samples"], summary["ray_samples"] = obs.quota_samples, obs.ray_samples
    summary["pooled_ranks_seen"] = obs.pooled_ranks_seen
    # how often a job that a SIGKILL aimed at recovery in place could hit was running
    summary["in_place_candidates"] = {"jobs": len(obs.in_place_candidates),
                                      "samples": obs.samples_with_one}
    summary["references"] = len(obs.references)
    summary["reference_runs"] = len(obs.reference_runs)
    summary["peak_held"] = {t: {"workers": w, "jobs": n} for t, (w, n) in sorted(obs.peak.items())}
    disk = [f for f in faults if f["kind"] == "disk_full" and "skipped" not in f]
    if disk and not all(f["saves_failed_in"] for f in disk):
        problems.append(f"the disk was full and no save failed: {disk}")
    if obs.quota_samples < 10 or obs.ray_samples < 5:
        problems.append(f"too few samples: {obs.quota_samples} of quota, {obs.ray_samples} of Ray")
    if RANK_POOL_SIZE and not obs.pooled_ranks_seen:
        problems.append("the Ray sampler tied no warm (pooled) rank to a job: its per-job and "
                        "per-tenant counts missed the ranks that came from the pool")
    return SoakResult(plan, summary, problems, stories="\n".join(stories))


def _story(admin: SoakClient, job: dict, events: list[dict]) -> str:
    """A job a check failed on: its events and the last STORY_LINES lines of its log."""
    lines = [f"{line['time']} {line['line'][:400]}"
             for line in admin.get(f"/v1/jobs/{job['id']}/logs", limit=1000)]
    return (f"job {job['id']} ({job['name']}, {job['state']}, restarts {job['restarts']}, "
            f"recoveries {job.get('recoveries')}):\n  events:\n    "
            + "\n    ".join(_path(events)) + "\n  log:\n    "
            + "\n    ".join(lines[-STORY_LINES:]))


def _price_faults(summary: dict, admin: SoakClient, obs: Observations, by_id: dict[str, dict],
                  events: dict[str, list[dict]], rows: dict[str, list[dict]], seconds: float) -> list[str]:
    """Every soak job's goodput (its phases checked), the cluster's in
    worker-seconds and each fault kind's cost (soak_goodput.py) into the
    report; the problems: a job's phases off, a goodput outside 0..1, a kind
    of rank signal that fired and cost nothing."""
    problems = []
    goodputs = {}
    for job_id in obs.submitted:
        if job_id in by_id:
            goodputs[job_id] = admin.get(f"/v1/jobs/{job_id}/goodput")
            problems += check_goodput(by_id[job_id], goodputs[job_id])
    usage = admin.get("/v1/usage", window_s=seconds + 600)  # the whole soak, and then some
    cluster = cluster_goodput(usage, {t.name for t in TENANTS})
    priced = fault_costs(obs.faults, by_id, events, rows)
    costs = cost_by_kind(priced)
    summary["goodput"] = cluster
    summary["job_goodput_median"] = round(statistics.median(
        g["goodput"] for g in goodputs.values() if g["goodput"] is not None), 4) if goodputs else None
    summary["fault_cost_s"] = costs
    if cluster["goodput"] is None or not 0.0 < cluster["goodput"] < 1.0:
        problems.append(f"the soak tenants' goodput in worker-seconds is {cluster['goodput']}, "
                        f"not within (0, 1): {cluster}")
    for f in priced:  # the running jobs went on through a leader's loss: none restarted for it
        if f["kind"] == "leader_kill" and (f["attempts_ended"] or f["recovered_in_place"]):
            problems.append(f"a leader kill ended {f['attempts_ended']} attempts and caused "
                            f"{f['recovered_in_place']} recoveries in place: {f}")
    # What explained each rank signal: a recovery in place, a fallback or a restart, a
    # preemption (SIGTERM), or the job's end; a SIGKILL always costs its job a recovery.
    signals = [f for f in priced if f["kind"] in RANK_SIGNALS]
    summary["rank_signals_explained"] = {
        kind: dict(sorted(Counter(str(f["explained_by"]) for f in signals if f["kind"] == kind).items()))
        for kind in RANK_SIGNALS}
    for kind in RANK_SIGNALS:  # each, in short: whom it hit, where, what it aimed at, what became of it
        summary[f"{kind}s"] = [
            {"job": f["job"], "rank": f.get("rank"), "ranks": f.get("workers"),
             "step": f"{f.get('step')}/{f.get('steps')}", "aim": f.get("aim"), "aimed": f.get("aimed"),
             "aim_candidates": f.get("aim_candidates"), "deferred": f.get("deferred"),
             "explained_by": f["explained_by"], "cost_s": round(f["cost_s"], 2),
             **({"recovery": f["recovery"]} if "recovery" in f else {})}
            for f in signals if f["kind"] == kind]
    for f in signals:  # a SIGTERM may end nothing, but only where the job's last step came next
        if f["explained_by"] is None:
            problems.append(f"{f['kind']} of rank {f.get('rank')} of job {f['job']} (at step "
                            f"{f.get('step')} of {f.get('steps')}): no recovery, restart or "
                            f"preemption followed it, nor was the job in or past its last step: "
                            f"{f}; its events: {_path(events.get(f['job'], []))}")
    for kind in RANK_SIGNALS:  # what a signal that ended an attempt or was recovered cost is never nothing
        ending = ending_costs([f for f in signals if f["kind"] == kind])
        if ending and not statistics.median(ending) > 0:
            problems.append(f"{kind}: {len(ending)} ended an attempt or were recovered in place and "
                            f"their median cost (lost + recovering) is {statistics.median(ending)} s: "
                            f"{[f for f in priced if f['kind'] == kind]}")
    return problems


def _path(events: list[dict]) -> list[str]:
    """A job's events in short: time, state change (or note), kind and reason."""
    return [f"{e['time']} {e['from_state']} -> {e['to_state']}"
            + (f" [{e['kind']}]" if e.get("kind") else "") + f": {e.get('reason', '')}" for e in events]


def _leftovers(probe: RayProbe, obs: Observations, within_s: float = 30) -> list[str]:
    """No actor or placement group of any job on Ray, no rank process that
    served a job alive, and of the warm rank pool only idle ones, at most
    its size (a pooled rank a job took and left alive says it is that job's)."""
    pids = {p for job_pids in obs.pids.values() for p in job_pids}
    deadline = time.monotonic() + within_s
    while True:
        pooled = probe.assignments(POOL)
        idle = [name for name, answer in pooled.items() if answer is None]
        left = (probe.leftovers("brigade-j-") + [f"pid {p}" for p in sorted(pids) if alive(p)]
                + [f"{name} ({answer})" for name, answer in pooled.items() if answer is not None]
                + (idle if len(idle) > RANK_POOL_SIZE else []))
        if not left or time.monotonic() > deadline:
            return [f"left on the cluster after every job ended: {left[:20]}"] if left else []
        time.sleep(0.5)
