"""The control plane's counters and histograms: restarts, preemptions and
prunes per tenant, recovery by kind, checkpoint saves from the rows' stall times."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from service.observability import metrics as m
from service.states import JobState as S


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    for metric in m.PROCESS_METRICS:
        reg.register(metric)
    return reg


def test_counters_and_histograms_follow_what_happens():
    reg = registry()

    def value(name, **labels):
        return reg.get_sample_value(name, labels) or 0.0

    before = (value("brigade_job_restarts_total", tenant="t-metrics"),
              value("brigade_job_preemptions_total", tenant="t-metrics"),
              value("brigade_job_prunes_total", tenant="t-metrics"),
              value("brigade_checkpoint_save_duration_seconds_count"),
              value("brigade_job_recovery_duration_seconds_count", kind="preemption"))
    m.count_transition("t-metrics", S.RESTARTING)
    m.count_transition("t-metrics", S.PREEMPTING)
    m.count_transition("t-metrics", S.PRUNED)
    m.count_transition("t-metrics", S.RUNNING)  # not followed
    m.count_transition("t-metrics", S.PRUNING)  # its PRUNED is counted
    m.observe_checkpoint_saves([{"step": 1}, {"step": 2, "checkpoint_step": 2, "checkpoint_stall_s": 0.2}])
    m.observe_recovery("preemption", 3.5)
    after = (value("brigade_job_restarts_total", tenant="t-metrics"),
             value("brigade_job_preemptions_total", tenant="t-metrics"),
             value("brigade_job_prunes_total", tenant="t-metrics"),
             value("brigade_checkpoint_save_duration_seconds_count"),
             value("brigade_job_recovery_duration_seconds_count", kind="preemption"))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 1, 1]
    with m.SCHEDULING_PASS.time():
        pass
    assert value("brigade_scheduling_pass_duration_seconds_count") >= 1
