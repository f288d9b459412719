"""A rank that fails on bad data (a DataError) fails its job at once, naming
the file, without spending a restart; any other failure still restarts."""

from __future__ import annotations

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
