"""`train.compile` in rank actors: the blocks compile in the warm-up, which the
ranks record as the start-up phase `compiled`; the control plane's start-up
accounting (service/run/launch.py) shows it as its own phase, "compile", and
the first step takes milliseconds, not the compiler's seconds."""

from __future__ import annotations

import time

import pytest

from service.run.launch import startup_line, startup_phases
from tests.workers.engine_spec import engine_spec
from workers.cluster.group import WorkerGroup

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]


def test_compilation_is_a_start_up_phase_of_its_own(fork_pool):
    job = engine_spec(3, data={"source": "synthetic"}, train={"compile": True})
    # One rank: a phase of the rank's own (two would compile the same graphs at once, twice
    # the compiler's CPU on a cold cache: 28 s of the suite's busiest phase).
    with WorkerGroup(1, pool=fork_pool) as group:
        rows = group.train(job)[0]
        timeline = group.startup()
    phases = startup_phases(timeline, first_step_at=rows[0]["wall_time"])
    print(phases)
    assert timeline["built"] < timeline["compiled"] < rows[0]["wall_time"]
    assert phases["compiled"] > 0
    assert rows[0]["step_time_s"] < phases["compiled"]  # the first step compiled nothing
    assert "compile " in startup_line(1, phases) and "model build" in startup_line(1, phases)
    eager = startup_phases({"start": time.time() - 1, "built": time.time()}, time.time())
    assert "compiled" not in eager  # an eager job's start-up is what it was
