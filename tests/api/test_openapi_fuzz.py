"""Schemathesis against the live server's /openapi.json (its CLI, in a
subprocess, over real HTTP): whatever it sends, no answer is a 5xx."""

from __future__ import annotations

import subprocess
import sys

from tests.api.conftest import ADMIN_KEY

MAX_EXAMPLES = 25  # per operation and phase: ~10 s on two cores


def test_no_request_gets_a_server_error(server, tmp_path):
    command = [
        sys.executable, "-m", "schemathesis.cli", "run", f"{server.url}/openapi.json",
        "--header", f"Authorization: Bearer {ADMIN_KEY}",
        "--checks", "not_a_server_error",
        "--max-examples", str(MAX_EXAMPLES),
        "--generation-database", "none",
        "--request-timeout", "10",
        # One worker: hypothesis parses lambdas' source with `ast`, which is not
        # safe across threads (a SystemError in the coverage phase was seen).
        "--workers", "1",
        "--seed", "20261130",  # a run CI can reproduce
    ]
    # cwd: schemathesis keeps files of its own in the working directory.
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
    assert " passed" in result.stdout
