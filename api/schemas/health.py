"""The service's health (`GET /healthz`) and readiness (`GET /readyz`,
`api.server.routes.health`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class HealthPublic(BaseModel):
    status: str


class ReadyPublic(HealthPublic):
    """GET /readyz: ready, and this replica's part (`ControlViews.role`)."""

    role: Literal["leader", "follower"]  # whether this replica runs the control loop
    leader: str | None  # the replica holding the leader lease (None: none now)
    replica: str  # this replica's name (BRIGADE_REPLICA_NAME)
