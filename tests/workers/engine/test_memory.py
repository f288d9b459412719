"""A rank's memory theory (workers/engine/memory.py), in one process, no group."""

import platform

import pytest

from tests.workers.engine_spec import TINY_MODEL, engine_job
from workers.engine.memory import limit_allocator_slack, peak_theory, saved_activation_bytes, unit_bytes


def test_activations_are_counted_per_sequence_and_hold_the_blocks_saved_tensors():
    job = engine_job()
    counted = [saved_activation_bytes(job, b) for b in (1, 2, 3)]
    per_sequence = counted[1] - counted[0]
    assert counted[2] - counted[1] == per_sequence  # linear in the batch: no parameter counted
    d, layers, tokens = TINY_MODEL["d_model"], TINY_MODEL["n_layers"], TINY_MODEL["seq_len"]
    # Each block saves at least its two norms' inputs and outputs, q k v, the
    # attention's output and the MLP's two 4 x d activations: 16 x d fp32 a token.
    blocks = layers * 16 * d * tokens * 4
    assert blocks < per_sequence < 1.3 * blocks


def test_the_theory_adds_the_largest_unit_and_its_gradient_to_the_sharded_state():
    job = engine_job()
    unit = job.model.param_count().largest_unit(1)
    assert unit_bytes(job) == 2 * 4 * unit
    prefetched = engine_job(sharding={"prefetch_backward": 2})
    assert unit_bytes(prefetched) == (3 + 1) * 4 * unit
    theory = peak_theory(job, 4, activation_bytes=1000)
    assert theory.state_bytes == 16 * job.model.num_params() // 4
    assert theory.total == theory.state_bytes + 2 * 4 * unit + 1000


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_the_allocator_threshold_is_set_on_glibc():
    assert limit_allocator_slack() is True
