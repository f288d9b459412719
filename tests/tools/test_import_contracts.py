"""The no-circles contract (tools/import_contracts.py) on made-up import graphs."""

from __future__ import annotations

import grimp

from tools.import_contracts import NoCirclesContract, strongly_connected


def graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    g = grimp.ImportGraph()
    for line, (importer, imported) in enumerate(imports, 1):
        for module in (importer, imported):
            if module not in g.modules:
                g.add_module(module)
        g.add_import(importer=importer, imported=imported, line_number=line,
                     line_contents=f"import {imported}")
    return g


def check(g: grimp.ImportGraph):
    contract = NoCirclesContract(name="no circles", session_options={},
                                 contract_options={"packages": ["pkg"]})
    return contract.check(g, verbose=False)


def test_strongly_connected_finds_each_circle_once():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": set()}
    found = sorted(sorted(c) for c in strongly_connected(edges))
    assert found == [["a", "b", "c"], ["d", "e"], ["f"]]


def test_a_circle_is_reported_with_its_import_lines():
    result = check(graph(("pkg.engine.trainer", "pkg.engine.checkpointing"),
                         ("pkg.engine.checkpointing", "pkg.engine.trainer"),
                         ("pkg.engine.trainer", "pkg.spec")))
    assert not result.kept
    [circle] = result.metadata["circles"]
    assert circle["modules"] == ["pkg.engine.checkpointing", "pkg.engine.trainer"]
    assert [(t["importer"], t["imported"], t["lines"]) for t in circle["ties"]] == [
        ("pkg.engine.checkpointing", "pkg.engine.trainer", [(2, "import pkg.engine.trainer")]),
        ("pkg.engine.trainer", "pkg.engine.checkpointing", [(1, "import pkg.engine.checkpointing")]),
    ]


def test_a_package_importing_its_own_children_is_no_circle():
    # pkg/__init__ re-exports pkg.errors, which takes a name from pkg: no tie between concerns.
    result = check(graph(("pkg", "pkg.errors"), ("pkg.errors", "pkg"), ("other", "pkg")))
    assert result.kept, result.metadata
