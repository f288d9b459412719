"""Where one rank of a worker group runs, as its actor tells the group when it
starts (or when a restarted driver attaches to it): a frozen value, pickled
by Ray from the rank to the group and handed on to the control plane, which
names the rank's node in errors, restarts a job away from the nodes it lost,
and shows a job's workers.

No Ray and no torch here: the control plane's tests build these by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class RankInfo:
    node_id: str  # Ray's id of the node: what a restart leaves out once the node is gone
    node_ip: str
    pid: int  # the rank's process
    gpu_ids: list[int | str] = field(default_factory=list)  # as Ray gives them (none on a CPU)
    actor_id: str = ""  # the rank actor's Ray id: where a stop signal is addressed (stop_signal.py)

    @property
    def where(self) -> str:
        """The process and node, as errors and events say them."""
        return f"pid {self.pid}, node {self.node_ip}"


def rank_where(rank: int, infos: Sequence[RankInfo]) -> str:
    """The rank as errors name it: "rank N (pid P, node IP)", or "rank N"
    where its actor never said (it did not start)."""
    return f"rank {rank} ({infos[rank].where})" if rank < len(infos) else f"rank {rank}"
