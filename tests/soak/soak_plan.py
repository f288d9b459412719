"""What a soak runs, decided up front from one seed: the tenants (weights,
quotas, priority ceilings), every job (who submits it, when, its size,
priority and engine config) and the fault schedule. Pure: no server, no clock.

The engine configs are few on purpose: a job's loss curve depends on its
config (and, in float round-off, its world size), so one uninterrupted
reference run per (config, world size) checks every job of that config.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MODEL = {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "vocab_size": 256}

# name -> (n_layers, steps, checkpoint.every_steps). Most jobs are short (the
# soak is about many lives, not long ones: a rank process's start, torch's
# import mostly, costs more CPU than a short job's steps); the long ones are
# where a fault lands mid-run, between checkpoints.
CONFIGS: dict[str, tuple[int, int, int]] = {
    "short": (1, 4, 2),
    "medium": (1, 8, 4),
    "long": (2, 24, 6),
}
CONFIG_WEIGHTS = {"short": 6, "medium": 3, "long": 1}
SIZES = (1, 2, {"min": 1, "max": 2})  # fixed 1, fixed 2, elastic
# A fixed-size job is held bitwise to the reference of its (config, size), and a
# reference run costs a soak its ranks' start-ups: fixed 2 is one config's only. The
# medium one's: a job of 2 ranks long enough to be killed past its first in-memory
# snapshot and before its end (SNAPSHOT_BY_STEP), so that a recovery in place is held
# bitwise to the uninterrupted curve, not within an elastic job's round-off only.
FIXED_2_CONFIG = "medium"
SIZE_WEIGHTS = (5, 2, 3)
MAX_RESTARTS = 4  # a job is hit by at most MAX_HITS faults: chaos alone never exhausts this
MAX_HITS = 2
FAULT_KINDS = ("sigkill", "sigterm", "serve_restart", "leader_kill", "disk_full")
# Recovery in place (on by default for a job of 2+ ranks) restores an in-memory snapshot,
# and a run takes its first one once it has taken MEASURED_AFTER (3) steps and measured the
# interval (workers/engine/snapshot.py): at step 3, or the next multiple of the interval,
# sent to the rank's peer as training goes on. A SIGKILL aimed at recovery in place waits
# until a run of 2+ ranks has recorded this step (a step past the first snapshot for an
# interval up to 2, the one the tiny jobs measure; a snapshot of step 3 or 4 for 1 to 4)
# and kills it short of its last step: before its first snapshot, the group restarts whole.
SNAPSHOT_BY_STEP = 5
AIMS = ("in_place", "restart")  # the SIGKILLs' in turn: what each is meant to exercise


@dataclass(frozen=True)
class TenantPlan:
    name: str
    weight: float
    max_workers: int
    max_running_jobs: int
    max_priority: int

    def body(self) -> dict:
        return {"name": self.name, "weight": self.weight, "max_priority": self.max_priority,
                "quota": {"max_workers": self.max_workers, "max_running_jobs": self.max_running_jobs,
                          "max_queued_jobs": 1000}}


TENANTS = (
    TenantPlan("soak-alpha", weight=3.0, max_workers=3, max_running_jobs=2, max_priority=100),
    TenantPlan("soak-beta", weight=2.0, max_workers=2, max_running_jobs=2, max_priority=50),
    TenantPlan("soak-gamma", weight=1.0, max_workers=2, max_running_jobs=1, max_priority=10),
    TenantPlan("soak-delta", weight=1.0, max_workers=1, max_running_jobs=1, max_priority=0),
)


@dataclass(frozen=True)
class JobPlan:
    index: int
    tenant: str
    at_s: float  # submitted this long after the references end
    config: str
    workers: int | dict
    priority: int
    bad_data: bool = False  # a job that must fail: token ids past its vocabulary (an injected cause)

    @property
    def elastic(self) -> bool:
        return isinstance(self.workers, dict)

    def spec(self, bad_data_uri: str | None = None) -> dict:
        return job_spec(self.config, f"soak-{self.index:03d}-{self.config}", self.workers,
                        priority=self.priority, bad_data_uri=bad_data_uri)


def job_spec(config: str, name: str, workers, *, priority: int = 0,
             bad_data_uri: str | None = None) -> dict:
    layers, steps, every = CONFIGS[config]
    data = {"source": "tokens", "uri": bad_data_uri} if bad_data_uri else {"source": "builtin"}
    return {
        "name": name,
        "workers": workers,
        "resources_per_worker": {"cpu": 1},
        "priority": priority,
        "model": {**MODEL, "n_layers": layers},
        "data": data,
        "train": {"steps": steps, "global_batch_size": 4, "lr": 0.003, "warmup_steps": 2},
        "checkpoint": {"every_steps": every, "keep_last": 2},
        # A bad-data job fails at once without spending restarts (its error is permanent);
        # one restart lets it ride out a transient fault (a rendezvous timeout under load) first.
        "max_restarts": 1 if bad_data_uri else MAX_RESTARTS,
    }


@dataclass(frozen=True)
class FaultPlan:
    kind: str  # one of FAULT_KINDS
    seed: int  # picks the victim (job, rank) among what runs when it fires
    # A SIGKILL's: the victim it prefers (`aimed_victims`), "in_place" (a job a recovery in
    # place can save) or "restart" (one of a rank, which only a whole-group restart can)
    aim: str | None = None


@dataclass
class SoakPlan:
    """Everything a soak does, from its seed. `faults` fire one after another,
    `fault_gap_s` apart, once the references have finished."""

    seed: int = 17
    jobs: int = 100
    submit_over_s: float = 90.0
    sigkills: int = 6
    sigterms: int = 3
    serve_restarts: int = 2
    # the leading replica SIGKILLed (with `replicas` > 1), another leads, the lost one comes back
    leader_kills: int = 0
    disk_fills: int = 1
    replicas: int = 1  # `brigade serve` replicas on one Postgres and one Ray head (1: the SQLite server)
    bad_data_jobs: int = 2
    fault_gap_s: float = 7.0
    disk_full_max_s: float = 20.0  # the disk stays full until a save fails, at most this long
    drain_timeout_s: float = 300.0  # after the last submission, every job is final within this
    job_plans: list[JobPlan] = field(init=False)
    fault_plans: list[FaultPlan] = field(init=False)

    def __post_init__(self) -> None:
        if self.leader_kills and self.replicas < 2:
            raise ValueError("leader kills need replicas: a lone server is restarted (serve_restarts)")
        rng = random.Random(self.seed)
        bad = set(rng.sample(range(self.jobs), self.bad_data_jobs))
        times = sorted(rng.uniform(0, self.submit_over_s) for _ in range(self.jobs))
        self.job_plans = [self._job(i, times[i], rng, i in bad) for i in range(self.jobs)]
        kinds = (["sigkill"] * self.sigkills + ["sigterm"] * self.sigterms
                 + ["serve_restart"] * self.serve_restarts + ["leader_kill"] * self.leader_kills
                 + ["disk_full"] * self.disk_fills)
        rng.shuffle(kinds)
        self.fault_plans = [FaultPlan(k, rng.randrange(2**31)) for k in kinds]
        sigkills = [i for i, f in enumerate(self.fault_plans) if f.kind == "sigkill"]
        for n, i in enumerate(sigkills):  # in turn, the first in place: both paths each soak
            self.fault_plans[i] = FaultPlan("sigkill", self.fault_plans[i].seed, AIMS[n % len(AIMS)])

    @staticmethod
    def _job(index: int, at_s: float, rng: random.Random, bad: bool) -> JobPlan:
        tenant = rng.choice(TENANTS)
        config = rng.choices(list(CONFIG_WEIGHTS), weights=list(CONFIG_WEIGHTS.values()))[0]
        workers = rng.choices(SIZES, weights=SIZE_WEIGHTS)[0]
        if workers == 2 and config != FIXED_2_CONFIG:
            workers = SIZES[2]  # two ranks where it can: elastic (fewer reference runs)
        if tenant.max_workers < 2:
            workers = 1  # a size its quota can never run would be refused at submit
        priority = rng.choice(sorted({0, tenant.max_priority // 2, tenant.max_priority}))
        return JobPlan(index, tenant.name, at_s, "short" if bad else config, workers, priority, bad)

    def reference_keys(self) -> list[tuple[str, int]]:
        """(config, world size) of every uninterrupted run the checks compare
        with: one per fixed size that some job of the config has; an elastic
        job compares with any of its config's (within round-off), so a config
        only elastic jobs have gets the cheaper world size 1."""
        keys = {(p.config, p.workers) for p in self.job_plans if not p.bad_data and not p.elastic}
        keys |= {(p.config, 1) for p in self.job_plans if not p.bad_data and p.elastic
                 and not any(c == p.config for c, _ in keys)}
        return sorted(keys, key=lambda k: (list(CONFIGS).index(k[0]), k[1]))

    def tenant(self, name: str) -> TenantPlan:
        return next(t for t in TENANTS if t.name == name)


def chaos_victims(running: list[dict], submitted: dict[str, JobPlan], references: set[str],
                  hits: dict[str, int]) -> list[dict]:
    """The running jobs a rank signal may hit: a tenant's job the soak
    submitted, never a reference run (its curve is what the others are held
    to: it must be uninterrupted), never a job meant to fail on its bad data
    (its cause is that, not a fault), and not one hit MAX_HITS times already."""
    return [j for j in running
            if j["id"] in submitted and j["id"] not in references
            and not submitted[j["id"]].bad_data and hits.get(j["id"], 0) < MAX_HITS]


def aimed_victims(victims: list[dict], aim: str | None) -> list[dict]:
    """The running jobs a SIGKILL of `aim` prefers: "in_place", a job on 2+
    ranks in its first run (no restart, preemption or recovery yet: a run's
    step count, and so its first snapshot, starts where it resumed) that can
    still be killed past SNAPSHOT_BY_STEP and two steps short of its end (the
    kill lands before its last step does: `ripe` says when); "restart", a job
    on one rank past its first step (recovery in place needs a peer to hold
    the lost rank's copy: a lone rank's group restarts). None: any."""
    if aim == "in_place":
        return [j for j in victims if (j.get("workers") or 0) >= 2
                and not (j.get("restarts") or j.get("preemptions") or j.get("recoveries"))
                and j["step"] <= j["spec"]["train"]["steps"] - 2
                and SNAPSHOT_BY_STEP <= j["spec"]["train"]["steps"] - 2]
    if aim == "restart":
        return [j for j in victims if j.get("workers") == 1 and j["step"] >= 1]
    return victims


def ripe(job: dict) -> bool | None:
    """Whether a job `aimed_victims` chose for recovery in place is where the
    SIGKILL should land (True), not there yet (False), or no longer one to
    aim at (None: past the window, another size, restarted, not RUNNING)."""
    if aimed_victims([job], "in_place") == [] or job.get("state", "RUNNING") != "RUNNING":
        return None
    return job["step"] >= SNAPSHOT_BY_STEP
