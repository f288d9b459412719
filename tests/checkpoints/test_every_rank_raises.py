"""A checkpoint error on one rank raises on every rank: a rank that swallowed
it would leave the others hanging in the next collective."""

from __future__ import annotations

import pytest
from ckpt_harness import every_rank_raises, run_ranks


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failed_write_on_one_rank_raises_on_all(tmp_path, mode):
    store_kwargs = {"root": str(tmp_path), "tenant": "acme", "job": "j1"}
    run_ranks(every_rank_raises, 2, store_kwargs, mode)
