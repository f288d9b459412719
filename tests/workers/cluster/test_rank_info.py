"""What a worker group and its ranks tell the control plane: frozen values
(workers/cluster/rank_info.py, group_status.py), built here without Ray."""

import dataclasses
import pickle

import pytest

from workers.cluster.group_status import GroupStatus
from workers.cluster.rank_info import RankInfo, rank_where

INFOS = [RankInfo(node_id="n-a", node_ip="10.0.0.1", pid=101),
         RankInfo(node_id="n-b", node_ip="10.0.0.2", pid=102, gpu_ids=[0])]


def test_a_rank_is_named_with_where_it_runs_once_it_said():
    assert rank_where(1, INFOS) == "rank 1 (pid 102, node 10.0.0.2)"
    assert rank_where(2, INFOS) == "rank 2"  # its actor never started


def test_the_values_are_frozen_and_cross_processes_as_they_are():
    with pytest.raises(dataclasses.FrozenInstanceError):
        INFOS[0].pid = 7  # type: ignore[misc]
    status = GroupStatus(state="preempted", steps=4, step=4, sigterm_ranks=[1], reason="rank 1 ...")
    assert pickle.loads(pickle.dumps(status)) == status
    assert pickle.loads(pickle.dumps(INFOS)) == INFOS
