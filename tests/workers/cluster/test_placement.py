"""What can never be placed, on node tables of several shapes: pure, no
cluster (the group's own test checks the same refusal against Ray)."""

from __future__ import annotations

import pytest

from workers.cluster.errors import CapacityError
from workers.cluster.placement import check_capacity, gang_bundles

TWO_CPU_NODES = [{"CPU": 4.0}, {"CPU": 4.0}]
MIXED = [{"CPU": 8.0}, {"CPU": 8.0, "GPU": 2.0}, {"CPU": 2.0, "GPU": 1.0}]


@pytest.mark.parametrize(
    ("nodes", "workers", "bundle", "strategy"),
    [
        (TWO_CPU_NODES, 8, {"CPU": 1.0}, "PACK"),  # exactly the cluster
        (TWO_CPU_NODES, 2, {"CPU": 4.0}, "SPREAD"),  # one node each
        (TWO_CPU_NODES, 2, {"CPU": 0.5}, "STRICT_PACK"),
        (TWO_CPU_NODES, 2, {"CPU": 1.0}, "STRICT_SPREAD"),
        (MIXED, 3, {"CPU": 1.0, "GPU": 1.0}, "PACK"),  # 3 GPUs over two nodes
        (MIXED, 2, {"CPU": 2.0, "GPU": 1.0}, "STRICT_SPREAD"),
        (MIXED, 6, {"CPU": 0.5, "GPU": 0.5}, "PACK"),  # fractions add up to 3 GPUs
        ([{"CPU": 1.0}] * 3, 3, {"CPU": 0.3333}, "STRICT_PACK"),  # Ray's 1e-4 units
    ],
)
def test_what_fits_is_not_refused(nodes, workers, bundle, strategy):
    check_capacity(nodes, workers, bundle, strategy)


@pytest.mark.parametrize(
    ("nodes", "workers", "bundle", "strategy", "says"),
    [
        (TWO_CPU_NODES, 9, {"CPU": 1.0}, "PACK",
         "9 workers x 1 CPU need 9 CPU, but the cluster has 8 CPU in total"),
        (TWO_CPU_NODES, 1, {"CPU": 5.0}, "SPREAD",
         "one worker needs 5 CPU, but the largest node has 4"),
        (TWO_CPU_NODES, 5, {"CPU": 1.0}, "STRICT_PACK",
         "STRICT_PACK puts all 5 workers on one node: they need 5 CPU, but the largest node has 4"),
        (TWO_CPU_NODES, 3, {"CPU": 1.0}, "STRICT_SPREAD",
         "STRICT_SPREAD puts each of the 3 workers on a node of its own, but only 2 node(s)"),
        (TWO_CPU_NODES, 1, {"CPU": 1.0, "GPU": 1.0}, "PACK",
         "1 worker x 1 GPU need 1 GPU, but the cluster has 0 GPU in total"),
        (MIXED, 4, {"CPU": 1.0, "GPU": 1.0}, "PACK", "need 4 GPU, but the cluster has 3 GPU"),
        (MIXED, 1, {"GPU": 3.0}, "PACK", "one worker needs 3 GPU, but the largest node has 2"),
        # Two nodes have GPUs, but only one has the 4 CPUs as well.
        (MIXED, 2, {"CPU": 4.0, "GPU": 1.0}, "STRICT_SPREAD", "but only 1 node(s) can hold one"),
        ([], 1, {"CPU": 1.0}, "PACK", "the cluster has 0 CPU in total"),
    ],
)
def test_what_can_never_fit_is_refused_with_the_reason(nodes, workers, bundle, strategy, says):
    with pytest.raises(CapacityError) as refused:
        check_capacity(nodes, workers, bundle, strategy)
    assert says in str(refused.value)


# -- a tensor-parallel gang: one bundle per TP group where the groups fit whole --

CPU1, GPU1 = {"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}


@pytest.mark.parametrize(
    ("nodes", "workers", "tp", "per_rank", "bundles", "of_rank"),
    [
        # 4 ranks, tp 2, on two 4-CPU nodes: two bundles of 2 ranks, ranks 0-1 and 2-3.
        (TWO_CPU_NODES, 4, 2, CPU1, [{"CPU": 2.0}] * 2, [0, 0, 1, 1]),
        (TWO_CPU_NODES, 8, 4, CPU1, [{"CPU": 4.0}] * 2, [0] * 4 + [1] * 4),
        # Groups of 3 CPUs: each node holds one whole, and there are two groups.
        (TWO_CPU_NODES, 6, 3, CPU1, [{"CPU": 3.0}] * 2, [0, 0, 0, 1, 1, 1]),
        # GPUs: 2 groups of 2 need two nodes with 2 GPUs; MIXED has one: per rank.
        (MIXED, 4, 2, GPU1, [GPU1] * 4, [0, 1, 2, 3]),
        (MIXED, 2, 2, GPU1, [{"CPU": 2.0, "GPU": 2.0}], [0, 0]),
        # A group larger than any node: per rank, as without TP.
        (TWO_CPU_NODES, 8, 8, CPU1, [CPU1] * 8, list(range(8))),
        # Three groups of 3 CPUs, but the two nodes hold only one each: per rank.
        (TWO_CPU_NODES, 9, 3, CPU1, [CPU1] * 9, list(range(9))),
        (TWO_CPU_NODES, 3, 1, CPU1, [CPU1] * 3, [0, 1, 2]),  # no TP
    ],
)
def test_a_tp_group_gets_one_bundle_where_the_groups_fit_whole(
    nodes, workers, tp, per_rank, bundles, of_rank
):
    gang = gang_bundles(workers, per_rank, tp, nodes)
    assert gang.bundles == bundles
    assert gang.bundle_of_rank == of_rank
    assert gang.grouped == (len(bundles) < workers)
