"""import-linter contract types of our own (pyproject.toml, [tool.importlinter]).

docs/architecture.md: the API process starts without importing torch; the workers import it
inside the functions that run in the Ray actors. import-linter (grimp) counts an
import inside a function body like one at the top of the module, so its
`forbidden` contract would report every chain through such a deferred import.
`forbidden_at_import` is that contract over the imports that run when a module is
imported: an import in a function body (a `def`, `async def` or `lambda`) is left
out of the graph it checks; one at module level, in a class body or under a
module-level `if`/`try` stays in.

`no_circles` is the other way round: every import counts, those in function
bodies too (a deferred import hides a circle from Python's import machinery,
not from a reader), and no module of `packages` may reach itself through the
others (`NoCirclesContract`).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

from grimp import ImportGraph
from importlinter.application import output
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from rich.markup import escape

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


def strongly_connected(edges: Mapping[str, set[str]]) -> Iterator[set[str]]:
    """The strongly connected components of a directed graph (Tarjan's, without
    recursion): each set of nodes that all reach one another."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                yield component


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


class NoCirclesContract(Contract):
    """No import circle among the modules of `packages`, module by module, with
    every import counted (inside function bodies too).

    A package's `__init__` importing its own descendants (what it re-exports)
    is left out: a circle that only that edge closes (a child importing a name
    from its package) is how a package exports its children, not a tie between
    two concerns. Any other circle is reported: its modules, and the import
    lines that tie each to the next."""

    type_name = "no_circles"

    packages = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        roots = [module.name for module in cast(list, self.packages)]
        ours = {m for m in graph.modules if any(_within(m, root) for root in roots)
                and not graph.is_module_squashed(m)}
        edges = {m: {imported for imported in graph.find_modules_directly_imported_by(m)
                     if imported in ours and not _within(imported, m)} for m in ours}
        circles = []
        for component in strongly_connected(edges):
            if len(component) < 2:
                continue
            ties = []
            for importer in sorted(component):
                for imported in sorted(edges[importer] & component):
                    details = graph.get_import_details(importer=importer, imported=imported)
                    ties.append({"importer": importer, "imported": imported,
                                 "lines": [(d["line_number"], d["line_contents"]) for d in details]})
            circles.append({"modules": sorted(component), "ties": ties})
        return ContractCheck(kept=not circles, metadata={"circles": circles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        circles = cast(list[dict[str, Any]], check.metadata["circles"])
        for n, circle in enumerate(circles, 1):
            output.print_error(f"Circle {n}: {', '.join(circle['modules'])}")
            for tie in circle["ties"]:
                output.indent_cursor()
                output.print(f"{tie['importer']} -> {tie['imported']}:")
                for line_number, contents in tie["lines"]:
                    output.indent_cursor()
                    output.indent_cursor()
                    output.print(escape(f"l.{line_number}: {contents}"))
            output.new_line()
