"""The lean install (`pip install brigade`: the CLI and the client only) of this
checkout, in a virtual environment of its own.

    python -m tests.lean_venv .venv-lean     # what `make test` runs first (once; again when
                                             # pyproject.toml changes): the venv and its requirements
    install_checkout(venv, work)             # what tests/api/test_lean_install.py does each run

Making the venv and resolving the wheel's requirements from the package index
is the slow part (tens of seconds): it is done once, as an install step, so
the suite does not pay it. The test then installs the wheel of the checkout as
it is now into that venv (its requirements resolved again, found installed), so
what it checks is always this checkout's code and what its requirements pull.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{args}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def build_wheel(work: Path) -> Path:
    """The wheel of this checkout, built from a copy (building writes build/ and
    *.egg-info beside the sources)."""
    source = work / "src"
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    for name in {pattern.rstrip("*") for pattern in find["find"]["include"]}:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "-w", work / "wheels", source)
    return next((work / "wheels").glob("brigade-*.whl"))


def install_checkout(venv: Path, work: Path) -> Path:
    """Install this checkout's wheel into `venv` (made if missing), its
    requirements and all; the wheel itself always afresh."""
    wheel = build_wheel(work)
    pip = venv / "bin" / "pip"
    if not pip.exists():
        run(sys.executable, "-m", "venv", venv)
    run(pip, "install", "-q", wheel)  # the requirements, from the index where missing
    run(pip, "install", "-q", "--force-reinstall", "--no-deps", wheel)  # the code as it is now
    return venv


def main(argv: list[str]) -> int:
    """Make the venv afresh (requirements a change of pyproject.toml dropped must go)."""
    venv = Path(argv[0] if argv else ".venv-lean").resolve()
    shutil.rmtree(venv, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="brigade-lean-") as work:
        install_checkout(venv, Path(work))
    print(f"the lean install of this checkout: {venv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
