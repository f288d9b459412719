"""import-linter contract types of our own (pyproject.toml, [tool.importlinter]).

docs/architecture.md: the API process starts without importing torch; the workers import it
inside the functions that run in the Ray actors. import-linter (grimp) counts an
import inside a function body like one at the top of the module, so its
`forbidden` contract would report every chain through such a deferred import.
`forbidden_at_import` is that contract over the imports that run when a module is
imported: an import in a function body (a `def`, `async def` or `lambda`) is left
out of the graph it checks; one at module level, in a class body or under a
module-level `if`/`try` stays in.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

from grimp import ImportGraph
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.domain.contract import ContractCheck

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@cache
def _source_of(module: str) -> Path | None:
    """The file of one of our modules, found without importing any package."""
    root, *rest = module.split(".")
    spec = importlib.util.find_spec(root)  # a top-level name: nothing is executed
    if spec is None or not spec.submodule_search_locations:
        return Path(spec.origin) if spec and spec.origin and not rest else None
    base = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def deferred_import_lines(module: str) -> frozenset[int]:
    """Lines of the import statements in `module` that run only when a function is called."""
    path = _source_of(module)
    if path is None:
        return frozenset()
    lines: set[int] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        if in_function and isinstance(node, ast.Import | ast.ImportFrom):
            lines.add(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(node, _FUNCTIONS))

    visit(ast.parse(path.read_text(), filename=str(path)), False)
    return frozenset(lines)


def drop_deferred_imports(graph: ImportGraph) -> None:
    """Remove from `graph` each dependency whose every import is inside a function body."""
    for importer in list(graph.modules):
        if graph.is_module_squashed(importer):  # an external package: not ours to read
            continue
        deferred = deferred_import_lines(importer)
        if not deferred:
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            details = graph.get_import_details(importer=importer, imported=imported)
            if details and all(d["line_number"] in deferred for d in details):
                graph.remove_import(importer=importer, imported=imported)


class ForbiddenAtImportContract(ForbiddenContract):
    """`forbidden`, over the imports that run when the source modules are imported."""

    type_name = "forbidden_at_import"

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        drop_deferred_imports(graph)  # import-linter hands each contract its own copy
        return super().check(graph, verbose)
