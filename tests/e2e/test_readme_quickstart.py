"""The README's quick start, as written: the shell lines a new user types
after `make serve` (the block after the README's `<!-- quick start: ... -->`
marker) run one by one, literally, in bash from a directory that holds the checkout's
`.venv` and `docs` (so what they write stays out of the checkout), against a
fresh `brigade serve` (tests/e2e/serve_harness.py: its own port, data dir and
local Ray head). The CLI is told nothing but where that serve keeps its data
(BRIGADE_DATA_DIR, what `.data/` is for a user): it finds the URL and the
admin key there, as a user's does. A README that drifts from the CLI fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.serve_harness import Server

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- quick start:"


def quick_start(readme: str) -> list[str]:
    """The commands of the sh block after the marker, a line each (comments kept: bash drops them)."""
    after = readme[readme.index(MARKER):]
    block = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert block, f"no ```sh block after {MARKER!r} in README.md"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_the_quick_start_block_is_found():
    lines = quick_start((ROOT / "README.md").read_text())
    assert lines and all(line.startswith((".venv/bin/brigade ", ".venv/bin/python docs/examples/"))
                         for line in lines), lines


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # No BRIGADE_ADMIN_KEY: the serve generates its key and keeps it in its data dir, as at a
    # user's first `make serve`.
    srv = Server(tmp_path_factory.mktemp("quickstart"), env={"BRIGADE_ADMIN_KEY": ""}).start()
    yield srv
    srv.stop()


def test_the_readme_quick_start_runs_as_written(server, tmp_path):
    assert (ROOT / ".venv" / "bin" / "brigade").exists(), "the quick start runs .venv/bin/brigade"
    env = {k: v for k, v in os.environ.items()
           if k not in ("BRIGADE_URL", "BRIGADE_API_KEY", "BRIGADE_ADMIN_KEY", "BRIGADE_PROFILE")}
    env |= {"BRIGADE_DATA_DIR": str(server.data_dir),  # what ./.data is to a user
            "BRIGADE_CONFIG": str(tmp_path / "no-profiles.yaml"), "COLUMNS": "120"}
    said = []
    # The checkout as a user's shell sees it (its .venv and docs/), in a directory of the test's
    # own: what the lines write (the first one's corpus/) stays out of the checkout.
    home = tmp_path / "checkout"
    home.mkdir()
    for name in (".venv", "docs"):
        (home / name).symlink_to(ROOT / name)
    for line in quick_start((ROOT / "README.md").read_text()):
        started = time.monotonic()
        ran = subprocess.run(["bash", "-c", line], cwd=home, env=env, capture_output=True,
                             text=True, timeout=180)
        print(f"{time.monotonic() - started:.1f} s: {line}")  # pytest -s: where the minute goes
        said.append((line, ran))
        assert ran.returncode == 0, (f"{line}\nexit {ran.returncode}\nstdout:\n{ran.stdout[-3000:]}"
                                     f"\nstderr:\n{ran.stderr[-3000:]}\n{server.log_tail()}")

    # The prepare job and the training job are followed to their ends; the list shows both finished.
    prepared = next(ran for line, ran in said if " data prepare " in line)
    submitted = next(ran for line, ran in said if " submit -F " in line)
    listing = next(ran.stdout for line, ran in said if line.split("#")[0].rstrip().endswith(" jobs"))
    for ran in (prepared, submitted):
        job_id = ran.stdout.split()[0]
        assert job_id.startswith("j-") and "SUCCEEDED" in ran.stderr, ran
        assert any(row.startswith(job_id) and "SUCCEEDED" in row for row in listing.splitlines()), listing

    # The Llama trained as its YAML says: WSD's lr in every row (warmup to 0.003, stable, then
    # a cosine decay over the last quarter), a held-out eval every 10 steps, the loss down.
    job_id = submitted.stdout.split()[0]
    shown = subprocess.run([".venv/bin/brigade", "metrics", job_id, "-o", "json"], cwd=home, env=env,
                           capture_output=True, text=True, timeout=60)
    rows = json.loads(shown.stdout)
    rows = rows["items"] if isinstance(rows, dict) else rows
    lr = {row["step"]: row["lr"] for row in rows}
    assert sorted(lr) == list(range(1, 41)), sorted(lr)
    assert lr[1] < lr[4] == lr[31] == pytest.approx(0.003) and lr[32] < 0.003 and lr[40] < lr[35]
    assert [row["step"] for row in rows if row.get("eval_loss") is not None] == [10, 20, 30, 40]
    assert rows[-1]["loss"] < rows[0]["loss"] - 1.0, (rows[0]["loss"], rows[-1]["loss"])


def test_the_readme_opens_with_the_two_commands_and_ci_runs_its_test_command():
    """`make serve` and `make test` are the README's first commands, before its quick start;
    `.ci/run` runs that test command as it is written there."""
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert first and readme.index(first.group(0)) < readme.index(MARKER)
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["make serve", "make test"], commands
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci


def test_every_relative_link_of_the_readme_and_docs_names_a_file_there():
    """The reference moved from the README into docs/: every link between them still lands."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or a place on the same page
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == [], broken
