"""SQLite serves one replica: a second `brigade serve` on the same SQLite file
refuses to start, before it touches Ray, saying why, with a non-zero exit;
once the first has gone (its lock with it), a server starts there again."""

from __future__ import annotations

import os
import subprocess
import sys

from service.runtime import sqlite_lock


def serve(data_dir) -> subprocess.CompletedProcess:
    env = dict(os.environ, BRIGADE_ADMIN_KEY="e2e-admin-key-0123456789",
               BRIGADE_SECRET="e2e-secret-0123456789abcdef")
    return subprocess.run([sys.executable, "-m", "api.cli", "serve", "--port", "0",
                           "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=120, env=env)


def test_a_second_server_on_one_sqlite_file_refuses_to_start(tmp_path):
    url = f"sqlite:///{tmp_path / 'brigade.db'}"
    first = sqlite_lock(url)  # what a running `brigade serve` there holds
    assert first is not None
    try:
        second = serve(tmp_path)
        assert second.returncode == 1, second.stderr
        assert "another brigade serve already runs on the SQLite database" in second.stderr
        assert "Postgres" in second.stderr and "Traceback" not in second.stderr
        assert not (tmp_path / "ray.json").exists()  # refused before starting Ray
    finally:
        first.close()
    again = sqlite_lock(url)  # the first gone: free again
    assert again is not None
    again.close()
