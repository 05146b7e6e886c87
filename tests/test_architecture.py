"""The house's import structure, checked on the real import graph (grimp; function-local imports count).

``lint-imports`` (configured in pyproject.toml) checks the layers; this test checks what a layers
contract cannot say: no import cycle anywhere, nothing imports the facade or the roof.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from itertools import pairwise

import grimp
import pytest

PACKAGES = ("groupcoord",)

KNOWN_CYCLES: AbstractSet[frozenset[str]] = frozenset()
"""Cycles owned by a change under way elsewhere; a listed cycle that is gone fails the test, so the list shrinks."""


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def strongly_connected(edges: Mapping[str, AbstractSet[str]]) -> Iterator[set[str]]:
    """Tarjan's algorithm, iterative: every set of modules that import each other round a cycle."""
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
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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
                    if len(component) > 1 or node in edges[node]:
                        yield component


def describe_cycle(graph: grimp.ImportGraph, component: set[str]) -> str:
    """The modules of ``component``, then one cycle through them as ``a -> b -> a`` with each import's line."""
    start = min(component)
    successor = min(m for m in graph.find_modules_directly_imported_by(start) if m in component)
    chain = [start, *(graph.find_shortest_chain(importer=successor, imported=start) or (successor, start))]
    steps = []
    for importer, imported in pairwise(chain):
        details = graph.get_import_details(importer=importer, imported=imported)
        line = f" (l.{details[0]['line_number']})" if details else ""
        steps.append(f"{importer} -> {imported}{line}")
    return f"{', '.join(sorted(component))}: " + "; ".join(steps)


def test_strongly_connected_finds_a_cycle_and_only_cycles() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert sorted(map(sorted, strongly_connected(edges))) == [["a", "b", "c"], ["e"]]


def test_no_import_cycle_between_modules(graph: grimp.ImportGraph) -> None:
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    cycles = [frozenset(c) for c in strongly_connected(edges)]
    new = [describe_cycle(graph, set(c)) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "import cycle(s):\n" + "\n".join(new)
    gone = KNOWN_CYCLES - set(cycles)
    assert not gone, f"no longer a cycle, remove from KNOWN_CYCLES: {sorted(map(sorted, gone))}"


def test_nothing_imports_the_roof(graph: grimp.ImportGraph) -> None:
    roof = {"groupcoord.cli"} | graph.find_descendants("groupcoord.cli")
    importers = {m for r in roof for m in graph.find_modules_that_directly_import(r)} - roof
    assert not importers, f"the CLI is the roof, imported only by tests: {sorted(importers)}"


def test_nothing_imports_the_facade(graph: grimp.ImportGraph) -> None:
    """Inside the project, import from the defining module: the facade sits on top and loads lazily."""
    assert not graph.find_modules_that_directly_import("groupcoord")
