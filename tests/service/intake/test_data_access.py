"""A tenant's data uri lies under its own data prefix, or is refused: every
traversal form (plain, percent-encoded in any case, encoded twice), other
schemes, chained URLs, backslashes, control characters, another tenant's or
a look-alike tenant's prefix. Pure: nothing is read."""

from __future__ import annotations

import pytest

from service.intake.data_access import DataUriRefused, check_data_uri, data_prefix
from service.settings import Settings
from workers.schema import SpecError

ROOT = "file:///srv/brigade/data-store"
P = f"{ROOT}/tenants/acme/data"  # tenant acme's prefix, without its trailing slash
PATH = "/srv/brigade/data-store/tenants/acme/data"


@pytest.mark.parametrize("uri", [
    f"{P}/corpus.bin",
    f"{P}/sets/2026/train.txt",
    f"{P}/name with spaces.bin",
    f"{P}/file%20name.bin",
    f"{P}/v1.2..final.bin",  # dots inside a name are no traversal
    f"{P}/.hidden",
    f"{PATH}/corpus.bin",  # a plain path, where the root is local
    f"FILE://{PATH}/corpus.bin",
])
def test_uris_under_the_tenants_prefix_are_accepted(uri):
    normal = check_data_uri(uri, "acme", ROOT)
    assert normal.startswith(f"{P}/")


def test_a_plain_path_is_normalised_to_its_file_uri():
    assert check_data_uri(f"{PATH}/x.bin", "acme", ROOT) == f"{P}/x.bin"


TRAVERSALS = [
    f"{P}/../../other/data/x.bin",
    f"{P}/..",
    f"{P}/sub/../../../../etc/passwd",
    f"{P}/./x.bin",
    f"{P}/%2e%2e/%2e%2e/other/data/x.bin",
    f"{P}/%2E%2E/%2E%2E/other/data/x.bin",
    f"{P}/%2e%2E/x.bin",
    f"{P}/.%2e/x.bin",
    f"{P}/%2e./x.bin",
    f"{P}/%252e%252e/x.bin",
    f"{P}/%25252e%25252e/x.bin",
    f"{P}/..%2fetc/passwd",
    f"{P}/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    f"{P}/..%252f..%252fetc",
    f"{P}/\uff0e\uff0e/x.bin",  # fullwidth dots
    f"{PATH}/../../../etc/passwd",
    f"{P}/..\\..\\etc\\passwd",
    f"{P}/x%5c..%5cy",
    f"{P}/x%255cy",
    f"{P}//etc/passwd",
    f"{P}/",
    P,
]

OUTSIDE = [
    "file:///etc/passwd",
    "/etc/passwd",
    "etc/passwd",
    "corpus.bin",
    "./corpus.bin",
    f"{ROOT}/tenants/other/data/x.bin",
    f"{ROOT}/tenants/acme-evil/data/x.bin",
    f"{ROOT}/tenants/acme/data-evil/x.bin",
    f"{ROOT}/tenants/acme/datax.bin",
    f"{ROOT}/tenants/acme/checkpoints/x.bin",
    f"{ROOT}/tenants/admin/data/x.bin",
    f"{ROOT}-evil/tenants/acme/data/x.bin",
    "file://localhost/srv/brigade/data-store/tenants/acme/data/x.bin",
    f"file:{PATH}/x.bin",
    f"file:/{PATH}/x.bin",
]

SCHEMES_AND_CHAINS = [
    "s3://bucket/tenants/acme/data/x.bin",
    "http://example.com/tenants/acme/data/x.bin",
    "https://example.com/x.bin",
    "memory://tenants/acme/data/x.bin",
    "gs://bucket/x.bin",
    f"simplecache::{P}/x.bin",
    f"{P}/x.bin::s3://bucket/y",
    f"{P}/x%3a%3as3://bucket/y",
    f"blockcache::{P}/x.bin",
    f"zip://inner.txt::{P}/x.zip",
    "data:text/plain,hello",
]

ODD_CHARACTERS = [
    f"{P}/x\x00.bin",
    f"{P}/x%00.bin",
    f"{P}/x%2500.bin",
    f"{P}/x\n.bin",
    f"{P}/x%0a.bin",
    f"{P}/x\x7f.bin",
    f"{P}/x\u2028.bin",
    f"{P}/x.bin?version=2",
    f"{P}/x.bin#frag",
    f"{P}/x%3fy",
    f"{P}/x%ff.bin",  # not UTF-8
    f"{P}/%" + "25" * 8 + "2e",  # encoded past any use
]


@pytest.mark.parametrize("uri", TRAVERSALS + OUTSIDE + SCHEMES_AND_CHAINS + ODD_CHARACTERS)
def test_every_escape_is_refused_naming_data_uri(uri):
    with pytest.raises(DataUriRefused) as refused:
        check_data_uri(uri, "acme", ROOT)
    assert str(refused.value).startswith("data.uri ")
    assert isinstance(refused.value, SpecError) and refused.value.field == "data.uri"  # a 422


def test_the_admin_follows_the_same_rule():
    assert check_data_uri(f"{ROOT}/tenants/admin/data/x.bin", "admin", ROOT)
    for uri in (f"{P}/x.bin", "file:///etc/passwd", f"{ROOT}/tenants/admin/data/../../acme/data/x"):
        with pytest.raises(DataUriRefused):
            check_data_uri(uri, "admin", ROOT)


def test_an_object_store_root():
    root = "s3://brigade-data/prod/"
    assert data_prefix(root, "acme") == "s3://brigade-data/prod/tenants/acme/data/"
    assert check_data_uri("s3://brigade-data/prod/tenants/acme/data/a/b.bin", "acme", root)
    for uri in ("s3://brigade-data/prod/tenants/acme/data/%2e%2e/x",
                "s3://other-bucket/prod/tenants/acme/data/x",
                "/brigade-data/prod/tenants/acme/data/x",
                "file:///brigade-data/prod/tenants/acme/data/x",
                "s3a://brigade-data/prod/tenants/acme/data/x"):
        with pytest.raises(DataUriRefused):
            check_data_uri(uri, "acme", root)


def test_the_default_root_lies_under_the_data_dir(tmp_path):
    settings = Settings(data_dir=str(tmp_path))
    assert settings.resolved_data_uri_root == f"file://{tmp_path.resolve()}/data-store"
    assert Settings(data_dir=str(tmp_path), data_uri_root="s3://b/x/").resolved_data_uri_root == "s3://b/x"


def test_a_relative_uri_is_joined_to_the_prefix_and_others_are_kept():
    from service.intake.data_access import under_prefix

    assert under_prefix("datasets/corpus", "acme", "s3://bucket/root") == \
        "s3://bucket/root/tenants/acme/data/datasets/corpus"
    for kept in ("/abs/path", "file:///x", "s3://b/k", "memory://x"):
        assert under_prefix(kept, "acme", "file:///r") == kept


def test_every_uri_of_a_spec_is_resolved_in_place():
    from service.intake.relative_uris import named_uris, resolve_relative
    from workers.schema import JobSpec

    spec = JobSpec.model_validate({
        "name": "rel", "model": {"family": "llama"}, "train": {"steps": 2},
        "data": {"source": "tokens", "uri": "datasets/a"},
        "eval": {"uri": "datasets/b"}, "init": {"uri": "/abs/models/tiny"}})
    resolved = resolve_relative(spec, "acme", "file:///r")
    prefix = "file:///r/tenants/acme/data/"
    assert named_uris(resolved) == {"data.uri": prefix + "datasets/a", "eval.uri": prefix + "datasets/b",
                                    "init.uri": "/abs/models/tiny"}
    assert spec.data.uri == "datasets/a"  # the parsed spec itself is left as it was
