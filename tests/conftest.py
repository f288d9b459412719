"""Fixtures shared by every test module.

`ray_cluster`: ONE local Ray cluster for the whole session (starting one takes
seconds and each rank actor ~750 MB), for any test that needs Ray:

    pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]
"""

from __future__ import annotations

import pytest

RAY_CPUS = 4  # logical CPUs: world sizes up to 4 fit, even on a 2-core machine


@pytest.fixture(scope="session")
def ray_cluster():
    """A fresh local cluster (never one found on the machine), token auth on;
    yields the `ray.init` context and shuts the cluster down at the end."""
    import ray

    context = ray.init(
        address="local",  # a cluster of our own: never attach to another's `ray start`
        num_cpus=RAY_CPUS,
        include_dashboard=False,
        # Ray caps each worker's OpenMP threads at its CPUs; make it 1 whatever
        # the worker asks for, so concurrent ranks do not fight over 2 cores.
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    yield context
    ray.shutdown()
