"""The soak's pricing of faults (tests/soak/soak_goodput.py) on made-up API
records whose phases are worked out by hand: no server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.soak.soak_goodput import check_goodput, cluster_goodput, cost_by_kind, fault_costs

T0 = 1_800_000_000.0


def iso(offset: float) -> str:
    return datetime.fromtimestamp(T0 + offset, UTC).isoformat()


def events(*path: tuple[float, str]) -> list[dict]:
    out, before = [], None
    for i, (offset, state) in enumerate(path):
        out.append({"id": i, "time": iso(offset), "from_state": before, "to_state": state,
                    "reason": "", "workers": 2})
        before = state
    return out


def job(job_id: str, end: float) -> dict:
    return {"id": job_id, "name": job_id, "created_at": iso(0), "finished_at": iso(end)}


def row(step: int, ended: float) -> dict:
    return {"step": step, "wall_time": T0 + ended, "step_time_s": 1.0}


# Killed at 6.5 s in its first attempt: steps 1 and 2 (rows at 3 and 4 s) survive,
# the attempt's RUNNING after step 2 (4 -> 7 s) is lost, RESTARTING (7 -> 8 s) and
# the next start-up up to its first step's end (8 -> 10 s) recovering: 3 + 3 = 6 s.
KILLED = job("j-killed", 13)
KILLED_EVENTS = events((0, "QUEUED"), (1, "STARTING"), (2, "RUNNING"), (7, "RESTARTING"),
                       (8, "STARTING"), (9, "RUNNING"), (13, "SUCCEEDED"))
KILLED_ROWS = [row(1, 3), row(2, 4), row(3, 10), row(4, 11)]
# Restarted at 31 s, while the server was down (30 -> 33 s): 21 -> 31 s lost after its
# only row, 31 -> 32 s restarting, 32 -> 34 s its next start-up: 13 s.
BYSTANDER = job("j-bystander", 40)
BYSTANDER_EVENTS = events((0, "QUEUED"), (18, "STARTING"), (19, "RUNNING"), (31, "RESTARTING"),
                          (32, "STARTING"), (33, "RUNNING"), (40, "SUCCEEDED"))
BYSTANDER_ROWS = [row(1, 21), row(2, 34), row(3, 35)]


def priced(faults: list[dict]) -> list[dict]:
    jobs = {KILLED["id"]: KILLED, BYSTANDER["id"]: BYSTANDER}
    return fault_costs(faults, jobs, {KILLED["id"]: KILLED_EVENTS, BYSTANDER["id"]: BYSTANDER_EVENTS},
                       {KILLED["id"]: KILLED_ROWS, BYSTANDER["id"]: BYSTANDER_ROWS})


def test_a_rank_signal_costs_its_attempt_lost_and_recovering_and_a_server_restart_its_bystanders():
    faults = [
        {"kind": "sigkill", "at": T0 + 5, "killed_at": T0 + 6.5, "job": "j-killed"},
        {"kind": "serve_restart", "at": T0 + 30, "down_s": 3.0},
        {"kind": "disk_full", "at": T0 + 50, "full_s": 4.0, "saves_failed_in": ["j-x"]},
        {"kind": "sigterm", "at": T0 + 60, "skipped": "no running job to hit within 60 s"},
    ]
    got = {f["kind"]: f for f in priced(faults)}
    assert set(got) == {"sigkill", "serve_restart", "disk_full"}  # a skipped fault is no fault
    assert got["sigkill"]["cost_s"] == pytest.approx(6.0)
    assert got["serve_restart"]["cost_s"] == pytest.approx(13.0)
    assert got["serve_restart"]["attempts_ended"] == 1
    assert got["disk_full"] == {**faults[2], "cost_s": 0.0, "attempts_ended": 0}
    by_kind = cost_by_kind(list(got.values()))
    assert by_kind["sigkill"] == {"faults": 1, "attempts_ended": 1, "median_s": 6.0, "max_s": 6.0}


def test_a_restart_a_rank_signal_explains_is_not_also_the_servers():
    faults = [{"kind": "sigkill", "at": T0 + 29, "killed_at": T0 + 30.5, "job": "j-bystander"},
              {"kind": "serve_restart", "at": T0 + 30, "down_s": 3.0}]
    got = {f["kind"]: f for f in priced(faults)}
    assert got["sigkill"]["cost_s"] == pytest.approx(13.0)
    assert got["serve_restart"]["attempts_ended"] == 0 and got["serve_restart"]["cost_s"] == 0.0


def test_a_job_hit_twice_pays_each_fault_once():
    # Killed at 6.5 s (as KILLED: 6 s) and again at 13 s, after its second attempt's
    # first new step (10 s): 11 -> 14 s lost, 14 -> 17 s recovering (its third
    # attempt's first step ends at 17 s). The second attempt's start-up is the first's.
    twice = job("j-twice", 20)
    path = events((0, "QUEUED"), (1, "STARTING"), (2, "RUNNING"), (7, "RESTARTING"), (8, "STARTING"),
                  (9, "RUNNING"), (14, "RESTARTING"), (15, "STARTING"), (16, "RUNNING"),
                  (20, "SUCCEEDED"))
    rows = [row(1, 3), row(2, 4), row(3, 10), row(4, 11), row(5, 17), row(6, 18)]
    faults = [{"kind": "sigkill", "at": T0 + 5, "killed_at": T0 + 6.5, "job": "j-twice"},
              {"kind": "sigterm", "at": T0 + 12, "killed_at": T0 + 13, "job": "j-twice"}]
    got = {f["kind"]: f["cost_s"] for f in fault_costs(faults, {"j-twice": twice},
                                                        {"j-twice": path}, {"j-twice": rows})}
    assert got == {"sigkill": pytest.approx(6.0), "sigterm": pytest.approx(6.0)}


def test_a_jobs_phases_off_their_wall_time_or_a_goodput_over_one_are_named():
    phases = {"queued": 1.0, "starting": 1.0, "training": 7.0, "data_wait": 0.0, "eval": 0.0,
              "checkpoint_stall": 0.5, "recovering": 0.5, "lost": 0.0, "suspended": 0.0}
    good = {"wall_s": 10.0, "phases": phases, "goodput": 0.7}
    assert check_goodput(KILLED, good) == []
    assert "sum to 10.00 s, wall 10.30 s" in check_goodput(KILLED, {**good, "wall_s": 10.3})[0]
    assert "not within 0..1" in check_goodput(KILLED, {**good, "goodput": 1.2})[0]
    assert "negative" in check_goodput(KILLED, {**good, "phases": {**phases, "lost": -0.5,
                                                                      "training": 7.5}})[0]


def test_the_clusters_goodput_is_the_soak_tenants_training_over_their_held_worker_seconds():
    usage = {"tenants": [
        {"tenant": "admin", "phases": {"training": 100.0, "starting": 10.0}},  # references: left out
        {"tenant": "a", "phases": {"training": 30.0, "recovering": 10.0, "suspended": 20.0}},
        {"tenant": "b", "phases": {"training": 10.0, "lost": 10.0}},
    ]}
    got = cluster_goodput(usage, {"a", "b"})
    assert got["goodput"] == pytest.approx(40.0 / 60.0, abs=1e-4)
    assert got["worker_seconds"] == 80.0
    assert cluster_goodput({"tenants": [{"tenant": "a", "worker_seconds": 5.0}]}, {"a"})["goodput"] is None
