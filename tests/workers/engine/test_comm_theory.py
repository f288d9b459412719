"""The primer's per-step communication formulas, as the engine reports them."""

import pytest

from workers.engine.comm import comm_theory_bytes

S = 1_000_000


@pytest.mark.parametrize("n", [2, 3, 4])
def test_fsdp_and_ddp_formulas(n):
    assert comm_theory_bytes("full_shard", (n,), S, S) == pytest.approx(3 * (n - 1) / n * S)
    assert comm_theory_bytes("shard_grad_op", (n,), S, S) == pytest.approx(2 * (n - 1) / n * S)
    assert comm_theory_bytes("no_shard", (n, 1), S, S) == pytest.approx(2 * (n - 1) / n * S)


def test_hybrid_is_sharded_gathers_plus_a_replicated_all_reduce_of_the_shard():
    # (2 replicas x 2 shards): 3 x 1/2 x S within the group + 2 x 1/2 x S/2 across.
    assert comm_theory_bytes("hybrid_shard", (2, 2), S, S) == pytest.approx(1.5 * S + 0.5 * S)


def test_mixed_precision_and_accumulation():
    # bf16 gathers, fp32 reduce; two micro-steps gather twice as often.
    got = comm_theory_bytes("full_shard", (2,), S // 2, S, micro_steps=2)
    assert got == pytest.approx(4 * 0.5 * S / 2 + 0.5 * S)


@pytest.mark.parametrize("ratio", [0.5, (1 + 4 / 256) / 4])
def test_compression_scales_only_the_reduce_scatter(ratio):
    # 2 gathers + R x 1 reduce-scatter of (N-1)/N x S; HSDP's all-reduce stays whole.
    assert comm_theory_bytes("full_shard", (4,), S, S, reduce_scatter_ratio=ratio) == pytest.approx(
        (2 + ratio) * 0.75 * S
    )
    assert comm_theory_bytes("hybrid_shard", (2, 2), S, S, reduce_scatter_ratio=ratio) == pytest.approx(
        (2 + ratio) * 0.5 * S + 0.5 * S
    )


def test_world_of_one_moves_nothing():
    assert comm_theory_bytes("full_shard", (1,), S, S) == 0
