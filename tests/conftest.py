"""Fixtures shared by every test module.

`ray_cluster`: ONE local Ray cluster for the whole session (starting one takes
seconds and each rank actor ~750 MB), for any test that needs Ray:

    pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

Its head runs Ray's dashboard, bound to 127.0.0.1, for Ray's public state API
(`ray.util.state.list_actors`, ...): what the leak checks read.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.module_order import read_costs, slowest_first
from tests.ray_state import ClusterState

RAY_CPUS = 4  # logical CPUs: world sizes up to 4 fit, even on a 2-core machine


@pytest.fixture(scope="session")
def ray_cluster():
    """A fresh local cluster (never one found on the machine), token auth on;
    yields the `ray.init` context and shuts the cluster down at the end."""
    import ray

    from workers.engine.distributed import LOOPBACK, free_port

    context = ray.init(
        address="local",  # a cluster of our own: never attach to another's `ray start`
        # A namespace of its own, as `brigade serve` has (service/run/ray_cluster.py): the pool's
        # and groups' detached actors live in it (in an anonymous one the raylet warns of each,
        # on the driver's stdout, which is a CLI's stdout to a test's CliRunner).
        namespace="brigade-tests",
        num_cpus=RAY_CPUS,
        # The state API needs the dashboard: on loopback, at a port of its own
        # (another session's cluster may hold Ray's default one).
        include_dashboard=True,
        dashboard_host=LOOPBACK,
        dashboard_port=free_port(LOOPBACK),
        # Threads: Ray sets each worker's OMP_NUM_THREADS to its whole CPUs (at
        # least 1) and RankActor sets torch's to the same. No job runtime_env for
        # it: one costs ~1 s more per group start (no prestarted workers).
    )
    yield context
    ray.shutdown()


def pytest_collection_modifyitems(config, items):
    """The slowest modules first (tests/module_order.py): what `make test`'s first
    phase hands its processes, given `--no-loadscope-reorder`."""
    items[:] = slowest_first(items, read_costs())


@pytest.fixture(scope="module", autouse=True)
def module_timeline(request):
    """Where BRIGADE_TEST_TIMELINE names a file (`make test`: reports/timeline.tsv),
    one line per module: the pytest process that ran it, the module, its first
    setup's and last teardown's wall clock. `python -m tests.module_times
    --timeline` reads it: how long each process was busy and when it ran out of work."""
    path = os.environ.get("BRIGADE_TEST_TIMELINE")
    start = time.time()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(path, "a") as out:
            out.write(f"{worker}\t{request.node.nodeid}\t{start:.2f}\t{time.time():.2f}\n")


LEAK_GRACE_S = 30  # Ray removes a killed group's placement group and actors asynchronously


@pytest.fixture(scope="module", autouse=True)
def leaves_the_cluster_as_found():
    """A module that used the session's Ray cluster leaves it as it found it:
    every placement group its tests made is gone and every CPU free again once
    its last test and its fixtures end (within LEAK_GRACE_S). One that leaked
    fails (its last test, in teardown), naming what it left, and what it left is
    removed, so that the modules after it find the cluster whole (a group left
    holding one of the 4 CPUs fails every later test that places 4 ranks). By
    module, not by test: a module may keep a group or a server's job from one
    test to the next."""
    import ray

    # the session cluster, if this module starts it, starts empty
    found = ClusterState.now() if ray.is_initialized() else ClusterState(frozenset(), float(RAY_CPUS))
    yield
    if not ray.is_initialized():
        return
    left, free = found.restore(grace_s=LEAK_GRACE_S)
    if left or free < found.cpus:
        pytest.fail(f"this module left the session's Ray cluster other than it found it: placement "
                    f"groups {sorted(left.values())} (now removed), {free:g} of {found.cpus:g} CPUs "
                    "free", pytrace=False)


@pytest.fixture(scope="session")
def shared_ray(ray_cluster) -> str:
    """The session cluster's address, for a `brigade serve` of a test to join
    (tests/e2e/serve_harness.py `Server(..., ray_address=shared_ray)`) in place
    of a Ray head of its own: ~7 s of start-up and its stop saved per server."""
    return ray_cluster.address_info["gcs_address"]


@pytest.fixture(scope="session")
def fork_pool(ray_cluster):
    """The session cluster's fork server, through a rank pool of no warm ranks:
    a group given `pool=fork_pool` forks its CPU ranks from it, as `brigade
    serve`'s groups do (workers/cluster/fork_server.py)."""
    import uuid

    from workers.cluster.pool import RankPool

    pool = RankPool(0, name_prefix=f"tests-{uuid.uuid4().hex[:8]}").start()
    assert pool.wait_warm(180), "the session's fork server did not come up"
    yield pool
    pool.shutdown()


# The S3 server (moto on 127.0.0.1) for any test that stores checkpoints on s3://.
from tests.checkpoints.s3_server import moto_s3, s3_bucket  # noqa: E402,F401
