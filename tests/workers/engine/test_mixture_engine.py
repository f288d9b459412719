"""A mixture of two token datasets (`data.mix`) through the whole engine: the
loss curve, each member's tokens and each member's held-out loss are those
of one process at world sizes 3 and 2 (real gloo groups in Ray rank
actors), a checkpoint saved at world size 3 resumes at 2 on the same curve,
and a mixture of one dataset trains exactly as that dataset alone."""

from __future__ import annotations

import pytest

from tests.workers.datasets.corpus import documents, write_jsonl, write_tokenizer
from tests.workers.engine_spec import engine_job, engine_spec
from workers.datasets.prepare import prepare
from workers.engine.local import run_single_process
from workers.schema import JobSpec

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

SECRET = "mixture-test-secret-0123456789abcdef"
STEPS, SAVED_AT, BATCH, SEQ = 8, 4, 12, 32
WEIGHTS = {"prose": 1.0, "notes": 3.0}


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> dict[str, str]:
    """Two token datasets of one tokenizer, by name."""
    root = tmp_path_factory.mktemp("mixture")
    write_tokenizer(f"file://{root}/tokenizer.json")
    out = {}
    for seed, name in enumerate(WEIGHTS):
        write_jsonl(f"file://{root}/in-{name}/docs.jsonl", documents(10 + seed, 60))
        out[name] = f"file://{root}/{name}"
        prepare([f"file://{root}/in-{name}/docs.jsonl"], out[name],
                tokenizer=f"file://{root}/tokenizer.json", workers=0, tokens_per_shard=1500)
    return out


def mix_spec(members: dict[str, str]) -> dict:
    mix = [{"uri": members[name], "weight": weight} for name, weight in WEIGHTS.items()]
    return engine_spec(STEPS, model={"vocab_size": 512}, train={"global_batch_size": BATCH},
                       data={"source": "tokens", "mix": mix},
                       eval={"holdout_fraction": 0.1, "every_steps": SAVED_AT},
                       workers={"min": 1, "max": 3})


@pytest.fixture(scope="module")
def reference(members) -> list[dict]:
    return run_single_process(JobSpec.model_validate(mix_spec(members)))


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mixture-store")
    return {"root": f"file://{root}", "tenant": "acme", "job": "mix", "secret": SECRET,
            "storage_options": {}}


def losses(rows: list[dict], key: str = "loss") -> list:
    return [row.get(key) for row in rows]


def test_each_members_tokens_and_held_out_loss_are_in_the_rows(reference):
    assert [row["step"] for row in reference] == list(range(1, STEPS + 1))
    share = {name: w / sum(WEIGHTS.values()) for name, w in WEIGHTS.items()}
    for row in reference:
        # 1:3 of 12 samples: 3 and 9 every batch, exactly
        assert row["mix_tokens"] == {name: round(row["step"] * BATCH * share[name]) * SEQ
                                     for name in WEIGHTS}
    evals = [row for row in reference if "eval_loss" in row]
    assert [row["step"] for row in evals] == [SAVED_AT, STEPS]
    for row in evals:
        by_member = row["mix_eval_loss"]
        assert set(by_member) == set(WEIGHTS) and by_member["prose"] != by_member["notes"]
        assert row["eval_loss"] == pytest.approx(sum(share[n] * by_member[n] for n in WEIGHTS))
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]


# World size 3 first (and its checkpoint), then 2, which resumes it: two groups in all.
@pytest.mark.parametrize("world_size", [3, 2])
def test_every_world_size_follows_the_one_process_curve(groups, members, reference, target,
                                                        world_size):
    spec = mix_spec(members)
    group = groups.get(world_size)
    rows = group.train(spec)[0]
    assert losses(rows) == pytest.approx(losses(reference), abs=1e-5)
    assert losses(rows, "mix_tokens") == losses(reference, "mix_tokens")
    evals = [row for row in reference if "eval_loss" in row]
    for got, want in zip([r for r in rows if "eval_loss" in r], evals, strict=True):
        assert got["mix_eval_loss"] == pytest.approx(want["mix_eval_loss"], abs=1e-5)
    if world_size == 3:
        first = group.train(spec, checkpoint=target, stop_after=SAVED_AT)[0]
        assert first[-1]["checkpoint_step"] == SAVED_AT
        return
    resumed = group.train(spec, checkpoint=target)[0]  # saved at world size 3
    assert [row["step"] for row in resumed] == list(range(SAVED_AT + 1, STEPS + 1))
    assert losses(resumed) == pytest.approx(losses(reference[SAVED_AT:]), abs=1e-5)
    assert losses(resumed, "mix_tokens") == losses(reference[SAVED_AT:], "mix_tokens")


def test_a_mixture_of_one_dataset_trains_as_that_dataset_alone(members):
    alone = engine_job(3, model={"vocab_size": 512}, data={"source": "tokens", "uri": members["prose"]})
    mixed = engine_job(3, model={"vocab_size": 512},
                       data={"source": "tokens", "mix": [{"uri": members["prose"], "weight": 0.3}]})
    plain, one = run_single_process(alone), run_single_process(mixed)
    assert losses(one) == losses(plain)
    assert [row["mix_tokens"] for row in one] == [{"prose": s * 12 * SEQ} for s in (1, 2, 3)]
