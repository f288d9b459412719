"""Write a small corpus of real text, with nothing downloaded: the docstrings
of Python's standard library (`--kind prose`, English) or the source of its
functions and classes (`--kind code`), one jsonl document each
(`{"text": ...}`), split over a few files. Deterministic: the same files on
every machine with the same Python.

    .venv/bin/python docs/examples/make_corpus.py corpus [--kind prose|code] [--files 3] [--docs 300]

What docs/examples/pretrain-llama.yaml and mixture.yaml train on, once
uploaded (`brigade data upload corpus raw/`) and prepared into tokens
(`brigade data prepare --service ...`: the comments at their tops).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
import warnings
from pathlib import Path

# Pure-Python modules whose import has no side effects worth having here.
MODULES = ("argparse", "collections", "csv", "dataclasses", "datetime", "decimal", "difflib",
           "email", "fractions", "functools", "heapq", "http", "inspect", "ipaddress", "itertools",
           "json", "logging", "pathlib", "pickle", "random", "shutil", "statistics", "string",
           "tarfile", "textwrap", "threading", "typing", "urllib", "uuid", "zipfile")


def documents(limit: int, kind: str = "prose") -> list[str]:
    """Up to `limit` docstrings (or sources) of at least 200 characters, in a fixed order."""
    seen: set[str] = set()
    found: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in MODULES:
            module = importlib.import_module(name)
            members = [module] + [m for _, m in sorted(inspect.getmembers(module), key=lambda kv: kv[0])]
            if hasattr(module, "__path__"):
                for info in sorted(pkgutil.iter_modules(module.__path__), key=lambda i: i.name):
                    if info.name.startswith("_"):  # __main__ runs on import
                        continue
                    try:
                        members.append(importlib.import_module(f"{name}.{info.name}"))
                    except Exception:  # noqa: BLE001 - an optional submodule (a missing C library)
                        continue
            for member in members:
                doc = inspect.getdoc(member) if kind == "prose" else _source(member)
                if doc and len(doc) >= 200 and doc not in seen:
                    seen.add(doc)
                    found.append(doc)
                    if len(found) == limit:
                        return found
    return found


def _source(member: object) -> str | None:
    if not (inspect.isfunction(member) or inspect.isclass(member)):
        return None
    try:
        return inspect.getsource(member)  # type: ignore[arg-type]
    except (OSError, TypeError):  # defined in C, or no file
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write part-N.jsonl into")
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--kind", choices=("prose", "code"), default="prose")
    parser.add_argument("--docs", type=int, default=300, help="documents in all")
    args = parser.parse_args()
    docs = documents(args.docs, args.kind)
    args.out.mkdir(parents=True, exist_ok=True)
    for i in range(args.files):
        with open(args.out / f"part-{i}.jsonl", "w") as f:
            for doc in docs[i::args.files]:
                f.write(json.dumps({"text": doc}) + "\n")
    print(f"{len(docs)} documents in {args.files} files under {args.out}")


if __name__ == "__main__":
    main()
