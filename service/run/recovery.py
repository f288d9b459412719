"""What an interruption cost once the job trains again: recovery time and
lost steps, as metrics of the first step of the new attempt (the metrics
row's RECOVERY_FIELDS, workers/schema/metrics_row.py), whether it follows a
failure (a restart) or a preemption. Whether a failed job restarts, and
after how long, is the restart policy's (service/scheduling/restart.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from service.states import JobState as S

INTERRUPTIONS = {S.RESTARTING: "restart", S.PREEMPTING: "preemption"}


@dataclass
class Interruption:
    """An attempt that follows a failure or a preemption: when the old one
    stopped (the event that said so) and the last step it was seen to take."""

    kind: str  # "restart" | "preemption" | "recovery" (in place: workers/cluster/replace.py)
    since: float  # epoch seconds
    last_step: int

    @classmethod
    def before(cls, store, job) -> Interruption | None:
        """The interruption the job's current attempt recovers from, if any:
        its latest RESTARTING or PREEMPTING event since it last ran."""
        if not job.step:
            return None
        for event in reversed(store.events(job.id)):
            if event.to_state is S.RUNNING and event.from_state is not S.RUNNING:
                return None  # it ran since: nothing to recover from
            if event.to_state in INTERRUPTIONS and event.from_state is not event.to_state:
                return cls(INTERRUPTIONS[event.to_state], event.time.timestamp(), job.step)
        return None

    def measure(self, first_row: dict) -> dict:
        """What to add to the first metrics row of the new attempt: its RECOVERY_FIELDS."""
        resumed_from = int(first_row.get("resumed_from", first_row["step"] - 1))
        ended = float(first_row.get("wall_time") or time.time())
        return {
            "recovery_s": max(0.0, ended - self.since),
            "lost_steps": max(0, self.last_step - resumed_from),
            "recovered_from": self.kind,
        }
