"""Descriptors found by name through one entry-point group: the model
families (`brigade.models`, workers/schema/families.py), the optimizers and the
lr schedules (`brigade.optimizers`, `brigade.schedules`, workers/schema/recipes.py).

Torch-free: the names come from distributions' metadata (nothing imported);
`get` imports only the module that holds the descriptor it is asked for.
Entry points are read per `sys.path`: a distribution put on the path later
is found (an operator's package, a test's); an unchanged path is read once.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

K = TypeVar("K")


class Registry(Generic[K]):
    """The descriptors (instances of `kind`) of entry-point `group`, by name;
    `not_found(name, registered names)` is the error an unknown name raises."""

    def __init__(self, group: str, kind: type[K], what: str,
                 not_found: Callable[[str, list[str]], LookupError]):
        self.group, self.kind, self.what, self.not_found = group, kind, what, not_found
        self._points: dict[tuple[str, ...], dict[str, EntryPoint]] = {}
        self._loaded: dict[tuple[tuple[str, ...], str], K] = {}

    def _entry_points(self) -> tuple[tuple[str, ...], dict[str, EntryPoint]]:
        key = tuple(sys.path)
        found = self._points.get(key)
        if found is None:
            found = {}
            for ep in entry_points(group=self.group):
                if ep.name in found and found[ep.name].value != ep.value:
                    logger.warning("%s %r registered twice (%s, %s): the first is used",
                                   self.what, ep.name, found[ep.name].value, ep.value)
                    continue
                found.setdefault(ep.name, ep)
            self._points[key] = found
        return key, found

    def names(self) -> list[str]:
        """The registered names, sorted (nothing is imported)."""
        return sorted(self._entry_points()[1])

    def get(self, name: str) -> K:
        """The descriptor registered as `name`."""
        key, found = self._entry_points()
        if name not in found:
            raise self.not_found(name, sorted(found))
        loaded = self._loaded.get((key, name))
        if loaded is None:
            loaded = found[name].load()
            if not isinstance(loaded, self.kind):
                raise TypeError(f"entry point {found[name].value!r} of {self.group!r} is a "
                                f"{type(loaded).__name__}, not a {self.kind.__module__}."
                                f"{self.kind.__name__}")
            self._loaded[(key, name)] = loaded
        return loaded
