"""Recovery in place's plan (workers/cluster/in_place.py): who holds whose
snapshot copy, and the step every rank restores after a loss. Pure: no cluster."""

import pytest

from workers.cluster.in_place import CannotRecover, Holdings, peer_of, plan_restore


@pytest.mark.parametrize(("nodes", "peers"), [
    (["a"], [None]),
    (["a", "a"], [1, 0]),
    (["a", "a", "a"], [1, 2, 0]),
    (["a", "b"], [1, 0]),
    # on another node where there is one: 0 and 1 share node a, so 0's copy goes to 2
    (["a", "a", "b", "b"], [2, 2, 0, 0]),
    (["a", "b", "a", "b"], [1, 2, 3, 0]),
])
def test_a_ranks_copy_goes_to_the_next_rank_on_another_node(nodes, peers):
    assert [peer_of(rank, nodes) for rank in range(len(nodes))] == peers


def ring(world, steps, lost=(), held=None):
    """The live ranks' holdings when rank r's own snapshots are steps[r] and
    its holder (the next rank) got the copy of held[r] (default: its newest)."""
    held = held or [own[0] for own in steps]
    return [Holdings(r, tuple(steps[r]), {(r - 1) % world: held[(r - 1) % world]})
            for r in range(world) if r not in lost]


def test_the_lost_rank_comes_from_its_holder_and_the_others_from_their_own():
    plan = plan_restore(2, ring(2, [(6, 4), (6, 4)], lost=[1]))
    assert plan.step == 6 and plan.sources == {0: 0, 1: 0}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_a_rank_killed_mid_capture_makes_every_rank_restore_the_step_before(world):
    # Rank 1 died capturing step 8: the others have captured it (their copies
    # sent or not), rank 1's copy with its holder is of step 6. The survivors'
    # previous snapshots (6) and its copy make step 6 whole.
    holdings = ring(world, [(8, 6)] * world, lost=[1], held=[8] + [6] * (world - 1))
    plan = plan_restore(world, holdings)
    assert plan.step == 6
    assert plan.sources[1] == 2 % world
    assert all(plan.sources[r] == r for r in range(world) if r != 1)


def test_a_copy_that_arrived_before_the_kill_restores_the_newest_step():
    # Rank 1 was killed sending its copy of 8, which its holder (0) had received.
    plan = plan_restore(2, ring(2, [(8, 6), (8, 6)], lost=[1], held=[8, 8]))
    assert plan.step == 8 and plan.sources == {0: 0, 1: 0}


def test_own_copies_are_preferred_at_the_common_step():
    plan = plan_restore(3, ring(3, [(4, 2)] * 3, lost=[2]))
    assert plan.step == 4 and plan.sources == {0: 0, 1: 1, 2: 0}


def test_a_rank_and_its_holder_both_lost_cannot_recover():
    with pytest.raises(CannotRecover, match=r"rank\(s\) \[1\].*lost: \[1, 2\]"):
        plan_restore(3, ring(3, [(4, 2)] * 3, lost=[1, 2]))


def test_no_snapshot_yet_cannot_recover():
    with pytest.raises(CannotRecover, match="no snapshot taken yet"):
        plan_restore(2, [Holdings(0, (), {})])


def test_steps_with_no_overlap_cannot_recover():
    # rank 1's only copy is of step 2, rank 0 holds only steps 6 and 4
    with pytest.raises(CannotRecover, match="no snapshot step is held for every rank"):
        plan_restore(2, [Holdings(0, (6, 4), {1: 2})])


def test_every_rank_lost_cannot_recover():
    with pytest.raises(CannotRecover, match="no rank of the group is left"):
        plan_restore(2, [])
