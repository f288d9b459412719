"""The lean install: a fresh virtual environment given only `pip install
brigade` (the wheel of this checkout, its requirements from the package
index) runs `brigade --help` and talks to a live server through the CLI and
the client, with no torch, no Ray and no database driver installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.api.conftest import ADMIN_KEY

ROOT = Path(__file__).resolve().parents[2]
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
    """A fresh venv with the wheel of this checkout installed, its requirements and all."""
    work = tmp_path_factory.mktemp("lean")
    source = work / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = {pattern.rstrip("*") for pattern in find["find"]["include"]}
    for name in packages:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "-w", work / "wheels", source)
    wheel = next((work / "wheels").glob("brigade-*.whl"))
    venv = work / "venv"
    run(sys.executable, "-m", "venv", venv)
    run(venv / "bin" / "pip", "install", "-q", wheel)  # with its requirements
    return venv


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
