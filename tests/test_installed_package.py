"""One copy of each module: the tree's top-level folders are parts of ``groupcoord`` (linked into
``groupcoord/``), importable only as ``groupcoord.coordinator``, ``groupcoord.worker``, ...

``import coordinator`` would load a second copy of every module (two ``GroupState`` enums that never
compare equal, two registries of assignors): it fails from the venv, the suite does not put the
repository's root on ``sys.path`` (tests/conftest.py, ``--import-mode=importlib``), and no Python file of
the repository imports a part by its bare name.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import groupcoord.coordinator
from tests import paths
from tests.paths import ROOT

PARTS = ("coordinator", "worker", "assignors", "loadstats")
"""The folders at the root that ``groupcoord/`` links in."""

SKIPPED = {".venv", "site", "build", ".git", "node_modules"}


def test_the_parts_are_linked_into_the_package() -> None:
    for part in PARTS:
        link = ROOT / "groupcoord" / part
        assert link.is_symlink() and link.resolve() == ROOT / part, f"groupcoord/{part} is not a link to {part}/"
    assert Path(groupcoord.coordinator.__file__).parent == ROOT / "groupcoord" / "coordinator"


@pytest.mark.parametrize("part", PARTS)
def test_a_bare_import_of_a_part_fails_from_the_venv(tmp_path: Path, part: str) -> None:
    """A fresh interpreter of the venv, from a directory outside the tree: ``groupcoord.<part>`` imports,
    ``<part>`` does not."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", f"import groupcoord.{part}\nimport {part}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"ModuleNotFoundError: No module named '{part}'", done.stderr


def test_the_suite_does_not_see_the_tree_under_bare_names() -> None:
    assert paths.PATH_AT_START, "tests/conftest.py did not record the path"
    on_path = [entry for entry in paths.PATH_AT_START if Path(entry or ".").resolve() == ROOT]
    assert on_path == [], f"the repository's root is on sys.path: {on_path}"
    assert [part for part in PARTS if importlib.machinery.PathFinder.find_spec(part, list(paths.PATH_AT_START))] == []
    twice = sorted(name for name in sys.modules if name.split(".")[0] in PARTS)
    assert twice == [], f"modules loaded a second time under bare names: {twice}"


def _bare_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names
                  if name.split(".")[0] in PARTS]
    return found


def test_no_file_of_the_repository_imports_a_part_by_its_bare_name() -> None:
    linked = {("groupcoord", part) for part in PARTS}  # the same files as the folders at the root: read once
    files = [path for path in ROOT.rglob("*.py")
             if not SKIPPED & set(path.relative_to(ROOT).parts) and path.relative_to(ROOT).parts[:2] not in linked]
    assert len(files) > 100  # the parts' own modules, tests, benchmarks, examples, docs scripts
    offenders = [line for path in files for line in _bare_imports(path)]
    assert offenders == [], offenders
