"""The soak's pricing of faults (tests/soak/soak_goodput.py) on made-up API
records whose phases are worked out by hand: no server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.soak.soak_goodput import (
    RECOVERY_GRACE_S,
    check_goodput,
    cluster_goodput,
    cost_by_kind,
    fault_costs,
)

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


def recovery(path: list[dict], offset: float, *, seconds: float, in_place: bool, from_step: int,
             to_step: int | None) -> list[dict]:
    """`path` with a recovery event (service/store/recovery_event.py) at `offset`, the
    events after it moved on: from and to the state the job was in then."""
    i = next((k for k, e in enumerate(path) if e["time"] > iso(offset)), len(path))
    state = path[i - 1]["to_state"]
    event = {"id": 0, "time": iso(offset), "from_state": state, "to_state": state, "reason": "",
             "workers": 2, "kind": "recovery",
             "detail": {"ranks": [1], "from_step": from_step, "to_step": to_step, "seconds": seconds,
                        "in_place": in_place, "reason": "rank 1 died"}}
    out = [*path[:i], event, *path[i:]]
    return [{**e, "id": k} for k, e in enumerate(out)]


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
    assert got["disk_full"] == {**faults[2], "cost_s": 0.0, "attempts_ended": 0, "recovered_in_place": 0}
    assert got["sigkill"]["explained_by"] == "restart" and got["sigkill"]["recovered_in_place"] == 0
    by_kind = cost_by_kind(list(got.values()))
    assert by_kind["sigkill"] == {"faults": 1, "attempts_ended": 1, "recovered_in_place": 0,
                                  "median_s": 6.0, "max_s": 6.0, "ending_median_s": 6.0}


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


# Recovered in place, then fell back. Its rank SIGKILLed at 6.5 s, after steps 1 to 3
# (rows at 3, 4, 5 s; step 4's row of 6 s was done again): the loss is seen at 7 s and the
# ranks train on from the snapshot of step 3 at 9 s (its event: 2 s). Killed again at
# 11.2 s, after step 5 (its row of 11 s done again by the next attempt): seen at 11.5 s,
# the group cannot recover (its event at 12 s: 0.5 s) and restarts (12.5 s), the next
# attempt starting at 13 s and its first new step ending at 16 s.
MIXED = job("j-mixed", 20)
MIXED_EVENTS = recovery(recovery(
    events((0, "QUEUED"), (1, "STARTING"), (2, "RUNNING"), (12.5, "RESTARTING"), (13, "STARTING"),
           (14, "RUNNING"), (20, "SUCCEEDED")),
    9, seconds=2.0, in_place=True, from_step=4, to_step=3),
    12, seconds=0.5, in_place=False, from_step=5, to_step=None)
MIXED_ROWS = [row(1, 3), row(2, 4), row(3, 5), row(4, 10), row(5, 16), row(6, 17)]


def mixed(faults: list[dict], path: list[dict] = MIXED_EVENTS) -> dict[str, dict]:
    got = fault_costs(faults, {"j-mixed": MIXED}, {"j-mixed": path}, {"j-mixed": MIXED_ROWS})
    return {f.get("job", f["kind"]) + f"@{f['at'] - T0:g}": f for f in got}


def test_a_sigkill_recovered_in_place_costs_that_recovery_and_a_fallback_after_it_its_restart():
    got = mixed([{"kind": "sigkill", "at": T0 + 6, "killed_at": T0 + 6.5, "job": "j-mixed"},
                 {"kind": "sigkill", "at": T0 + 11, "killed_at": T0 + 11.2, "job": "j-mixed"}])
    first, second = got["j-mixed@6"], got["j-mixed@11"]
    # In place: lost 5 -> 7 s (RUNNING after step 3's row, to the loss seen), recovering
    # 7 -> 9 s (the event's seconds); the attempt goes on, so nothing after the event.
    assert first["explained_by"] == "in_place"
    assert (first["recovered_in_place"], first["attempts_ended"]) == (1, 0)
    assert first["cost_s"] == pytest.approx(4.0)
    assert first["recovery"] == {"in_place": True, "from_step": 4, "to_step": 3, "seconds": 2.0,
                                 "reason": "rank 1 died"}
    # The fallback's window begins where the recovery in place ended (9 s), not at the
    # attempt's start-up: lost 10 -> 11.5 and 12 -> 12.5 s (after step 4's row), its
    # recovering 11.5 -> 12 s, RESTARTING 12.5 -> 13 s and the next start-up 13 -> 16 s.
    assert second["explained_by"] == "fallback"
    assert (second["recovered_in_place"], second["attempts_ended"]) == (0, 1)
    assert second["cost_s"] == pytest.approx(6.0)
    by_kind = cost_by_kind(list(got.values()))["sigkill"]
    assert (by_kind["attempts_ended"], by_kind["recovered_in_place"], by_kind["median_s"]) == (1, 1, 5.0)


def test_a_recovery_in_place_a_sigkill_explains_is_no_server_faults_but_one_none_explains_is():
    leader = {"kind": "leader_kill", "at": T0 + 6, "down_s": 1.0}  # its window: 6 -> 17 s
    got = mixed([leader, {"kind": "sigkill", "at": T0 + 6, "killed_at": T0 + 6.5, "job": "j-mixed"},
                 {"kind": "sigkill", "at": T0 + 11, "killed_at": T0 + 11.2, "job": "j-mixed"}])
    assert (got["leader_kill@6"]["recovered_in_place"], got["leader_kill@6"]["attempts_ended"]) == (0, 0)
    assert got["leader_kill@6"]["cost_s"] == 0.0
    # No signal on the job: the recovery in place and the restart in its window are the leader's.
    alone = mixed([leader])["leader_kill@6"]
    assert (alone["recovered_in_place"], alone["attempts_ended"]) == (1, 1)
    assert alone["cost_s"] == pytest.approx(4.0 + 6.0)


def test_a_sigkill_nothing_followed_is_unexplained_and_one_after_the_last_step_finished():
    quiet = job("j-quiet", 13)
    path = events((0, "QUEUED"), (1, "STARTING"), (2, "RUNNING"), (13, "SUCCEEDED"))
    rows = [row(1, 3), row(2, 4), row(3, 10), row(4, 11)]
    faults = [{"kind": "sigkill", "at": T0 + 5, "killed_at": T0 + 6.5, "job": "j-quiet", "steps": 4},
              {"kind": "sigterm", "at": T0 + 11, "killed_at": T0 + 11.5, "job": "j-quiet", "steps": 4}]
    got = fault_costs(faults, {"j-quiet": quiet}, {"j-quiet": path}, {"j-quiet": rows})
    assert [(f["kind"], f["explained_by"], f["cost_s"]) for f in got] == [
        ("sigkill", None, 0.0), ("sigterm", "finished", 0.0)]
    # A SIGTERM in the last step (only step 4's row after it) ends nothing; a SIGKILL there
    # still needs its recovery, and a SIGTERM before it the job's stop.
    late = [{"kind": "sigterm", "at": T0 + 10, "killed_at": T0 + 10.2, "job": "j-quiet", "steps": 4},
            {"kind": "sigkill", "at": T0 + 10.5, "killed_at": T0 + 10.6, "job": "j-quiet", "steps": 4}]
    got = fault_costs(late, {"j-quiet": quiet}, {"j-quiet": path}, {"j-quiet": rows})
    assert [(f["kind"], f["explained_by"]) for f in got] == [("sigterm", "last_step"), ("sigkill", None)]
    early = [{"kind": "sigterm", "at": T0 + 5, "killed_at": T0 + 5.5, "job": "j-quiet", "steps": 4}]
    got = fault_costs(early, {"j-quiet": quiet}, {"j-quiet": path}, {"j-quiet": rows})
    assert [f["explained_by"] for f in got] == [None]
    assert cost_by_kind(got)["sigterm"]["ending_median_s"] is None  # it ended nothing
    # A kill the job never trained past before a second one landed: one outage, the second's.
    twice = [{"kind": "sigkill", "at": T0 + 5, "killed_at": T0 + 6.5, "job": "j-quiet", "steps": 4},
             {"kind": "sigkill", "at": T0 + 7, "killed_at": T0 + 7.5, "job": "j-quiet", "steps": 4}]
    got = fault_costs(twice, {"j-quiet": quiet}, {"j-quiet": path}, {"j-quiet": rows})
    assert [f["explained_by"] for f in got] == ["with_next", None]
    # A recovery that began over RECOVERY_GRACE_S after the kill is not the kill's.
    late = recovery(path, 8 + RECOVERY_GRACE_S, seconds=1.0, in_place=True, from_step=3, to_step=3)
    got = fault_costs(faults[:1], {"j-quiet": quiet}, {"j-quiet": late}, {"j-quiet": rows})
    assert got[0]["explained_by"] is None and got[0]["recovered_in_place"] == 0
