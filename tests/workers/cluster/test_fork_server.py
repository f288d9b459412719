"""The fork server and its launcher as real processes, without Ray: the
launcher stands in for the worker Ray would have started (its streams,
environment, arguments, signals, exit), and nothing outlives its end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.waiting import wait_until
from workers.cluster.fork_host import LAUNCHER

# What Ray's default_worker.py is to a real launch: a script run as __main__.
WORKER = textwrap.dedent("""
    import json, os, signal, sys, time
    if sys.argv[1] == "report":
        print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv,
                          "cwd": os.getcwd(), "mark": os.environ.get("FORK_TEST_MARK"),
                          "torch": "torch" in sys.modules, "main": __name__}), flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    print(json.dumps({"pid": os.getpid()}), flush=True)
    time.sleep(60)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One fork server for the module (its preload imports torch: seconds)."""
    path = str(tmp_path_factory.mktemp("fork") / "server.sock")
    proc = subprocess.Popen([sys.executable, "-m", "workers.cluster.fork_server", path])
    assert wait_until(lambda: os.path.exists(path) or proc.poll() is not None, within_s=120)
    assert proc.poll() is None, "the fork server exited at start"
    yield proc, path
    proc.kill()
    proc.wait()


@pytest.fixture
def worker_script(tmp_path) -> Path:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return script


def launch(path: str, script: Path, mode: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-S", LAUNCHER, path, str(script), mode], cwd=cwd,
        env=dict(os.environ, FORK_TEST_MARK="from-the-launcher"), stdout=subprocess.PIPE, text=True,
    )


def test_the_worker_is_forked_with_the_launchers_streams_env_args_and_exit_code(server, worker_script,
                                                                               tmp_path):
    proc, path = server
    launcher = launch(path, worker_script, "report", tmp_path)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 3  # the worker's own exit code
    report = json.loads(out)
    assert report["ppid"] == proc.pid and report["pid"] != launcher.pid  # forked by the server
    assert report["torch"] is True  # imported before the fork, not by this worker
    assert report["main"] == "__main__"
    assert report["argv"] == [str(worker_script), "report"]
    assert report["mark"] == "from-the-launcher" and report["cwd"] == str(tmp_path)


def test_signals_reach_the_worker_and_the_launcher_exits_as_it_did(server, worker_script, tmp_path):
    _, path = server
    launcher = launch(path, worker_script, "wait", tmp_path)
    pid = json.loads(launcher.stdout.readline())["pid"]
    launcher.send_signal(signal.SIGTERM)  # as Ray stops a worker: the worker's handler runs
    assert launcher.wait(timeout=30) == 7
    assert wait_until(lambda: not _alive(pid), within_s=10)

    launcher = launch(path, worker_script, "wait", tmp_path)
    pid = json.loads(launcher.stdout.readline())["pid"]
    os.kill(pid, signal.SIGKILL)  # the worker killed: its launcher ends by the same signal
    assert launcher.wait(timeout=30) == -signal.SIGKILL


def test_a_killed_launcher_takes_its_worker_with_it_even_a_stopped_one(server, worker_script, tmp_path):
    _, path = server
    launcher = launch(path, worker_script, "wait", tmp_path)
    pid = json.loads(launcher.stdout.readline())["pid"]
    os.kill(pid, signal.SIGSTOP)  # a hung worker: it would never see a notice of its own
    launcher.kill()
    launcher.wait(timeout=30)
    assert wait_until(lambda: not _alive(pid), within_s=10)


def test_without_a_server_the_launcher_runs_the_worker_itself(worker_script, tmp_path):
    launcher = launch(str(tmp_path / "no-server.sock"), worker_script, "report", tmp_path)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 3
    report = json.loads(out)
    assert report["pid"] == launcher.pid and report["torch"] is False  # exec'd cold, in place
    assert report["mark"] == "from-the-launcher"


def test_the_server_exits_once_its_host_is_gone_and_its_workers_live_on(worker_script, tmp_path):
    path = str(tmp_path / "hosted.sock")
    host = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        server = subprocess.Popen([sys.executable, "-m", "workers.cluster.fork_server", {path!r}])
        print(server.pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    server_pid = int(host.stdout.readline())
    assert wait_until(lambda: os.path.exists(path), within_s=120)
    launcher = launch(path, worker_script, "wait", tmp_path)
    worker = json.loads(launcher.stdout.readline())["pid"]
    host.kill()
    host.wait()
    assert wait_until(lambda: not _alive(server_pid), within_s=15)
    assert not os.path.exists(path)  # a later launcher finds no server, and starts cold
    assert _alive(worker)  # a job's rank is the job's: the server's end is not its end
    launcher.send_signal(signal.SIGTERM)  # the launcher still forwards, and ends with it
    assert launcher.wait(timeout=30) == 1  # how the worker ended, only its parent knew
    assert wait_until(lambda: not _alive(worker), within_s=10)


def test_a_signal_before_the_servers_reply_reaches_the_worker_once_it_is_named(worker_script, tmp_path):
    """The window in which Ray may stop a worker the launcher cannot yet name:
    this test is the server, and answers only after the launcher was signalled."""
    import socket

    from workers.cluster.fork_exec import encode
    from workers.cluster.fork_server import _recv_request

    path = str(tmp_path / "slow.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    launcher = launch(path, worker_script, "wait", tmp_path)
    conn, _ = listener.accept()
    with conn, listener:
        conn.settimeout(30)
        for fd in _recv_request(conn).fds:  # read as the server reads it; its streams unused here
            os.close(fd)
        worker = subprocess.Popen([sys.executable, str(worker_script), "wait"], stdout=subprocess.PIPE,
                                  text=True)
        json.loads(worker.stdout.readline())  # its handler is in place
        time.sleep(0.5)  # the launcher has reached its wait for the reply
        launcher.send_signal(signal.SIGTERM)  # before any reply: the launcher must hold it
        time.sleep(0.5)
        assert launcher.poll() is None
        conn.sendall(encode({"pid": worker.pid}))
        assert worker.wait(timeout=30) == 7  # the held SIGTERM reached the worker's handler
        conn.sendall(encode({"exit": 7}))
        assert launcher.wait(timeout=30) == 7
