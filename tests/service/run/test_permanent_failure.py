"""A rank that fails on bad data (a DataError) fails its job at once, naming
the file, without spending a restart; any other failure still restarts."""

from __future__ import annotations

import pytest

from service.run.lifecycle import GroupOutcome, JobFacts, Outcome, decide
from service.states import JobState as S
from workers.cluster.errors import RankFailedError


def test_bad_data_fails_the_job_without_a_restart():
    job = JobFacts(state=S.RUNNING, total_steps=10, max_restarts=3)
    bad = RankFailedError(1, "rank 1 (pid 9, node n) failed: DataError: s3://b/d/shard-00003-000.bin: "
                             "token id 70000 at token 12 is >= the vocabulary size 512")
    outcome = GroupOutcome.failed(bad)
    assert outcome.kind is Outcome.FAILED and outcome.permanent
    decision = decide(job, outcome)
    assert decision.to is S.FAILED and not decision.launch
    assert "shard-00003-000.bin" in decision.fields["error"]
    assert "restarts" not in decision.fields
    started = decide(JobFacts(state=S.STARTING, total_steps=10), GroupOutcome.start_failed(bad))
    assert started.to is S.FAILED


def test_other_failures_still_restart():
    job = JobFacts(state=S.RUNNING, total_steps=10, max_restarts=3)
    flaky = RankFailedError(0, "rank 0 failed: RuntimeError: Connection reset by peer")
    decision = decide(job, GroupOutcome.failed(flaky))
    assert decision.to is S.RESTARTING and decision.fields["restarts"] == 1


@pytest.mark.parametrize(("summary", "says"), [
    ("DataError: file:///d/corpus.bin: no such file", "its data is bad"),
    ("CompileError: no working C++ compiler (cc1plus not found)", "the compiler cannot run on these "
                                                                  "machines: set train.compile false"),
    ("BaseMismatch: the adapter was trained on base sha 1a2b", "trained on other base weights"),
    ("SpecError: init.uri: tensor model.norm.weight is missing from file:///m", "the spec cannot "
                                                                                "run as written"),
])
def test_a_failure_not_restarted_says_what_caused_it(summary, says):
    """Each cause a restart cannot fix is named as itself: a compiler that cannot run is
    not told to fix its data."""
    failed = RankFailedError(0, f"rank 0 (pid 9, node n) failed: {summary}\nTraceback ...")
    for outcome in (GroupOutcome.failed(failed), GroupOutcome.start_failed(failed)):
        assert outcome.permanent
        decision = decide(JobFacts(state=S.RUNNING, total_steps=10), outcome)
        assert decision.to is S.FAILED and "restarts" not in decision.fields
        error = decision.fields["error"]
        assert f"rank 0 (pid 9, node n) failed: {summary}" in error
        cause = error.rsplit("(not restarted: ", 1)[1]
        assert says in cause and cause.endswith(")"), error
        assert ("data" in cause) == summary.startswith("DataError"), error
