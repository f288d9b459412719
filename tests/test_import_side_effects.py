"""Importing Brigade's packages changes nothing in the caller's environment
(Ray's auth mode is set where Brigade starts or joins Ray, not at import)."""

import subprocess
import sys

MODULES = ["api.client", "api.cli.main", "api.server.app", "service", "service.supervisor",
           "service.run.ray_cluster", "workers", "workers.schema", "workers.cluster.group", "checkpoints"]

# Ray sets variables of its own when imported (RAY_CLIENT_MODE): it is
# imported first, so what changes after is Brigade's doing.
PROBE = """
import importlib, json, os, sys
import ray
before = dict(os.environ)
for name in sys.argv[1:]:
    importlib.import_module(name)
after = dict(os.environ)
print(json.dumps({k: [before.get(k), after.get(k)] for k in set(before) | set(after)
                  if before.get(k) != after.get(k)}))
"""


def test_importing_brigade_changes_no_environment_variable():
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "PYTHONPATH": "."}  # no RAY_AUTH_MODE
    out = subprocess.run([sys.executable, "-c", PROBE, *MODULES], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "{}"
