"""Every figure of docs/benchmarks.md, with its plot, from one command.

    .venv/bin/python -m bench                     # all figures; rewrites docs/benchmarks.md and docs/*.png
    .venv/bin/python -m bench --only memory,api   # some figures; the others are kept as they were
    .venv/bin/python -m bench --quick             # a small smoke run: bench/out/quick/, docs/ untouched
    .venv/bin/python -m bench --list

Each figure runs as `python -m bench.NAME` in its own process (a clean Ray,
process-group and memory state for each), one after another; a figure that
fails is reported as failed in the document and the others still run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from bench.figures import FIGURES, TITLES
from bench.report import COMMAND, DOC, DOCS, OUT, REPO, Figure, assemble, load


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, results under bench/out/quick/, docs/ left alone")
    parser.add_argument("--only", action="append", default=[], metavar="NAME[,NAME]",
                        help=f"run only these figures (of: {', '.join(FIGURES)})")
    parser.add_argument("--list", action="store_true", help="list the figures and exit")
    parser.add_argument("--timeout", type=float, default=900.0, help="per figure, seconds")
    parser.add_argument("--reassemble", action="store_true",
                        help="run nothing: rewrite docs/benchmarks.md from the last results "
                             "(bench/out/results/*.json)")
    args = parser.parse_args(argv)
    names = [n for item in args.only for n in item.split(",") if n]
    unknown = [n for n in names if n not in TITLES]
    if unknown:
        parser.error(f"unknown figure(s): {', '.join(unknown)} (known: {', '.join(FIGURES)})")
    args.names = [n for n in FIGURES if n in names] if names else list(FIGURES)
    return args


def run_one(name: str, quick: bool, timeout_s: float) -> Figure:
    results = OUT / ("quick" if quick else "results")
    result = results / f"{name}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", f"bench.{name}", "--result", str(result),
           "--png-dir", str(results if quick else DOCS)] + (["--quick"] if quick else [])
    before, start = load(), time.perf_counter()
    log = results / f"{name}.log"
    results.mkdir(parents=True, exist_ok=True)
    print(f"== {name}: {' '.join(cmd[1:])} (log: {log.relative_to(REPO)})", flush=True)
    try:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s)
        error = None if proc.returncode == 0 and result.exists() else (
            f"exit status {proc.returncode}: " + log.read_text()[-300:].strip().replace("\n", " / "))
    except subprocess.TimeoutExpired:
        error = f"did not finish within {timeout_s:g} s"
    if error is None:
        figure = Figure.read(result)
    else:
        figure = Figure(name=name, title=TITLES[name], command=f"{COMMAND} --only {name}", body="",
                        headline="", error=error, load_before=before, load_after=load(),
                        seconds=time.perf_counter() - start,
                        started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print(f"   {name}: {'FAILED: ' + error if error else figure.headline} "
          f"({figure.seconds:.0f} s, load {figure.load_before:.2f} -> {figure.load_after:.2f})",
          flush=True)
    return figure


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name in FIGURES:
            print(f"{name:12s} {TITLES[name]}")
        return 0
    start = time.perf_counter()
    results = OUT / "results"
    whole_run = None
    if args.reassemble:
        fresh = {n: Figure.read(results / f"{n}.json") for n in args.names
                 if (results / f"{n}.json").exists()}
        if (results / "whole_run.txt").exists():
            whole_run = (results / "whole_run.txt").read_text().strip()
    else:
        fresh = {name: run_one(name, args.quick, args.timeout) for name in args.names}
        if args.names == FIGURES and not args.quick:
            loads = [x for f in fresh.values() for x in (f.load_before, f.load_after)]
            took = time.perf_counter() - start
            whole_run = (f"Whole run (`{COMMAND}`, all {len(FIGURES)} figures, one after "
                         f"another): {took:.0f} s ({took / 60:.0f} min), ending "
                         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
                         f"(1 min) between {min(loads):.1f} and {max(loads):.1f} at the figures' "
                         "starts and ends.")
            (results / "whole_run.txt").write_text(whole_run + "\n")
    doc = (OUT / "quick" / "benchmarks.md") if args.quick else DOC
    old = DOC.read_text() if DOC.exists() else ""
    text = assemble(FIGURES, TITLES, fresh, old, COMMAND, whole_run)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    failed = [n for n, f in fresh.items() if f.error]
    print(f"wrote {Path(doc).relative_to(REPO)} in {time.perf_counter() - start:.0f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
