"""What the job store raises besides `service.states.IllegalTransition`."""

from __future__ import annotations

from collections.abc import Iterable

from service.states import IllegalTransition, JobState


class JobNotFound(LookupError):
    def __init__(self, job_id: str):
        self.job_id = job_id
        super().__init__(f"no job {job_id}")


class UnexpectedState(IllegalTransition):
    """The caller expected the job in one of some states and it was not (it
    moved on, e.g. was cancelled meanwhile). A refused transition, so an
    `except IllegalTransition` catches it too."""

    def __init__(self, job_id: str, current: JobState, target: JobState,
                 expected: Iterable[JobState]):
        super().__init__(job_id, current, target)
        self.expected = frozenset(expected)
        wanted = ", ".join(sorted(s.value for s in self.expected))
        self.args = (
            f"job {job_id} is {current.value}, not {wanted}: will not move it to {target.value}",
        )

    @property
    def allowed_from(self) -> frozenset[JobState]:
        return self.expected


class JobUnfinished(RuntimeError):
    """A job is deleted only once it has finished (cancel it and wait)."""

    def __init__(self, job_id: str, state: JobState):
        self.job_id, self.state = job_id, state
        super().__init__(f"job {job_id} is {state.value}: only a finished job (SUCCEEDED, "
                         "FAILED, CANCELLED or PRUNED) is deleted; cancel it and wait for it to "
                         "end first")


class ConcurrentUpdate(RuntimeError):
    """A transition lost its compare-and-set to other writers too many times in a row."""

    def __init__(self, job_id: str, tries: int):
        self.job_id = job_id
        super().__init__(f"job {job_id} kept changing underneath; gave up after {tries} tries")


class TenantNotFound(LookupError):
    def __init__(self, tenant_id: str):
        self.tenant_id = tenant_id
        super().__init__(f"no tenant {tenant_id}")


class TenantExists(ValueError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"tenant name {name!r} is taken")


class TenantBusy(RuntimeError):
    """A tenant with jobs not yet finished is not deleted."""

    def __init__(self, tenant_id: str, unfinished: int):
        self.tenant_id, self.unfinished = tenant_id, unfinished
        super().__init__(f"tenant {tenant_id} has {unfinished} unfinished job(s): "
                         "cancel them and wait for them to finish first")


class FlavorNotFound(LookupError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"no flavor {name}")


class FlavorConflict(ValueError):
    """A flavor whose labels are another flavor's, or that a live node
    (`node`) has with the other's: a node would be of both."""

    def __init__(self, name: str, other: str, node: str | None = None):
        self.name, self.other, self.node = name, other, node
        if node is None:
            message = f"flavor {name}'s labels are flavor {other}'s: a node would be of both"
        else:
            message = (f"flavor {name}'s labels and flavor {other}'s are both on live node "
                       f"{node}: it would be of both; give each kind of node labels of its own")
        super().__init__(message)


class FlavorInUse(RuntimeError):
    """A flavor is not deleted while unfinished jobs ask for it, nor while a
    tenant's quota names it (`quota.flavors`)."""

    def __init__(self, name: str, jobs: list[str], tenants: list[str] | None = None):
        self.name, self.jobs, self.tenants = name, jobs, list(tenants or ())
        if jobs:
            message = (f"flavor {name} is used by unfinished job(s) {_some(jobs)}: "
                       "cancel them and wait for them to finish first")
        else:
            message = (f"flavor {name} is named in the quota of tenant(s) {_some(self.tenants)}: "
                       f"remove it there first (PATCH /v1/tenants/ID "
                       f'{{"quota": {{"flavors": {{"{name}": null}}}}}})')
        super().__init__(message)


class QuotaFlavorUnknown(LookupError):
    """A tenant's quota names a flavor that does not exist (`quota.flavors.<name>`)."""

    def __init__(self, name: str, known: list[str]):
        self.name, self.field = name, f"quota.flavors.{name}"
        super().__init__(f"{self.field}: no flavor {name!r} (the flavors: "
                         f"{', '.join(known) or 'none'}): put it first (PUT /v1/flavors/{name})")


def _some(names: list[str]) -> str:
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


class QuotaExceeded(RuntimeError):
    """A submit the tenant's quota refuses: for now (`retryable`: its queue is
    full; 429) or for good (the job could never run under its quota; 403)."""

    def __init__(self, reason: str, *, retryable: bool, field: str = "quota"):
        self.reason, self.retryable, self.field = reason, retryable, field
        super().__init__(reason)


class Deposed(RuntimeError):
    """A write of the control plane's leader refused: another replica holds the
    lease now (a higher fencing token), or this one's lease ran out. The
    replica stops acting as the leader (`service.leadership`)."""

    def __init__(self, replica: str, reason: str):
        self.replica = replica
        super().__init__(f"replica {replica} does not lead the control plane: {reason}")


class SweepNotFound(LookupError):
    def __init__(self, sweep_id: str):
        self.sweep_id = sweep_id
        super().__init__(f"no sweep {sweep_id}")


class SweepUnfinished(RuntimeError):
    """A sweep is deleted only once it and its trials' jobs have finished."""

    def __init__(self, sweep_id: str, why: str):
        self.sweep_id = sweep_id
        super().__init__(f"sweep {sweep_id} {why}: only a finished sweep (SUCCEEDED, FAILED or "
                         "CANCELLED) whose trials have ended is deleted; cancel it and wait first")
