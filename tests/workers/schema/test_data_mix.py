"""`data.mix`: token datasets with weights, the alternative to `data.uri`;
each refusal names its field, every member's uri is one the service checks,
and a spec without a mixture keeps its form and its hash."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.workers.engine_spec import engine_spec
from workers.schema import JobSpec


def job(data: dict) -> JobSpec:
    return JobSpec.model_validate(engine_spec(2, data=data))


def refused(data: dict) -> tuple[str, str]:
    with pytest.raises(ValidationError) as e:
        job(data)
    error = e.value.errors()[0]
    return ".".join(str(p) for p in error["loc"]), error["msg"]


MIX = [{"uri": "datasets/wiki", "weight": 3}, {"uri": "s3://b/code/", "weight": 0.5}]


def test_a_mixture_names_every_member_for_the_data_checks():
    data = job({"source": "tokens", "mix": MIX}).data
    assert data.uris() == {"data.mix.0.uri": "datasets/wiki", "data.mix.1.uri": "s3://b/code/"}
    assert data.mix_names() == ["wiki", "code"]
    same_last = job({"source": "tokens", "mix": [{"uri": "a/train", "weight": 1},
                                                 {"uri": "b/train", "weight": 1}]}).data
    assert same_last.mix_names() == ["a/train", "b/train"]


@pytest.mark.parametrize(("data", "field", "said"), [
    ({"source": "text", "tokenizer": "t.json", "mix": MIX}, "data.mix", "not 'text'"),
    ({"source": "builtin", "mix": MIX}, "data.mix", "mixes token datasets"),
    ({"source": "tokens", "uri": "x", "mix": MIX}, "data.uri", "exactly one of uri"),
    ({"source": "tokens", "mix": []}, "data.mix", "at least 1"),
    ({"source": "tokens", "tokenizer": "t.json", "mix": MIX}, "data.tokenizer", "only used with"),
    ({"source": "tokens", "mix": [{"uri": "a", "weight": 0}]}, "data.mix.0.weight", "greater than 0"),
    ({"source": "tokens", "mix": [{"uri": "a", "weight": 1}, {"uri": "a", "weight": 2}]},
     "data.mix.1.uri", "data.mix.0.uri again"),
    ({"source": "tokens", "mix": [{"uri": "a"}]}, "data.mix.0.weight", "required"),
    ({"source": "tokens", "mix": [{"uri": "a", "weight": 1, "name": "x"}]}, "data.mix.0.name",
     "not permitted"),
])
def test_a_bad_mixture_is_refused_at_its_field(data, field, said):
    where, message = refused(data)
    assert where == field and said in message, (where, message)


def test_without_a_mixture_the_stored_form_reads_back_and_the_hash_is_unchanged():
    plain = job({"source": "tokens", "uri": "datasets/wiki"})
    assert plain.data.mix is None and JobSpec.model_validate(plain.to_json()) == plain
    mixed = job({"source": "tokens", "mix": MIX})
    assert JobSpec.model_validate(mixed.to_json()) == mixed
    assert mixed.config_hash() != job({"source": "tokens", "mix": MIX[:1]}).config_hash()
    reweighed = [MIX[0], {**MIX[1], "weight": 1}]
    assert mixed.config_hash() != job({"source": "tokens", "mix": reweighed}).config_hash()
