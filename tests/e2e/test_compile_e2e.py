"""`train.compile` where the compiler cannot run: a `brigade serve` (its own
local Ray head) whose ranks' inductor is pointed at a C++ compiler that is not
there fails a compiled job at once, with the compiler's reason, without
spending a restart."""

from __future__ import annotations

import pytest

from tests.e2e.serve_harness import Server, spec


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("brigade")
    # The Ray head the server starts, and so every rank, inherits it: inductor reads
    # its C++ compiler from CXX.
    srv = Server(data_dir, env={"CXX": str(data_dir / "no-such-c++")}).start()
    yield srv
    srv.stop()


def test_a_compiled_job_whose_compiler_cannot_run_fails_at_once_without_restarts(server):
    job = server.submit(spec(5, train={"steps": 5, "global_batch_size": 12, "compile": True},
                             max_restarts=3))
    done = server.wait(job["id"], lambda j: j["state"] in ("FAILED", "SUCCEEDED"), timeout_s=300)
    assert done["state"] == "FAILED", done
    assert done["restarts"] == 0 and done["step"] == 0, done
    assert "CompileError: torch.compile (train.compile) cannot run here" in done["error"], done["error"]
    assert "C++ compiler" in done["error"] and "no-such-c++" in done["error"], done["error"]
    states = [e["to_state"] for e in server.get(f"/v1/jobs/{job['id']}/events")]
    assert "RESTARTING" not in states and states[-1] == "FAILED", states
