"""Where things are, for tests at any depth of the tree."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root (its ``pyproject.toml``, ``benchmarks/``, ``coordinator/``, ...)."""

PATH_AT_START: tuple[str, ...] = ()
"""``sys.path`` as tests/conftest.py left it, before any test module was imported."""
