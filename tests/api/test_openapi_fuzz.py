"""Schemathesis against the live server's /openapi.json (its CLI, in a
subprocess, over real HTTP), every phase (examples, coverage, fuzzing,
stateful) and every check (`--checks all`): no answer is a 5xx, every status
answered is documented, every answer matches its schema and content type, a
request the document calls invalid is refused and one it calls valid is taken
(save the operations schemathesis.toml names, whose well-formed bodies may
meet rules across fields or about what exists), and a method a path lacks is a
405 whose `Allow` lists the path's methods. (A job or sweep fixed in the
config's `[parameters]` would reach more routes beyond a 404, but the
stateful phase then reads that one after it created another: ST302.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.api.conftest import ADMIN_KEY

MAX_EXAMPLES = 15  # per operation and phase
CONFIG = Path(__file__).resolve().parents[2] / "schemathesis.toml"


def test_the_openapi_document_tells_the_truth(server, tmp_path):
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG),
        "run", f"{server.url}/openapi.json",
        "--header", f"Authorization: Bearer {ADMIN_KEY}",
        "--checks", "all",
        "--max-examples", str(MAX_EXAMPLES),
        "--generation-database", "none",
        "--request-timeout", "10",
        # One worker: hypothesis parses lambdas' source with `ast`, which is not
        # safe across threads (a SystemError in the coverage phase was seen).
        "--workers", "1",
        "--seed", "20261130",  # a run CI can reproduce
    ]
    # cwd: schemathesis keeps files of its own in the working directory.
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
    assert " passed" in result.stdout and "failures" not in result.stdout.rsplit("SUMMARY", 1)[-1]
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):  # every phase ran, and passed
        assert re.search(rf"✅\s+{phase}", result.stdout), phase
