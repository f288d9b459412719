"""The lean install: a virtual environment given only `pip install
brigade` (the wheel of this checkout, its requirements from the package
index) runs `brigade --help` and talks to a live server through the CLI and
the client, with no torch, no Ray and no database driver installed."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.api.conftest import ADMIN_KEY
from tests.lean_venv import ROOT, install_checkout

LEAN_VENV = ROOT / ".venv-lean"

HEAVY = {"torch", "ray", "sqlalchemy", "psycopg", "psycopg-binary", "fastapi", "uvicorn", "numpy",
         "pydantic-settings", "alembic", "prometheus-client"}
CLIENT_CALL = """
import json, sys
from api.client import BrigadeClient
with BrigadeClient() as client:  # BRIGADE_URL and BRIGADE_API_KEY
    page = client.jobs(limit=1)
heavy = sorted(m for m in ("torch", "ray", "sqlalchemy", "fastapi", "numpy") if m in sys.modules)
print(json.dumps({"total": page.total, "heavy": heavy}))
"""


def run(*args, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def lean_venv(tmp_path_factory):
    """The lean venv with the wheel of this checkout installed, its requirements and all:
    `make test`'s `.venv-lean` (made once, by `python -m tests.lean_venv`) where it is,
    else a fresh one (the requirements from the package index: tens of seconds more)."""
    work = tmp_path_factory.mktemp("lean")
    venv = LEAN_VENV if (LEAN_VENV / "bin" / "pip").exists() else work / "venv"
    return install_checkout(venv, work)


def test_the_lean_install_runs_the_cli_and_the_client(lean_venv, server, tmp_path):
    installed = json.loads(run(lean_venv / "bin" / "pip", "list", "--format", "json").stdout)
    names = {p["name"].lower() for p in installed}
    assert {"brigade", "httpx", "pydantic", "typer", "rich", "pyyaml"} <= names
    assert not names & HEAVY, f"the lean install pulled {sorted(names & HEAVY)}"

    env = {"PATH": f"{lean_venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "BRIGADE_URL": server.url, "BRIGADE_API_KEY": ADMIN_KEY}
    helped = run(lean_venv / "bin" / "brigade", "--help", env=env, cwd=tmp_path)
    assert "submit" in helped.stdout and "login" in helped.stdout
    listed = run(lean_venv / "bin" / "brigade", "jobs", "-o", "json", env=env, cwd=tmp_path)
    assert "items" in json.loads(listed.stdout)
    called = json.loads(run(lean_venv / "bin" / "python", "-c", CLIENT_CALL, env=env,
                            cwd=tmp_path).stdout)
    assert called["total"] >= 0 and called["heavy"] == []
