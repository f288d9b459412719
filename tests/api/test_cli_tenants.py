"""`brigade tenants ...` against the live server, and the SDK's tenant calls."""

from __future__ import annotations

import json
import uuid

import pytest

from api.client import BrigadeClient, BrigadeError
from tests.api.test_cli_jobs import brigade  # noqa: F401 - the fixture


def test_tenant_commands_create_list_update_rotate_delete(brigade, server):  # noqa: F811
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = brigade("tenants", "create", name, "--max-workers", "4", "--max-priority", "7")
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert "shown this once" in created.stderr and name in created.stderr
    tenant_id = created.stderr.split("(")[1].split(")")[0]
    with BrigadeClient(server.url, key, timeout=10) as own:
        assert own.jobs().total == 0

    listed = brigade("tenants", "list")
    assert listed.exit_code == 0 and listed.stdout.splitlines()[0].split()[:2] == ["ID", "NAME"]
    assert any(line.startswith(tenant_id) and "workers=4" in line for line in listed.stdout.splitlines())
    assert key not in listed.stdout

    updated = brigade("tenants", "update", tenant_id, "--max-gpus", "2", "--unlimit", "max_workers",
                      "--weight", "3")
    assert updated.exit_code == 0, updated.output
    body = json.loads(updated.stdout)
    assert body["quota"] == {"max_workers": None, "max_gpus": 2.0, "max_running_jobs": None,
                             "max_queued_jobs": None, "flavors": {}}
    assert (body["weight"], body["max_priority"]) == (3.0, 7)
    assert json.loads(brigade("tenants", "get", tenant_id).stdout) == body

    rotated = brigade("tenants", "rotate-key", tenant_id)
    assert rotated.exit_code == 0 and rotated.stdout.strip() not in ("", key)
    with BrigadeClient(server.url, key, timeout=10) as old, pytest.raises(BrigadeError) as refused:
        old.jobs()
    assert refused.value.status == 401

    deleted = brigade("tenants", "delete", tenant_id)
    assert deleted.exit_code == 0 and "deleted" in deleted.stderr
    missing = brigade("tenants", "get", tenant_id)
    assert missing.exit_code == 1 and "not found (HTTP 404)" in missing.stderr


def test_a_tenant_key_may_not_run_tenant_commands(brigade, client):  # noqa: F811
    tenant = client.create_tenant(f"cli-{uuid.uuid4().hex[:8]}")
    result = brigade("tenants", "list", env={"BRIGADE_API_KEY": tenant.api_key})
    assert result.exit_code == 1 and "HTTP 403" in result.stderr
    client.delete_tenant(tenant.id)
    with pytest.raises(BrigadeError) as gone:
        client.tenant(tenant.id)
    assert gone.value.status == 404


def test_flavor_quotas_are_set_changed_and_lifted_from_the_cli(brigade, client):  # noqa: F811
    a100, h100 = (f"f-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for flavor in (a100, h100):
        client.put_flavor(flavor, {"brigade.io/gpu": flavor})
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = brigade("tenants", "create", name, "--flavor-quota", f"{a100}=8:8",
                      "--flavor-quota", f"{h100}=:2")
    assert created.exit_code == 0, created.output
    tenant_id = created.stderr.split("(")[1].split(")")[0]
    assert client.tenant(tenant_id).quota.model_dump()["flavors"] == {
        a100: {"max_workers": 8, "max_gpus": 8.0}, h100: {"max_workers": None, "max_gpus": 2.0}}
    listed = brigade("tenants", "list")
    assert any(line.startswith(tenant_id) and f"{a100}.workers=8" in line
               for line in listed.stdout.splitlines())

    updated = brigade("tenants", "update", tenant_id, "--flavor-quota", f"{a100}=4",
                      "--no-flavor-quota", h100)
    assert updated.exit_code == 0, updated.output
    assert json.loads(updated.stdout)["quota"]["flavors"] == {
        a100: {"max_workers": 4, "max_gpus": None}}

    missing = brigade("tenants", "update", tenant_id, "--flavor-quota", "no-such-flavor=1")
    assert missing.exit_code == 1 and "quota.flavors.no-such-flavor" in missing.stderr
    for bad in ("a100", "=3", f"{a100}=x", f"{a100}=:", f"{a100}=-1", f"{a100}=1:-2"):
        refused = brigade("tenants", "update", tenant_id, "--flavor-quota", bad)
        assert refused.exit_code == 2 and "FLAVOR=WORKERS[:GPUS]" in refused.output, bad
    assert client.tenant(tenant_id).quota.model_dump()["flavors"] == {
        a100: {"max_workers": 4, "max_gpus": None}}
    client.delete_tenant(tenant_id)
