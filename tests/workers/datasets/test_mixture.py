"""A mixture's schedule (`data.mix`): which member each sample of each global
batch comes from is a function of (seed, batch, position) only: the same
at every world size and after a resume from the carried cursors; each
member's cursor advances without gaps; after n samples every member has
drawn within one sample of n x its share; and the members' data: a mixture
of one dataset reads what that dataset alone reads, and datasets of two
vocabularies do not mix."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.workers.datasets.corpus import documents, write_jsonl, write_tokenizer
from tests.workers.engine_spec import engine_job
from workers.datasets.errors import DataError
from workers.datasets.mixture import KNOWN_EVERY, MixSchedule, MixtureSource
from workers.datasets.prepare import prepare
from workers.datasets.sources import mixture_source, open_tokens
from workers.engine.data import RankBatches
from workers.engine.prefetch import BatchPrefetch


class Tagged:
    """A member whose sample i says (member, i)."""

    def __init__(self, member: int):
        self.member = member

    def sample(self, index: int) -> np.ndarray:
        return np.array([self.member, index, 0], dtype=np.int64)  # x: (member, i)


def tagged(weights, global_batch=12, seed=0) -> MixtureSource:
    names = [f"m{k}" for k in range(len(weights))]
    return MixtureSource([Tagged(k) for k in range(len(weights))], names, weights, global_batch, seed)


def global_batches(source, world: int, steps: int, global_batch: int = 12) -> list[np.ndarray]:
    ranks = [RankBatches(source, global_batch, r, world) for r in range(world)]
    return [np.concatenate([b.next_batch()[0].numpy() for b in ranks]) for _ in range(steps)]


def test_every_member_draws_within_one_sample_of_its_share():
    rng = random.Random(0)
    for trial in range(200):
        weights = [rng.choice([rng.random(), rng.randint(1, 10), rng.random() / 1000])
                   for _ in range(rng.randint(1, 6))]
        batch = rng.choice([1, 3, 8, 12, 64])
        schedule = MixSchedule(weights, batch, seed=trial)
        shares, cursors = schedule.shares(), [0] * len(weights)
        for b in range(1, 200):
            counts = schedule.counts(cursors)
            assert sum(counts) == batch and min(counts) >= 0
            cursors = [c + n for c, n in zip(cursors, counts, strict=True)]
            # the bound the module's docstring states, at every batch boundary
            off = max(abs(c - s * b * batch) for c, s in zip(cursors, shares, strict=True))
            assert off < 1, (weights, batch)
        assert tuple(cursors) == schedule.cursors_before(199)


def test_exact_weights_give_exact_counts_every_batch():
    plan = MixSchedule([1, 3], 12, seed=5).plan
    for b in range(20):
        members = [k for k, _ in plan(b)]
        assert members.count(0) == 3 and members.count(1) == 9
    # 0.1 of 8 samples: 0.8 a batch, so 4 in 5 batches hold one, and 80 batches hold 64
    schedule = MixSchedule([0.1, 0.9], 8, seed=5)
    assert schedule.cursors_before(80) == (64, 576)


def test_the_positions_are_seeded_and_each_member_reads_on_without_gaps():
    source = tagged([2, 1, 1])
    rows = np.concatenate(global_batches(source, 1, 30))
    for k in range(3):
        assert list(rows[rows[:, 0] == k][:, 1]) == sorted(rows[rows[:, 0] == k][:, 1])
        assert sorted(rows[rows[:, 0] == k][:, 1]) == list(range((rows[:, 0] == k).sum()))
    again = np.concatenate(global_batches(tagged([2, 1, 1]), 1, 30))
    other_seed = np.concatenate(global_batches(tagged([2, 1, 1], seed=1), 1, 30))
    assert np.array_equal(rows, again)
    assert not np.array_equal(rows[:, 0], other_seed[:, 0])  # other positions ...
    assert sorted(map(tuple, rows)) == sorted(map(tuple, other_seed))  # ... the same counts


@pytest.mark.parametrize("world", [2, 3, 5])
def test_every_world_size_reads_the_same_global_batches(world):
    one = global_batches(tagged([0.5, 0.3, 0.2]), 1, 10)
    assert all(np.array_equal(a, b) for a, b in
               zip(one, global_batches(tagged([0.5, 0.3, 0.2]), world, 10), strict=True))


def test_a_resume_from_the_carried_cursors_draws_the_same_batches():
    straight = RankBatches(tagged([0.7, 0.2, 0.1]), 12, 1, 2)
    for _ in range(KNOWN_EVERY + 3):  # past a kept mark
        straight.next_batch()
    state = straight.state_dict()
    assert set(state) == {"next_sample", "mix_cursors"} and sum(state["mix_cursors"]) == state["next_sample"]
    resumed = BatchPrefetch(RankBatches(tagged([0.7, 0.2, 0.1]), 12, 0, 3))
    resumed.load_state_dict(state)
    assert resumed.batches.source.schedule._known_batches == [0, KNOWN_EVERY + 3]  # not stepped to
    assert resumed.state_dict() == state
    assert resumed.samples_seen() == dict(zip(["m0", "m1", "m2"], state["mix_cursors"], strict=True))
    other = RankBatches(tagged([0.7, 0.2, 0.1]), 12, 0, 3)
    other.next_sample = state["next_sample"]  # no cursors: stepped to from batch 0
    for _ in range(4):
        assert np.array_equal(resumed.next_batch()[0], other.next_batch()[0])
    resumed.close()
    with pytest.raises(ValueError, match="are not those of 3 members"):
        tagged([0.7, 0.2, 0.1]).resume_at(24, [1, 2, 3])


def test_a_single_source_keeps_its_state_as_it_was(dataset):
    prefix, _ = dataset
    batches = RankBatches(open_tokens(prefix, engine_job(1, model={"vocab_size": 512}).model, 0), 4, 0, 1)
    batches.next_batch()
    assert batches.state_dict() == {"next_sample": 4} and batches.samples_seen() == {}


def mix_job(*members: tuple[str, float], vocab: int = 512):
    return engine_job(2, model={"vocab_size": vocab, "seq_len": 16},
                      data={"source": "tokens", "mix": [{"uri": u, "weight": w} for u, w in members]})


def test_a_mixture_of_one_reads_what_its_dataset_alone_reads(dataset):
    prefix, _ = dataset
    job = mix_job((prefix, 2.5))
    mixed = RankBatches(mixture_source(job.data, job.model, 3, 8), 8, 0, 1)
    alone = RankBatches(open_tokens(prefix, job.model, 3), 8, 0, 1)
    for _ in range(3):
        assert np.array_equal(mixed.next_batch()[0], alone.next_batch()[0])


@pytest.fixture(scope="module")
def other_vocabulary(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("other-vocab")
    write_tokenizer(f"file://{root}/tokenizer.json", vocab_size=300)
    write_jsonl(f"file://{root}/in/a.jsonl", documents(9, 40))
    prepare([f"file://{root}/in/a.jsonl"], f"file://{root}/ds", tokenizer=f"file://{root}/tokenizer.json",
            workers=0)
    return f"file://{root}/ds"


def test_datasets_of_two_vocabularies_do_not_mix(dataset, other_vocabulary):
    prefix, index = dataset
    job = mix_job((prefix, 1), (other_vocabulary, 1))
    with pytest.raises(DataError) as refused:
        mixture_source(job.data, job.model, 0, 8)
    message = str(refused.value)
    assert other_vocabulary in message and prefix in message
    assert "(300 ids" in message and f"({index.vocab_size} ids" in message
