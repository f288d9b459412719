"""The soak, in CI: 100 tiny jobs of 4 tenants (weights 3:2:1:1, quotas of
1 to 3 workers, random priorities, fixed sizes 1 and 2 and elastic 1..2)
arrive over 60 s through two `brigade serve` replicas on one Postgres and
one Ray head (after one uninterrupted reference run per config and world size
the jobs have, alone) while a chaos thread SIGKILLs 6 random ranks (in turn,
of a job of 2+ ranks past its first in-memory snapshot, which recovery in
place (on, automatic) saves, and of a one-rank job, which restarts), SIGTERMs 3
others, SIGKILLs the leading replica twice (another leads within
BRIGADE_LEASE_S + 5 s, no running job restarts for it, the lost one comes
back as a follower) and fills the checkpoint disk (a tmpfs) once. Then every job is SUCCEEDED on its
uninterrupted reference curve, or FAILED for the bad data it was given on
purpose; none lost, none twice, none stuck; every step's metrics row once;
no tenant over its quota at any sample; nothing left on Ray; every job's
events a legal path through the state machine (tests/soak/soak_checks.py);
every job's `recoveries` its events of a recovery in place; every SIGKILL
explained by a recovery (in place, at least once, or a restart), every SIGTERM
by a preemption or the job's last step coming next; every job's
goodput phases summing to its wall time within 2%, and the faults priced: the
cluster's goodput in worker-seconds and each fault kind's median cost, `lost` +
`recovering` of the attempts it ended or of the recovery in place it caused
(tests/soak/soak_goodput.py).

Seeded (the job mix and the fault schedule); `python -m bench.soak` runs a
longer one.
"""

from __future__ import annotations

import pytest

from tests.soak.soak_driver import run_soak
from tests.soak.soak_plan import SoakPlan

# 5.3 and 6.4 min measured here alone on 2 cores, two green runs in a row (7.9 min
# before the references ran alone and fewer, with shorter jobs): the CPU bounds it, every
# rank of every job being a process that imports torch (~4 CPU-s each, ~150 of them).
# Over the suite's budget, so out of the default run: `pytest -m soak tests/soak`.
pytestmark = [pytest.mark.timeout(900), pytest.mark.soak]


def test_a_hundred_jobs_of_four_tenants_survive_the_chaos_thread(tmp_path):
    # Submitted over 300 s: the faults, one after another, find jobs running until the last
    # (over 60 s, faster jobs had all ended before the last four came: "no running job to hit")
    plan = SoakPlan(seed=17, jobs=100, submit_over_s=300, sigkills=6, sigterms=3,
                    serve_restarts=0, leader_kills=2, replicas=2, disk_fills=1, bad_data_jobs=2,
                    fault_gap_s=5, drain_timeout_s=420)
    result = run_soak(plan, tmp_path)
    assert not result.problems, result.explain()
    r = result.report
    assert r["jobs"] == 100 and r["by_state"] == {"FAILED": 2, "SUCCEEDED": 98}, r
    assert r["faults"] == {"disk_full": 1, "leader_kill": 2, "sigkill": 6, "sigterm": 3}, r
    assert r["restarts"] >= 1 and r["preemptions"] >= 1, r  # counters: an early kill has no recovery row
    # Recovery in place is on (automatic, every job of 2+ ranks): every SIGKILL is explained by
    # a recovery, in place (a job of 2+ ranks past its first in-memory snapshot: the SIGKILLs
    # aimed there, soak_plan.aimed_victims), or a restart (a lone rank's job, or a group that
    # could not recover in place: a fallback), or landed after the job's last step ("finished":
    # nothing left to recover; the chaos thread picks jobs short of it).
    sigkills = r["rank_signals_explained"]["sigkill"]
    assert sum(sigkills.values()) == 6 and set(sigkills) <= {"in_place", "fallback", "restart",
                                                             "finished", "with_next"}, r
    assert sigkills.get("in_place", 0) >= 1, r
    assert r["recoveries_in_place"] >= sigkills["in_place"], r  # the jobs' counters say so too
    assert r["failed_saves"] >= 1, r
    assert 0 < r["goodput"]["goodput"] < 1, r["goodput"]  # (the checks say the same, with why)
    # Every rank signal explained, and what one that ended an attempt or was recovered in place
    # cost never nothing, are the driver's checks (`result.problems`, above): a SIGTERM may end
    # nothing (the job's last step came next, "last_step", or had ended), so no median over all.
    assert r["fault_cost_s"]["sigkill"]["ending_median_s"] > 0, r
    print(result.report)
