"""A tenant sees where its data goes, over real HTTP: `GET /v1/whoami` (a
tenant and the admin), the data prefix in the tenant's answers and on the
cluster page's JSON, its folder made with it, and `PUT /v1/data/{path}`:
the same bytes land under the caller's prefix; a path that leaves it is a
422 naming it, a body over BRIGADE_MAX_UPLOAD_BYTES a 413, and a refused or
broken upload leaves nothing; another tenant neither reads nor writes it.
`GET /v1/data?prefix=` pages the caller's files (size, last write, an
upload's sha256 while the file is that upload), `DELETE /v1/data/{path}`
removes one (audited), refused while a job that has not ended reads it; a
folder asked for as a file is a 404 saying so.
The CLI: `brigade whoami`, `brigade data upload|prefix|ls|rm`."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from api.client import BrigadeClient, BrigadeError
from tests.api.conftest import make_supervisor
from tests.api.test_cli_jobs import brigade  # noqa: F401 - the fixture

MAX_UPLOAD = 64 * 1024
SPEC = {"name": "tiny", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory, ray_cluster):
    """This module's server takes uploads of at most MAX_UPLOAD bytes."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("brigade"), max_upload_bytes=MAX_UPLOAD)
    yield supervisor
    supervisor.stop()
    supervisor.store.dispose()


@pytest.fixture(scope="module")
def store_root(supervisor) -> Path:
    """The data root's folder (`file://{data_dir}/data-store`)."""
    return Path(urlsplit(supervisor.settings.resolved_data_uri_root).path)


@pytest.fixture
def tenant(client):
    """(name, key) of a new tenant."""
    created = client.create_tenant(f"data-{uuid.uuid4().hex[:8]}", quota={"max_queued_jobs": 3})
    return created.name, created.api_key


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_whoami_answers_a_tenant_its_prefix_quota_and_use(tenant, as_key, store_root):
    name, key = tenant
    me = as_key(key)
    assert me.post("/v1/jobs", json=SPEC).status_code == 201  # stays QUEUED: nothing is admitted
    answer = me.get("/v1/whoami")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["tenant"], body["admin"]) == (name, False) and body["tenant_id"].startswith("t-")
    assert body["data_prefix"] == f"file://{store_root}/tenants/{name}/data/"
    assert body["quota"] == {"max_workers": None, "max_gpus": None, "max_running_jobs": None,
                             "max_queued_jobs": 3, "flavors": {}}
    assert (body["max_priority"], body["weight"]) == (1000, 1.0)
    assert body["usage"] == {"running_jobs": 0, "queued_jobs": 1, "workers": 0, "cpu": 0.0, "gpu": 0.0}


def test_whoami_answers_the_admin_the_same_way(http, store_root):
    body = http.get("/v1/whoami").json()
    assert (body["tenant"], body["tenant_id"], body["admin"]) == ("admin", None, True)
    assert body["data_prefix"] == f"file://{store_root}/tenants/admin/data/"
    assert body["quota"] == {**dict.fromkeys(("max_workers", "max_gpus", "max_running_jobs",
                                              "max_queued_jobs")), "flavors": {}}
    assert set(body["usage"]) == {"running_jobs", "queued_jobs", "workers", "cpu", "gpu"}
    assert (store_root / "tenants/admin/data").is_dir()  # made when the server started
    assert httpx.get(f"{http.base_url.join('/v1/whoami')}").status_code == 401


def test_the_data_prefix_is_in_the_tenants_answers_and_its_folder_exists(http, as_key, store_root):
    name = f"data-{uuid.uuid4().hex[:8]}"
    created = http.post("/v1/tenants", json={"name": name})
    assert created.status_code == 201, created.text
    prefix = f"file://{store_root}/tenants/{name}/data/"
    assert created.json()["data_prefix"] == prefix
    assert (store_root / "tenants" / name / "data").is_dir()
    tenant_id = created.json()["id"]
    assert http.get(f"/v1/tenants/{tenant_id}").json()["data_prefix"] == prefix
    assert {t["name"]: t["data_prefix"] for t in http.get("/v1/tenants").json()["items"]}[name] == prefix
    assert http.patch(f"/v1/tenants/{tenant_id}", json={"weight": 2}).json()["data_prefix"] == prefix
    rotated = http.post(f"/v1/tenants/{tenant_id}/keys").json()
    assert rotated["data_prefix"] == prefix
    shares = as_key(rotated["api_key"]).get("/v1/cluster/tenants").json()["items"]
    # a tenant's answer is its own row (every tenant with a row has one, jobs or none)
    assert [(s["tenant"], s["data_prefix"]) for s in shares] == [(name, prefix)]


def test_an_upload_lands_under_the_prefix_with_the_same_bytes(tenant, server, store_root, tmp_path):
    name, key = tenant
    local = tmp_path / "a.jsonl"
    local.write_bytes(os.urandom(MAX_UPLOAD))  # the limit itself is allowed
    with BrigadeClient(server.url, key, timeout=10) as client:
        stored = client.upload(local, "raw/a.jsonl")
        prefix = client.whoami().data_prefix
        assert stored.uri == f"{prefix}raw/a.jsonl" and stored.bytes == MAX_UPLOAD
        assert stored.sha256 == hashlib.sha256(local.read_bytes()).hexdigest() and not stored.replaced
        assert (store_root / "tenants" / name / "data/raw/a.jsonl").read_bytes() == local.read_bytes()
        assert not files_under(store_root / "tenants" / name / "uploads")  # nothing left staged
        # what it names is what a spec may read
        job = client.submit({**SPEC, "data": {"source": "uri", "uri": stored.uri}})
        assert job.spec.data.uri == stored.uri

        local.write_bytes(b'{"text": "again"}\n')
        assert client.upload(local, "raw/a.jsonl").replaced
    back = httpx.get(f"{server.url}/v1/data/raw/a.jsonl", headers={"Authorization": f"Bearer {key}"})
    assert back.status_code == 200 and back.content == b'{"text": "again"}\n'
    assert back.headers["X-Brigade-Uri"] == stored.uri


@pytest.mark.parametrize("path", [
    "%2E%2E/x.jsonl", "raw/%2E%2E/%2E%2E/%2E%2E/other/data/x.jsonl", "/etc/passwd", "raw//x.jsonl",
    "raw/%2E/x.jsonl", "a%0Ab.jsonl", "a%01b.jsonl", "a%5Cb.jsonl", "file:%2F%2F%2Fetc%2Fpasswd", "x::y",
    "%252e%252e/x", "raw/", "x" * 256,
])
def test_a_path_that_leaves_the_prefix_is_a_422_naming_it(tenant, as_key, store_root, path):
    name, key = tenant
    before = files_under(store_root)
    answer = as_key(key).put(f"/v1/data/{path}", content=b"data")
    assert answer.status_code == 422, (path, answer.text)
    error = answer.json()["error"]
    assert error["field"] == "path" and error["message"].startswith("path '"), error
    assert files_under(store_root) == before


def test_an_upload_over_the_limit_is_a_413_and_leaves_nothing(tenant, as_key, store_root):
    name, key = tenant
    me = as_key(key)
    before = files_under(store_root)
    declared = me.put("/v1/data/big.bin", content=b"x" * (MAX_UPLOAD + 1))
    assert declared.status_code == 413, declared.text
    assert "BRIGADE_MAX_UPLOAD_BYTES" in declared.json()["error"]["message"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(MAX_UPLOAD // 4096 + 2):
            yield b"y" * 4096

    streamed = me.put("/v1/data/big.bin", content=chunks())
    assert streamed.status_code == 413, streamed.text
    assert files_under(store_root) == before
    assert me.get("/v1/data/big.bin").status_code == 404


def test_a_broken_upload_leaves_nothing(tenant, server, store_root):
    name, key = tenant
    before = files_under(store_root)
    host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
    with socket.create_connection((host, port)) as raw:  # says 1000 bytes, sends 10, hangs up
        raw.sendall(f"PUT /v1/data/broken.bin HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}"
                    f"\r\nContent-Length: 1000\r\n\r\n".encode() + b"0123456789")
        time.sleep(0.3)
    deadline = time.monotonic() + 5
    while files_under(store_root) != before and time.monotonic() < deadline:
        time.sleep(0.05)  # the server sees the hang-up, then discards what it staged
    assert files_under(store_root) == before


def test_another_tenant_cannot_read_or_write_it(client, tenant, as_key, store_root):
    name_a, key_a = tenant
    other = client.create_tenant(f"data-{uuid.uuid4().hex[:8]}")
    a, b = as_key(key_a), as_key(other.api_key)
    uri = a.put("/v1/data/raw/secret.jsonl", content=b"A's").json()["uri"]
    a_file = store_root / "tenants" / name_a / "data/raw/secret.jsonl"

    assert b.get("/v1/data/raw/secret.jsonl").status_code == 404  # B's own prefix has none
    escape = f"%2E%2E/%2E%2E/{name_a}/data/raw/secret.jsonl"
    assert b.get(f"/v1/data/{escape}").status_code == 422
    assert b.put(f"/v1/data/{escape}", content=b"B's").status_code == 422
    written = b.put("/v1/data/raw/secret.jsonl", content=b"B's")  # lands in B's own prefix
    assert written.status_code == 201 and written.json()["uri"] != uri
    assert f"/tenants/{other.name}/data/" in written.json()["uri"]
    refused = b.post("/v1/jobs", json={**SPEC, "data": {"source": "uri", "uri": uri}})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "data.uri"
    assert a_file.read_bytes() == b"A's" and a.get("/v1/data/raw/secret.jsonl").content == b"A's"


def test_cli_whoami_and_data_upload(brigade, tenant, store_root, tmp_path):  # noqa: F811
    name, key = tenant
    as_tenant = {"BRIGADE_API_KEY": key}
    table = brigade("whoami", env=as_tenant)
    assert table.exit_code == 0, table.output
    prefix = f"file://{store_root}/tenants/{name}/data/"
    assert f"data prefix   {prefix}" in table.stdout and "queued jobs   0 of 3" in table.stdout
    assert json.loads(brigade("whoami", "-o", "json", env=as_tenant).stdout)["data_prefix"] == prefix
    assert json.loads(brigade("whoami", "-o", "json").stdout)["tenant"] == "admin"
    assert brigade("data", "prefix", env=as_tenant).stdout.strip() == prefix

    folder = tmp_path / "corpus"
    (folder / "more").mkdir(parents=True)
    for part, text in (("a.jsonl", "one"), ("b.jsonl", "two"), ("more/c.jsonl", "three")):
        (folder / part).write_text(json.dumps({"text": text}) + "\n")
    uploaded = brigade("data", "upload", str(folder), "raw/", env=as_tenant)
    assert uploaded.exit_code == 0, uploaded.output
    uris = [line.rsplit(": ", 1)[1] for line in uploaded.stdout.splitlines()]
    assert uris == [f"{prefix}raw/corpus/{p}" for p in ("a.jsonl", "b.jsonl", "more/c.jsonl")]
    assert (store_root / "tenants" / name / "data/raw/corpus/more/c.jsonl").read_text() == \
        '{"text": "three"}\n'
    one = brigade("data", "upload", str(folder / "a.jsonl"), "-o", "json", env=as_tenant)
    assert one.exit_code == 0 and json.loads(one.stdout)[0]["uri"] == f"{prefix}a.jsonl"
    refused = brigade("data", "upload", str(folder / "a.jsonl"), "../a.jsonl", env=as_tenant)
    assert refused.exit_code == 1 and "'../a.jsonl'" in refused.stderr and "HTTP 422" in refused.stderr


def test_the_client_refuses_nothing_itself_but_checks_what_arrived(server, tenant, tmp_path):
    _, key = tenant
    local = tmp_path / "x.jsonl"
    local.write_bytes(b"x" * (MAX_UPLOAD + 1))
    with BrigadeClient(server.url, key, timeout=10) as client, pytest.raises(BrigadeError) as big:
        client.upload(local, "x.jsonl")
    assert big.value.status == 413 and "BRIGADE_MAX_UPLOAD_BYTES" in big.value.message


def _put(me: httpx.Client, files: dict[str, bytes]) -> None:
    for path, content in files.items():
        assert me.put(f"/v1/data/{path}", content=content).status_code == 201


def test_the_listing_pages_the_callers_files_under_a_prefix(tenant, as_key, client, store_root):
    name, key = tenant
    me = as_key(key)
    files = {"raw/b.jsonl": b"bb", "raw/a.jsonl": b"a", "raw/sub/c.jsonl": b"ccc", "other.txt": b"o"}
    _put(me, files)
    (store_root / "tenants" / name / "data/raw/sub/put-by-a-job.bin").write_bytes(b"jjjj")

    listed = me.get("/v1/data", params={"prefix": "raw/"})
    assert listed.status_code == 200, listed.text
    body = listed.json()
    paths = ["raw/a.jsonl", "raw/b.jsonl", "raw/sub/c.jsonl", "raw/sub/put-by-a-job.bin"]
    assert [f["path"] for f in body["items"]] == paths and body["total"] == 4
    by_path = {f["path"]: f for f in body["items"]}
    prefix = me.get("/v1/whoami").json()["data_prefix"]
    for path in paths[:3]:
        assert by_path[path]["uri"] == prefix + path and by_path[path]["bytes"] == len(files[path])
        assert by_path[path]["sha256"] == hashlib.sha256(files[path]).hexdigest()
        written = datetime.fromisoformat(by_path[path]["modified"])
        assert abs(datetime.now(UTC) - written) < timedelta(minutes=5)
    assert by_path["raw/sub/put-by-a-job.bin"]["sha256"] is None  # not an upload: not known
    assert by_path["raw/sub/put-by-a-job.bin"]["bytes"] == 4

    page = me.get("/v1/data", params={"prefix": "raw/", "limit": 2, "offset": 2}).json()
    assert [f["path"] for f in page["items"]] == paths[2:] and page["total"] == 4
    assert [f["path"] for f in me.get("/v1/data", params={"prefix": "raw/b"}).json()["items"]] == \
        ["raw/b.jsonl"]
    assert me.get("/v1/data").json()["total"] == 5  # no prefix: every file
    assert me.get("/v1/data", params={"prefix": "nothing/"}).json() == \
        {"items": [], "total": 0, "limit": 50, "offset": 0}
    # a file changed behind the upload's back: its sha256 is no longer known
    (store_root / "tenants" / name / "data/raw/a.jsonl").write_bytes(b"changed")
    again = {f["path"]: f for f in me.get("/v1/data", params={"prefix": "raw/a"}).json()["items"]}
    assert again["raw/a.jsonl"]["sha256"] is None and again["raw/a.jsonl"]["bytes"] == 7

    other = client.create_tenant(f"data-{uuid.uuid4().hex[:8]}")
    assert as_key(other.api_key).get("/v1/data").json()["total"] == 0  # never another's
    for escape in ("../", f"%2E%2E/%2E%2E/{name}/data/", "/etc/"):
        refused = as_key(other.api_key).get(f"/v1/data?prefix={escape}")
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "prefix", refused.text


def test_a_folder_asked_for_as_a_file_is_a_404_that_says_so(tenant, as_key):
    _, key = tenant
    me = as_key(key)
    _put(me, {"raw/in/x.jsonl": b"x"})
    for answer in (me.get("/v1/data/raw/in"), me.delete("/v1/data/raw/in")):
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert "is a folder, not a file" in error["message"] and "prefix=raw/in/" in error["message"]
    assert me.get("/v1/data/raw/in/x.jsonl").content == b"x"  # the folder's file is still there


def test_a_file_removed_is_gone_and_audited(tenant, as_key, http, client, store_root):
    name, key = tenant
    me = as_key(key)
    _put(me, {"raw/gone.jsonl": b"g", "raw/kept.jsonl": b"k"})
    other = as_key(client.create_tenant(f"data-{uuid.uuid4().hex[:8]}").api_key)
    assert other.delete("/v1/data/raw/gone.jsonl").status_code == 404  # its own prefix has none
    assert other.delete(f"/v1/data/%2E%2E/%2E%2E/{name}/data/raw/gone.jsonl").status_code == 422

    removed = me.delete("/v1/data/raw/gone.jsonl")
    assert removed.status_code == 204 and removed.content == b""
    assert not (store_root / "tenants" / name / "data/raw/gone.jsonl").exists()
    assert (store_root / "tenants" / name / "data/raw/kept.jsonl").read_bytes() == b"k"
    assert [f["path"] for f in me.get("/v1/data", params={"prefix": "raw/"}).json()["items"]] == \
        ["raw/kept.jsonl"]
    assert me.delete("/v1/data/raw/gone.jsonl").status_code == 404
    trail = http.get("/v1/audit", params={"action": "data.delete", "tenant": name}).json()["items"]
    assert [(e["action"], e["target"], e["detail"]["bytes"]) for e in trail] == \
        [("data.delete", "raw/gone.jsonl", 1)]


def test_a_file_a_job_still_reads_is_not_removed(tenant, as_key, store_root):
    name, key = tenant
    me = as_key(key)
    # a byte file a job reads holds at least a window (seq_len + 2 bytes: checked at submit)
    _put(me, {"raw/read.jsonl": b'{"text": "a"}\n' * 8, "corpus/a.jsonl": b'{"text": "b"}\n'})
    prefix = me.get("/v1/whoami").json()["data_prefix"]
    job = me.post("/v1/jobs", json={**SPEC, "data": {"source": "uri", "uri": prefix + "raw/read.jsonl"}})
    assert job.status_code == 201, job.text
    prepare = me.post("/v1/datasets", json={"inputs": ["corpus/*.jsonl"], "output": "tokens/ds",
                                            "train_vocab_size": 300})
    assert prepare.status_code == 201, prepare.text

    for path, job_id, field in (("raw/read.jsonl", job.json()["id"], "data.uri"),
                                ("corpus/a.jsonl", prepare.json()["id"], "prepare.inputs.0")):
        refused = me.delete(f"/v1/data/{path}")
        assert refused.status_code == 409, refused.text
        message = refused.json()["error"]["message"]
        assert job_id in message and f"({field})" in message, message
        assert (store_root / "tenants" / name / "data" / path).exists()
        assert me.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        assert me.delete(f"/v1/data/{path}").status_code == 204  # its job has ended


def test_cli_data_ls_and_rm(brigade, tenant, as_key):  # noqa: F811
    _, key = tenant
    as_tenant = {"BRIGADE_API_KEY": key}
    _put(as_key(key), {"raw/one.jsonl": b"1", "raw/two.jsonl": b"22", "top.txt": b"t"})
    table = brigade("data", "ls", "raw/", env=as_tenant)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["PATH", "BYTES", "MODIFIED", "SHA256"]
    assert [line.split()[:2] for line in lines[1:]] == [["raw/one.jsonl", "1"], ["raw/two.jsonl", "2"]]
    assert hashlib.sha256(b"22").hexdigest() in lines[2]
    listed = json.loads(brigade("data", "ls", "-o", "json", env=as_tenant).stdout)
    assert [f["path"] for f in listed] == ["raw/one.jsonl", "raw/two.jsonl", "top.txt"]

    removed = brigade("data", "rm", "raw/one.jsonl", env=as_tenant)
    assert removed.exit_code == 0 and "removed raw/one.jsonl" in removed.stdout
    assert [f["path"] for f in json.loads(brigade("data", "ls", "-o", "json", env=as_tenant).stdout)] \
        == ["raw/two.jsonl", "top.txt"]
    missing = brigade("data", "rm", "raw/one.jsonl", env=as_tenant)
    assert missing.exit_code == 1 and "not found" in missing.stderr and "HTTP 404" in missing.stderr
