"""Chaos: real faults on real processes against one `brigade serve`.

Every scenario ends with its job SUCCEEDED on the loss curve of the
uninterrupted run of the same spec, bitwise (the same world size, gloo on
CPUs), having redone no more than a checkpoint interval of steps (except
where the latest checkpoint itself is corrupt: see that test), and with no
actor, placement group or rank process of the job left on the cluster.
The one exception is the job whose data is bad in a way only its ranks can
see: it ends FAILED at once, without spending a restart, with the file and
the cause in `error`.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from chaos_harness import (
    INTERVAL,
    PG_TIMEOUT_S,
    STEPS,
    PidWatch,
    RayProbe,
    alive,
    assert_nothing_left,
    chaos_spec,
    checkpoint_dir,
    committed_steps,
    free_bytes,
    metrics,
    rank_pids,
    start_server,
    states,
    tmpfs,
    tree_bytes,
    wait_for,
)

from tests.broken_data import SHARD, write_out_of_vocabulary_dataset

# alone (make test's second phase, docs/testing.md): a hung rank is found within BRIGADE_PG_TIMEOUT_S (5 s here)
pytestmark = [pytest.mark.timeout(240), pytest.mark.alone]
rng = random.Random(6)


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_ray):
    srv = start_server(tmp_path_factory.mktemp("chaos"), shared_ray)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def probe(server, shared_ray):
    p = RayProbe(address=shared_ray)
    yield p
    p.close()


@pytest.fixture(scope="module")
def reference(server):
    """The uninterrupted run, submitted first: it trains while the first scenario does."""
    job = server.submit(chaos_spec("reference"))

    def losses() -> dict[int, float]:
        wait_for(server, job["id"], lambda j: j["state"] == "SUCCEEDED", every_s=0.5)
        return {row["step"]: row["loss"] for row in metrics(server, job["id"])}

    cached: dict = {}
    return lambda: cached.setdefault("losses", losses())


def running_past(step: int):
    return lambda j: j["state"] == "RUNNING" and j["step"] >= step


def attempt_rows(server, job_id) -> list[dict]:
    """The first metrics row of every attempt after the first (they carry the recovery)."""
    return [row for row in metrics(server, job_id) if row.get("recovered_from")]


def checkpointed_since_resuming(server, job: dict, restarts: int) -> bool:
    """The job's attempt after `restarts` restarts has taken a step (its first
    row carries the recovery) and committed a checkpoint past where it resumed."""
    rows = attempt_rows(server, job["id"])
    if len(rows) != restarts:
        return False
    resumed = rows[-1]["resumed_from"] if rows else 0
    return (job["latest_checkpoint"] or {}).get("step", 0) > resumed


def assert_on_the_reference_curve(server, job_id, reference) -> None:
    rows = metrics(server, job_id)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    straight = reference()
    assert rows[-1]["loss"] == straight[STEPS]  # the final loss, bitwise
    assert {r["step"]: r["loss"] for r in rows} == straight  # and every step's


def finish(server, probe, job_id, watch: PidWatch, reference) -> dict:
    done = wait_for(server, job_id, lambda j: j["state"] in ("SUCCEEDED", "FAILED"), every_s=0.3)
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["error"] is None  # the faults it survived are in its events
    assert done["step"] == STEPS
    assert_on_the_reference_curve(server, job_id, reference)
    assert_nothing_left(probe, job_id, watch.pids)
    return done


def sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


# -- ranks killed ---------------------------------------------------------------


def test_sigkill_a_random_rank_mid_step_three_times(server, probe, reference):
    # Recovery in place (the default): each kill replaces the rank, the other keeps
    # its process, every rank restores the newest in-memory snapshot; the attempt and
    # the curve go on (workers/cluster/replace.py).
    job = server.submit(chaos_spec("kill3"))
    watch = PidWatch(server, job["id"])
    for kill in range(3):
        floor = INTERVAL * (kill + 1) + 2
        wait_for(server, job["id"], lambda j: running_past(floor)(j) and j["recoveries"] == kill
                 and len(rank_pids(server, j["id"])) == 2)
        pids = watch.sample()
        victim = rng.randrange(len(pids))
        sigkill(pids[victim])
        wait_for(server, job["id"], lambda j: j["recoveries"] == kill + 1
                 or j["state"] != "RUNNING")
        now = watch.sample()
        assert now[1 - victim] == pids[1 - victim], (pids, now)  # the survivor kept its process
        assert now[victim] != pids[victim]
    done = finish(server, probe, job["id"], watch, reference)
    assert (done["restarts"], done["recoveries"], done["preemptions"]) == (0, 3, 0)
    events = server.get(f"/v1/jobs/{job['id']}/events")
    recoveries = [e["detail"] for e in events if e.get("kind") == "recovery"]
    assert [d["in_place"] for d in recoveries] == [True] * 3, recoveries
    for detail in recoveries:
        assert 0 <= detail["from_step"] - detail["to_step"] <= 2 * INTERVAL, detail
        assert 0 < detail["seconds"] < 60
    rows = attempt_rows(server, job["id"])
    assert len(rows) == 3 and {row["recovered_from"] for row in rows} == {"recovery"}, rows
    assert "RESTARTING" not in states(server, job["id"])
    assert states(server, job["id"]).count("STARTING") == 1  # one attempt, from start to end


def test_sigkill_a_rank_while_it_writes_a_checkpoint(server, probe, reference):
    job = server.submit(chaos_spec("kill-in-save", in_place=False))
    watch = PidWatch(server, job["id"])
    wait_for(server, job["id"], lambda j: running_past(2)(j) and rank_pids(server, j["id"]))
    pids = watch.sample()
    directory = checkpoint_dir(server, job["id"])
    torn = None
    deadline = time.monotonic() + 120
    while torn is None and time.monotonic() < deadline:
        # A step directory with shards but no manifest yet: a save being written.
        for name in os.listdir(directory) if directory.is_dir() else []:
            step_dir = directory / name
            files = set(os.listdir(step_dir)) if step_dir.is_dir() else set()
            if any(f.endswith(".distcp") for f in files) and "manifest.json" not in files:
                sigkill(pids[0])  # rank 0 writes the manifest: it never will now
                torn = int(name[5:])
                break
        time.sleep(0.001)
    assert torn is not None, "never saw a save in flight"
    time.sleep(1.0)
    assert not (directory / f"step-{torn:09d}" / "manifest.json").exists(), "the save committed first"
    done = finish(server, probe, job["id"], watch, reference)
    assert done["restarts"] == 1
    [recovery] = attempt_rows(server, job["id"])
    assert recovery["resumed_from"] == torn - INTERVAL  # the torn step was never loaded
    assert recovery["lost_steps"] <= INTERVAL


def test_a_stopped_rank_is_found_hung_within_the_timeout_and_the_job_resumes(
        server, probe, reference):
    job = server.submit(chaos_spec("sigstop", in_place=False))
    watch = PidWatch(server, job["id"])
    wait_for(server, job["id"], lambda j: running_past(INTERVAL + 2)(j) and rank_pids(server, j["id"]))
    pids = watch.sample()
    rank = rng.randrange(len(pids))
    os.kill(pids[rank], signal.SIGSTOP)  # alive, holding its sockets open, answering nothing
    stopped_at = time.monotonic()
    try:
        wait_for(server, job["id"], lambda j: j["state"] == "RESTARTING" or j["restarts"] > 0,
                 every_s=0.05)
        detected_s = time.monotonic() - stopped_at
        assert detected_s <= PG_TIMEOUT_S + 10, detected_s
        restarting = [e for e in server.get(f"/v1/jobs/{job['id']}/events")
                      if e["to_state"] == "RESTARTING"]
        assert f"rank {rank} (pid {pids[rank]}" in restarting[0]["reason"], restarting
        assert "did not answer" in restarting[0]["reason"]
        done = finish(server, probe, job["id"], watch, reference)  # the stopped pid is gone too
    finally:
        if alive(pids[rank]):
            os.kill(pids[rank], signal.SIGKILL)
    assert done["restarts"] == 1
    [recovery] = attempt_rows(server, job["id"])
    assert recovery["recovered_from"] == "restart" and recovery["lost_steps"] <= INTERVAL


def test_sigterm_a_rank_checkpoints_and_requeues_losing_no_step(server, probe, reference):
    job = server.submit(chaos_spec("sigterm"))
    watch = PidWatch(server, job["id"])
    wait_for(server, job["id"], lambda j: running_past(INTERVAL + 3)(j) and rank_pids(server, j["id"]))
    pids = watch.sample()
    rank = rng.randrange(len(pids))
    os.kill(pids[rank], signal.SIGTERM)
    done = finish(server, probe, job["id"], watch, reference)
    assert done["preemptions"] == 1 and done["restarts"] == 0
    events = server.get(f"/v1/jobs/{job['id']}/events")
    preempting = [e for e in events if e["to_state"] == "PREEMPTING"]
    assert len(preempting) == 1 and f"rank {rank} (pid {pids[rank]}" in preempting[0]["reason"]
    assert "SIGTERM" in preempting[0]["reason"]
    assert [e["to_state"] for e in events] == [
        "QUEUED", "STARTING", "RUNNING", "PREEMPTING", "QUEUED", "STARTING", "RUNNING", "SUCCEEDED"]
    [recovery] = attempt_rows(server, job["id"])
    assert recovery["recovered_from"] == "preemption"
    assert recovery["lost_steps"] == 0  # the emergency checkpoint was of the last step taken
    stopped = recovery["resumed_from"]  # where the emergency checkpoint was taken
    rows = {r["step"]: r for r in metrics(server, job["id"])}
    assert rows[stopped].get("checkpoint_step") == stopped


# -- checkpoints corrupt, storage gone --------------------------------------------


def test_a_corrupt_latest_checkpoint_is_passed_over_at_restart(server, probe, reference):
    job = server.submit(chaos_spec("corrupt", in_place=False))
    watch = PidWatch(server, job["id"])
    directory = checkpoint_dir(server, job["id"])
    wait_for(server, job["id"], lambda j: running_past(2 * INTERVAL)(j)
             and len(committed_steps(directory)) >= 2 and rank_pids(server, j["id"]))
    pids = watch.sample()
    latest = committed_steps(directory)[-1]
    shard = directory / f"step-{latest:09d}" / "__1_0.distcp"
    with open(shard, "r+b") as f:  # one flipped byte: the size still matches its manifest
        f.seek(os.path.getsize(shard) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    sigkill(pids[rng.randrange(len(pids))])
    done = finish(server, probe, job["id"], watch, reference)
    assert done["restarts"] == 1
    [recovery] = attempt_rows(server, job["id"])
    assert recovery["resumed_from"] == latest - INTERVAL  # the previous checkpoint
    # The steps after the corrupt checkpoint are redone too: up to two intervals,
    # not one (a corrupt checkpoint costs its interval; nothing can save those).
    assert recovery["lost_steps"] <= 2 * INTERVAL


def test_storage_that_fails_for_a_while_does_not_stop_training(server, probe, reference):
    job = server.submit(chaos_spec("storage"))
    watch = PidWatch(server, job["id"])
    directory = checkpoint_dir(server, job["id"])
    wait_for(server, job["id"], lambda j: running_past(INTERVAL + 1)(j)
             and committed_steps(directory) and rank_pids(server, j["id"]))
    watch.sample()
    aside = directory.with_name("checkpoints.aside")
    went = time.time()
    os.rename(directory, aside)  # the storage goes away: a file where the directory was
    directory.write_text("the checkpoint storage is unavailable")
    failed = lambda: [r for r in metrics(server, job["id"]) if r.get("checkpoint_error")]  # noqa: E731
    wait_for(server, job["id"], lambda j: len(failed()) >= 2, every_s=0.2)
    directory.unlink()  # ... and comes back
    os.rename(aside, directory)
    back = time.time()
    done = finish(server, probe, job["id"], watch, reference)
    assert done["restarts"] == 0  # no failure: training went on
    failures = failed()
    # The steps the ranks had ended as the storage went and came back, by their rows' own
    # times (the store's step lags the ranks by a poll or more): the saves that failed were
    # begun in the outage or cut by it, and an async save's failure is told at the next save.
    rows = [r for r in metrics(server, job["id"]) if r.get("wall_time") is not None]
    outage_began = max((r["step"] for r in rows if r["wall_time"] <= went), default=0)
    outage_ended = max((r["step"] for r in rows if r["wall_time"] <= back), default=0)
    assert all(outage_began < r["step"] <= outage_ended + INTERVAL for r in failures), (
        outage_began, outage_ended, [(r["step"], r["checkpoint_error"]) for r in failures])
    assert all("checkpoint of step" in r["checkpoint_error"] for r in failures)
    assert max(r["checkpoint_failures"] for r in failures) == len(failures)
    log = [line["line"] for line in server.get(f"/v1/jobs/{job['id']}/logs")]
    assert sum("failed saves in this attempt" in line for line in log) == len(failures)
    # Saving resumed: the last checkpoints are after the outage, and all of them verify.
    listed = [c["step"] for c in server.get(f"/v1/jobs/{job['id']}/checkpoints")]
    assert listed[-1] == STEPS and listed[0] > max(r["step"] for r in failures)
    assert committed_steps(directory) == listed  # no half-written step left behind
    assert done["latest_checkpoint"]["step"] == STEPS


def test_a_full_disk_fails_the_save_on_every_rank_and_saving_resumes_once_freed(
        server, probe, reference, tmp_path):
    # Where mounting is refused: skips here (fails under CI), before any job.
    with tmpfs(tmp_path / "probe", "1m"):
        pass
    # keep_last 2 (not part of the curve): two checkpoints and one being written
    # fit the 2 MiB disk with room to spare, a checkpoint being ~18% of it.
    job = server.submit(chaos_spec("full-disk", checkpoint={"every_steps": INTERVAL, "keep_last": 2}, in_place=False))
    watch = PidWatch(server, job["id"])
    directory = checkpoint_dir(server, job["id"])
    with tmpfs(directory, "2m"):
        assert server.job(job["id"])["step"] < INTERVAL, "it saved before the disk was mounted"
        wait_for(server, job["id"], lambda j: running_past(INTERVAL + 1)(j)
                 and committed_steps(directory) == [INTERVAL] and rank_pids(server, j["id"]))
        pids = watch.sample()
        checkpoint_bytes = tree_bytes(directory / f"step-{INTERVAL:09d}")
        assert checkpoint_bytes > 0.15 * (2 << 20)
        # Leave half a checkpoint free: the next save fills the disk while it writes.
        filler = directory / "filler.bin"
        filler.write_bytes(b"\0" * (free_bytes(directory) - checkpoint_bytes // 2))
        failed = lambda: [r for r in metrics(server, job["id"]) if r.get("checkpoint_error")]  # noqa: E731
        wait_for(server, job["id"], lambda j: len(failed()) >= 2, every_s=0.2)
        for row in failed():  # the cause as the writer saw it: ENOSPC, or torch's short write
            assert f"writing step {row['step']} failed" in row["checkpoint_error"], row
            assert any(cause in row["checkpoint_error"] for cause in (
                "No space left on device", "unexpected pos")), row["checkpoint_error"]
        # Every rank had the same outcome (else one would wait for the others in
        # a collective and the job would restart), and nothing partial is listed.
        assert server.job(job["id"])["restarts"] == 0
        assert [c["step"] for c in server.get(f"/v1/jobs/{job['id']}/checkpoints")] == [INTERVAL]
        assert committed_steps(directory) == [INTERVAL]
        # ... or loaded: a restart while the disk is full resumes from the last commit.
        sigkill(pids[rng.randrange(len(pids))])
        wait_for(server, job["id"], lambda j: j["restarts"] == 1 and attempt_rows(server, j["id"]))
        [recovery] = attempt_rows(server, job["id"])
        assert recovery["resumed_from"] == INTERVAL
        filler.unlink()  # space is freed: the next interval saves again
        done = finish(server, probe, job["id"], watch, reference)
        listed = [c["step"] for c in server.get(f"/v1/jobs/{job['id']}/checkpoints")]
        assert listed == [STEPS - INTERVAL, STEPS]
        assert committed_steps(directory) == listed  # no torn step left on the disk
        assert sorted(os.listdir(directory)) == [f"step-{s:09d}" for s in listed]
    assert done["latest_checkpoint"]["step"] == STEPS


# -- the control plane killed -------------------------------------------------------


def test_sigkill_the_controller_mid_run_and_while_restarting(server, probe, reference):
    # The reference run first: beside it the two jobs would not fit the cluster
    # together (run alone, this test used to find one queued behind it and the
    # other finished before the kill).
    reference()
    # The job to be killed mid-restart first: where the pool has warm ranks for one job
    # only, it takes them and runs ahead, so the other is still far from its end when the
    # server dies (ahead, it could finish before the kill, with nothing to reconcile).
    restarting = server.submit(chaos_spec("ctl-restarting", in_place=False))
    mid_run = server.submit(chaos_spec("ctl-mid-run", in_place=False))
    runs, restarts = PidWatch(server, mid_run["id"]), PidWatch(server, restarting["id"])
    for job in (restarting, mid_run):
        wait_for(server, job["id"], lambda j: running_past(INTERVAL + 2)(j) and rank_pids(server, j["id"]))
    runs.sample()
    sigkill(restarts.sample()[0])
    wait_for(server, restarting["id"], lambda j: j["state"] == "RESTARTING", every_s=0.01)
    before_kill = server.job(mid_run["id"])
    server.kill()  # mid-run for one job, mid-restart for the other
    assert before_kill["state"] == "RUNNING", before_kill  # else the kill landed after its end
    server.start()
    for job, watch in ((mid_run, runs), (restarting, restarts)):
        done = finish(server, probe, job["id"], watch, reference)
        events = server.get(f"/v1/jobs/{job['id']}/events")
        assert any("reconciled" in e["reason"] for e in events), "\n\n".join(
            server.event_lines(j["id"]) for j in (mid_run, restarting))
        if job is restarting:
            assert done["restarts"] == 1, server.event_lines(job["id"])
            noted = [e for e in events if "reconciled" in e["reason"]]
            assert noted[0]["from_state"] == "RESTARTING", noted  # the kill landed mid-restart
            [recovery] = attempt_rows(server, job["id"])
            assert recovery["lost_steps"] <= INTERVAL
        else:
            # Its group lived on: reattached to it (no new attempt, no row of a recovery).
            assert done["restarts"] == 0 and not attempt_rows(server, job["id"])
            assert any("reattached to worker group" in e["reason"] for e in events), \
                server.event_lines(job["id"])
            assert states(server, job["id"]).count("STARTING") == 1, server.event_lines(job["id"])


# -- a job that cannot succeed --------------------------------------------------------


def test_a_job_whose_data_fails_its_ranks_fails_at_once_naming_the_file(server, probe):
    # Token ids past the vocabulary: the index, sizes and checksums pass the submit checks;
    # only the ranks reading the tokens see it, and a restart would read the same tokens.
    bad = write_out_of_vocabulary_dataset(
        server.data_dir / "data-store" / "tenants" / "admin" / "data" / "out-of-vocab")
    spec = chaos_spec("bad-data", data={"source": "tokens", "uri": bad}, max_restarts=1)
    job = server.submit(spec)
    watch = PidWatch(server, job["id"])
    done = wait_for(server, job["id"], lambda j: j["state"] in ("FAILED", "SUCCEEDED"), every_s=0.3)
    assert done["state"] == "FAILED"
    assert done["restarts"] == 0 and "RESTARTING" not in states(server, job["id"])
    assert f"DataError: {bad}/{SHARD}: token id 256" in done["error"], done["error"]
    assert done["error"].endswith("(not restarted: its data is bad: fix or replace the file "
                                  "named, then submit again)"), done["error"]
    assert_nothing_left(probe, job["id"], watch.pids)
