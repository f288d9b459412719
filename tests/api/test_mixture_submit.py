"""A mixture (`data.mix`) is checked at submit like a lone token dataset,
member by member, through the real API: its datasets must share one
tokenizer (another vocabulary, or another tokenizer of the same size, is a
422 at the member naming both datasets and both tokenizers), every member
lies under the tenant's prefix (a relative one is read there), and a
mixture is of token datasets only."""

from __future__ import annotations

import shutil

import httpx
import pytest

from tests.api.test_tenants import create
from tests.workers.datasets.corpus import documents, train_tokenizer, write_jsonl, write_tokenizer
from workers.datasets.prepare import prepare


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Datasets a and b of one tokenizer, c of a smaller vocabulary, and d:
    a with a tokenizer of a's size that lowercases (another tokenizer)."""
    root = tmp_path_factory.mktemp("mix-data")
    write_tokenizer(f"file://{root}/tokenizer.json")
    write_tokenizer(f"file://{root}/small.json", vocab_size=300)
    for name, seed, tokenizer in (("a", 1, "tokenizer"), ("b", 2, "tokenizer"), ("c", 3, "small")):
        write_jsonl(f"file://{root}/in-{name}/docs.jsonl", documents(seed, 30))
        prepare([f"file://{root}/in-{name}/docs.jsonl"], f"file://{root}/{name}",
                tokenizer=f"file://{root}/{tokenizer}.json", workers=0)
    shutil.copytree(root / "a", root / "d")
    from tokenizers import normalizers

    other = train_tokenizer(512)
    other.normalizer = normalizers.Lowercase()
    (root / "d" / "tokenizer.json").write_text(other.to_str())
    return root


@pytest.fixture
def tenant(server, http, supervisor, prepared):
    """(client, the tenant's data prefix URI, another tenant's)."""
    made, other = create(http), create(http)
    root = supervisor.settings.resolved_data_uri_root
    uri = f"{root}/tenants/{made.name}/data"
    for name in "abcd":
        shutil.copytree(prepared / name, f"{uri.removeprefix('file://')}/{name}")
    with httpx.Client(base_url=server.url, timeout=10,
                      headers={"Authorization": f"Bearer {made.api_key}"}) as client:
        yield client, uri, f"{root}/tenants/{other.name}/data"


def submit(client, *members: str, source: str = "tokens"):
    return client.post("/v1/jobs", json={
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "vocab_size": 512},
        "data": {"source": source, "mix": [{"uri": m, "weight": 1 + i} for i, m in enumerate(members)]},
        "train": {"steps": 1}})


def refused(response, field: str) -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    return error["message"]


def test_a_mixture_of_one_tokenizer_is_accepted_with_its_uris_resolved(tenant):
    client, uri, _ = tenant
    accepted = submit(client, "a", f"{uri}/b")
    assert accepted.status_code == 201, accepted.text
    mix = accepted.json()["spec"]["data"]["mix"]
    assert mix == [{"uri": f"{uri}/a", "weight": 1.0}, {"uri": f"{uri}/b", "weight": 2.0}]
    client.post(f"/v1/jobs/{accepted.json()['id']}/cancel")


def test_a_member_of_another_vocabulary_is_422_naming_both(tenant):
    client, uri, _ = tenant
    message = refused(submit(client, "a", "b", "c"), "data.mix.2.uri")
    assert f"{uri}/c (vocabulary 300" in message and f"data.mix.0.uri: {uri}/a (vocabulary " in message


def test_another_tokenizer_of_the_same_size_is_422_naming_both_tokenizers(tenant):
    client, uri, _ = tenant
    message = refused(submit(client, "a", "d"), "data.mix.1.uri")
    assert f"{uri}/d" in message and f"{uri}/a" in message
    assert message.count("tokenizer sha256") == 2


def test_a_member_outside_the_tenants_prefix_is_422_at_that_member(tenant):
    client, _, others = tenant
    refused(submit(client, "a", f"{others}/b"), "data.mix.1.uri")


def test_a_mixture_is_of_token_datasets_only(tenant):
    client, _, _ = tenant
    assert "data.mix mixes token datasets" in refused(submit(client, "a", source="uri"), "data.mix")


def test_a_bad_member_is_422_naming_its_file(tenant):
    client, uri, _ = tenant
    assert "no dataset index" in refused(submit(client, "a", "missing"), "data.mix.1.uri")
