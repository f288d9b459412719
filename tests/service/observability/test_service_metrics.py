"""The control plane's counters and histograms: restarts, preemptions and
prunes per tenant, recovery by kind, recoveries in place or not, checkpoint
saves from the rows' stall times."""

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


def test_recoveries_are_counted_in_place_or_not():
    reg = registry()

    def value(name, **labels):
        return reg.get_sample_value(name, labels)

    before = {flag: value("brigade_recoveries_total", in_place=flag) for flag in ("true", "false")}
    assert None not in before.values()  # both series exported from the start
    in_place_s = value("brigade_job_recovery_duration_seconds_sum", kind="in_place") or 0.0
    restart_n = value("brigade_job_recovery_duration_seconds_count", kind="restart") or 0.0
    m.observe_recovery_event(True, 0.8)
    m.observe_recovery_event(True, 1.2)
    m.observe_recovery_event(False, 61.0)
    assert value("brigade_recoveries_total", in_place="true") - before["true"] == 2
    assert value("brigade_recoveries_total", in_place="false") - before["false"] == 1
    assert value("brigade_job_recovery_duration_seconds_sum", kind="in_place") - in_place_s == 2.0
    # A fallback's time is its restart's, observed at the restart's first new step.
    assert (value("brigade_job_recovery_duration_seconds_count", kind="restart") or 0.0) == restart_n
