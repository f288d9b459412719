"""`init: {uri: DIR}` alone says the model: with no `model`, or one that sets
only seq_len, the spec reads it from DIR/config.json (`model.config_uri`,
resolved at submit); a model that says anything else is taken as written,
so every spec valid before keeps its meaning."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workers.schema import JobSpec
from workers.schema.model import ModelSpec

TRAIN = {"steps": 1}
DIR = "file:///data/tenants/acme/data/models/tiny"


@pytest.mark.parametrize("model, seq_len", [
    (None, 64), ({}, 64), ({"seq_len": 16}, 16), ({"seq_len": 16, "config_uri": None}, 16),
    (ModelSpec(seq_len=32), 32),
])
def test_no_model_of_its_own_is_read_from_the_directorys_config(model, seq_len):
    raw: dict = {"init": {"uri": DIR + "/"}, "train": TRAIN}
    if model is not None:
        raw["model"] = model
    spec = JobSpec.model_validate(raw)
    assert spec.model.config_uri == f"{DIR}/config.json" and not spec.model.resolved
    assert spec.model.seq_len == seq_len


def test_a_model_that_says_itself_is_taken_as_written():
    llama = {"family": "llama", "n_layers": 1, "d_model": 32, "n_heads": 2}
    spec = JobSpec.model_validate({"model": llama, "init": {"uri": DIR}, "train": TRAIN})
    assert spec.model.resolved and spec.model.d_model == 32
    # read back and sent again (every field spelled out): the same spec
    assert JobSpec.model_validate(spec.to_json()) == spec
    named = JobSpec.model_validate({"model": {"config_uri": "file:///x/config.json"},
                                    "init": {"uri": DIR}, "train": TRAIN})
    assert named.model.config_uri == "file:///x/config.json"
    # from a job's checkpoint, or with no init, the model is still the spec's to say
    with pytest.raises(ValidationError, match="model\n  Field required"):
        JobSpec.model_validate({"init": {"job": "j-1"}, "train": TRAIN})
    assert JobSpec.model_validate({"model": {}, "train": TRAIN}).model.family == "gpt"


def test_a_gpt_said_outright_is_still_refused_with_init_uri():
    with pytest.raises(ValidationError, match="needs model.family 'llama', not 'gpt'"):
        JobSpec.model_validate({"model": {"family": "gpt"}, "init": {"uri": DIR},
                                "train": TRAIN})
