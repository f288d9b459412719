"""A rank's own output, captured for the job's log: what a process writes to
its stdout and stderr (from Python and below it) reaches `take`, bounded in
line length, in lines waiting and in lines over an attempt, and still goes on
to where the stream went before. Each case in a child process of its own
(capturing moves file descriptors 1 and 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from workers.cluster.rank_output import OutputCapture


def run_child(body: str) -> tuple[list[str], str, str]:
    """(what take() returned, the child's real stdout, its real stderr)."""
    code = textwrap.dedent(f"""
        import json, os, sys, time
        from workers.cluster.rank_output import OutputCapture
        capture = OutputCapture(line_limit=50, buffer_lines=5, total_lines=8).start()
        {textwrap.indent(textwrap.dedent(body), '        ').strip()}
        sys.stdout.flush(); sys.stderr.flush()
        time.sleep(0.2)
        taken = capture.take()
        os.write(int(sys.argv[1]), json.dumps(taken).encode())
    """)
    read_end, write_end = os.pipe()
    done = subprocess.run([sys.executable, "-c", code, str(write_end)], capture_output=True, text=True, timeout=60,
                          pass_fds=(write_end,), env={**os.environ, "PYTHONPATH": "."})
    os.close(write_end)
    taken = json.loads(os.read(read_end, 1 << 20) or b"null")
    os.close(read_end)
    assert done.returncode == 0, done.stderr
    return taken, done.stdout, done.stderr


def test_stdout_and_stderr_from_python_and_below_reach_take_and_their_files():
    taken, out, err = run_child("""
        print("hello from python")
        print("a warning", file=sys.stderr)
        os.write(2, b"from C, no newline at first ")
        os.write(2, b"then one\\n:actor_name:RankActor\\n")
    """)
    assert sorted(taken) == ["a warning", "from C, no newline at first then one", "hello from python"]
    assert "hello from python" in out and ":actor_name:RankActor" in err  # still where it went


def test_bounded_in_length_waiting_lines_and_total():
    taken, _, _ = run_child("""
        print("x" * 80)
        for i in range(9):
            print(f"line {i}")
    """)
    # 8 lines kept in all (a long one first), then a line saying so; 5 wait at most
    assert taken == ["[4 lines of output dropped: printed faster than read]",
                     "line 3", "line 4", "line 5", "line 6",
                     "[output past 8 lines is not kept in the job's log]"]


def test_keep_cuts_a_long_line_and_skips_ray_markers():
    capture = OutputCapture(line_limit=10)
    capture.keep("y" * 25)
    capture.keep(":task_name:train")
    capture.keep("   ")
    assert capture.take() == ["yyyyyyyyyy...[15 more chars]"]
    assert capture.take() == []


@pytest.mark.ray
def test_a_ranks_output_reaches_its_group(fork_pool):
    import ray

    from workers.cluster.group import WorkerGroup

    def _say(actor, text: str) -> None:  # defined here: shipped to the actor by value
        import warnings

        print(text)
        warnings.warn(f"{text}, warned", stacklevel=1)  # to stderr, as torch's warnings go

    with WorkerGroup(2, cpus_per_worker=0.5, pool=fork_pool) as group:
        ray.get([actor.__ray_call__.remote(_say, f"hello from {r}")
                 for r, actor in enumerate(group.actors)])
        deadline = time.monotonic() + 10
        taken: list[list[str]] = [[], []]
        while not all(any("warned" in line for line in lines) for lines in taken):
            assert time.monotonic() < deadline, taken
            for rank, lines in enumerate(group.output()):
                taken[rank] += lines
            time.sleep(0.05)
    for rank, lines in enumerate(taken):
        assert f"hello from {rank}" in lines
        assert not any(line.startswith(":actor_name:") for line in lines)
