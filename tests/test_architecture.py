"""The house's import structure, checked on the real import graph (grimp; function-local imports count).

``lint-imports`` (configured in pyproject.toml) checks the layers; this test checks what a layers
contract cannot say: no import cycle anywhere, nothing imports the facade or the roof.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from itertools import pairwise
from pathlib import Path

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


# ---------------------------------------------------------------------- sizes

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
SIZE_ALLOWLIST: Mapping[str, str] = {
}
"""Product modules and functions over the limits, each with why it cannot be split now; an entry
that is back within the limits fails the test, so the list only shrinks."""


def _product_files() -> Iterator[tuple[str, Path]]:
    """Every hand-written product module, named by its path in the repository (generated stubs left out)."""
    spec = importlib.util.find_spec("groupcoord")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    paths = [Path(folder) / name for folder, _, names in os.walk(package, followlinks=True)  # the linked parts too
             for name in names if name.endswith(".py") and "_pb2" not in name]
    for path in sorted(paths):
        relative = path.relative_to(package).as_posix()
        first = relative.split("/", 1)[0]
        name = relative if (package / first).is_symlink() else f"groupcoord/{relative}"
        yield name, path


def oversized(files: Iterator[tuple[str, Path]]) -> dict[str, int]:
    """``{module: lines}`` over ``MAX_MODULE_LINES`` and ``{module:function: lines}`` over ``MAX_FUNCTION_LINES``."""
    found: dict[str, int] = {}
    for name, path in files:
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found[name] = lines
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found[f"{name}:{node.name}"] = length
    return found


def test_the_size_scan_finds_long_modules_and_functions(tmp_path: Path) -> None:
    long_function = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    (tmp_path / "long.py").write_text(long_function + "\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES))
    (tmp_path / "short.py").write_text("def g():\n    return 1\n")
    found = oversized(iter([("long.py", tmp_path / "long.py"), ("short.py", tmp_path / "short.py")]))
    assert found == {"long.py": MAX_MODULE_LINES + 1, "long.py:f": MAX_FUNCTION_LINES + 1}


def test_no_product_module_over_400_lines_nor_function_over_80() -> None:
    found = oversized(_product_files())
    new = {name: lines for name, lines in found.items() if name not in SIZE_ALLOWLIST}
    assert not new, f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function: split them: {new}"
    gone = set(SIZE_ALLOWLIST) - set(found)
    assert not gone, f"within the limits now, remove from SIZE_ALLOWLIST: {sorted(gone)}"
