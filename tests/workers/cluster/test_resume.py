"""Resume from a committed checkpoint at another world size follows the same
loss curve: train at world size 2, checkpoint at step 10, resume at 1, 3, 4
(a global batch of 8: 3 splits it 3, 3, 2); with every optimizer
(tests/workers/engine_spec.py RECIPES), saved at 2 and resumed at 3."""

import uuid

import pytest

from tests.workers.engine_spec import RECIPE_STEPS, RECIPES, engine_spec, recipe_tolerance
from workers.cluster.group import WorkerGroup

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

SECRET = "resume-test-secret-0123456789abcdef"
JOB = engine_spec(30, data={"source": "builtin"}, train={"global_batch_size": 8},
                  checkpoint={"every_steps": 10, "keep_last": 2, "async": True})
RESUME_SIZES = (1, 3, 4)
# On S3 one other size proves the storage path: the world sizes are the same code on any storage.
S3_RESUME_SIZES = (3,)


def losses(metrics):
    return [m["loss"] for m in metrics]


@pytest.fixture(params=["file", "s3"])
def storage(request, tmp_path):
    """(root URI, storage options) on local disk, or on S3 served by moto."""
    if request.param == "file":
        return f"file://{tmp_path}/store", {}
    options = request.getfixturevalue("moto_s3")
    return f"s3://{request.getfixturevalue('s3_bucket')}/{uuid.uuid4().hex[:8]}", options


def target(storage, job: str) -> dict:
    root, options = storage
    return {"root": root, "tenant": "acme", "job": job, "secret": SECRET, "storage_options": options}


def test_resume_at_other_world_sizes_follows_the_same_curve(storage, fork_pool):
    # Ranks forked from the session's fork server, as the service's are.
    # A manifest is bound to its (tenant, job, step): each resume gets its own
    # job, trained at world size 2 to step 10 (bitwise the same state each time).
    sizes = S3_RESUME_SIZES if storage[0].startswith("s3://") else RESUME_SIZES
    jobs = {n: target(storage, f"ws{n}") for n in (2, *sizes)}
    with WorkerGroup(2, pool=fork_pool) as group:
        straight = group.train(JOB)[0]
        saved = {}
        for n, job_target in jobs.items():
            first = group.train(JOB, checkpoint=job_target, stop_after=10)[0]
            assert [m["step"] for m in first] == list(range(1, 11))
            assert first[-1]["checkpoint_step"] == 10
            assert losses(first) == losses(straight[:10])
            saved[n] = group.call("state_digests")[0]
        same_size = group.train(JOB, checkpoint=jobs[2])[0]
    assert len({tuple(sorted(d.items())) for d in saved.values()}) == 1
    # The same world size: bitwise the same losses.
    assert [m["step"] for m in same_size] == list(range(11, 31))
    assert losses(same_size) == losses(straight[10:])

    for n in sizes:
        with WorkerGroup(n, pool=fork_pool) as group:
            # Load only (the run stops where it starts): the state as saved, bitwise.
            assert group.train(JOB, checkpoint=jobs[n], stop_after=10) == [[]] * n
            assert group.call("state_digests")[0] == saved[n]
            resumed = group.train(JOB, checkpoint=jobs[n])[0]
        assert [m["step"] for m in resumed] == list(range(11, 31)), n
        assert losses(resumed) == pytest.approx(losses(straight[10:]), rel=1e-4)


@pytest.fixture(scope="module")
def recipes_resumed(tmp_path_factory, fork_pool) -> dict[str, dict]:
    """Each optimizer: straight at world size 2, saved there at half way,
    then resumed at world size 3 (its state resharded, moments and momentum too)."""
    root = f"file://{tmp_path_factory.mktemp('recipes')}/store"
    jobs = {name: engine_spec(RECIPE_STEPS, data={"source": "builtin"}, train=train,
                              checkpoint={"every_steps": 0}) for name, train in RECIPES.items()}
    out: dict[str, dict] = {name: {} for name in RECIPES}
    with WorkerGroup(2, pool=fork_pool) as group:
        for name, job in jobs.items():
            out[name]["straight"] = group.train(job)[0]
            out[name]["first"] = group.train(job, checkpoint=target((root, {}), name),
                                             stop_after=RECIPE_STEPS // 2)[0]
    with WorkerGroup(3, pool=fork_pool) as group:
        for name, job in jobs.items():
            out[name]["resumed"] = group.train(job, checkpoint=target((root, {}), name))[0]
    return out


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_optimizer_resumes_at_another_world_size_on_the_same_curve(recipes_resumed, recipe):
    runs, half = recipes_resumed[recipe], RECIPE_STEPS // 2
    assert runs["first"][-1]["checkpoint_step"] == half
    assert losses(runs["first"]) == losses(runs["straight"][:half])
    assert [m["step"] for m in runs["resumed"]] == list(range(half + 1, RECIPE_STEPS + 1))
    assert losses(runs["resumed"]) == pytest.approx(losses(runs["straight"][half:]),
                                                    abs=recipe_tolerance(recipe))
    # the lr too: the schedule continues from the step the checkpoint holds
    assert [m["lr"] for m in runs["resumed"]] == [m["lr"] for m in runs["straight"][half:]]


def test_a_rank_killed_while_writing_leaves_the_last_commit_and_a_torn_step_never_loaded(tmp_path, fork_pool):
    import os
    import signal
    import time

    from checkpoints import CheckpointStore
    from workers.cluster.errors import RankLostError

    root = f"file://{tmp_path}/store"
    job_target = target((root, {}), "killed")
    # A model big enough (~3M params, ~40 MB with Adam) that a save takes a while.
    # No in-memory snapshots: the group fails as a whole and resumes from disk, the path
    # this test is about (recovery in place is tests/workers/cluster/test_in_place.py's).
    job = JOB | {"model": {"n_layers": 4, "d_model": 256, "n_heads": 4, "seq_len": 32},
                 "checkpoint": {**JOB["checkpoint"], "memory_every_steps": 0}}
    store = CheckpointStore(root, tenant="acme", job="killed", secret=SECRET.encode())
    step20 = tmp_path / "store/tenants/acme/jobs/killed/checkpoints/step-000000020"

    with WorkerGroup(2, pool=fork_pool) as group:
        run = group.start_training(job, checkpoint=job_target)
        deadline = time.monotonic() + 120
        while not step20.exists():  # the save of step 20 has begun
            assert time.monotonic() < deadline, "step 20 was never written"
            time.sleep(0.002)
        os.kill(group.node_infos[1].pid, signal.SIGKILL)
        with pytest.raises(RankLostError, match="rank 1"):
            run.wait(timeout_s=60)

    assert step20.exists() and not (step20 / "manifest.json").exists(), "the kill came too late"
    assert [c.step for c in store.list_committed()] == [10]
    with WorkerGroup(2, pool=fork_pool) as group:
        assert group.train(job, checkpoint=job_target, stop_after=10) == [[], []]
        assert not step20.exists()  # the torn step is cleaned up at resume
        resumed = group.train(job, checkpoint=job_target)[0]
    assert [m["step"] for m in resumed] == list(range(11, 31))
