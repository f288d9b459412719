"""An operator's distribution, made by a test: modules and an
`entry_points.txt` under a folder put on sys.path the way an installed
package is, so that Brigade finds what it registers with no edit of Brigade."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def distribution_on_path(root: Path, monkeypatch, name: str, modules: dict[str, str],
                         entry_points: str) -> Iterator[Path]:
    """The distribution `name` (its modules by name, their sources) under
    `root`, on sys.path while the block runs; its modules forgotten after."""
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(root))
    try:
        yield root
    finally:
        for module in modules:
            sys.modules.pop(module, None)
