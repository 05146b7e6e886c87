"""The tree's scripts (``benchmarks/``, ``docs/``) as tests use them: loaded from their files, since
those folders are not packages of the installed tree, and run with bad arguments, which must be
refused the way the command line refuses them (exit 2, one readable line, no traceback)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.paths import ROOT


def load_script(path: Path, name: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> Any:
    """The module of the script at ``path`` (named ``name``, its file's stem by default). With ``monkeypatch``
    it is also in ``sys.modules`` for the test, where a script's dataclasses look their module up."""
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def refused(script: Path, args: Sequence[str], env: Mapping[str, str]) -> str:
    """Run ``script`` with bad ``args``: it exits 2 with no traceback. Its standard error, for the test's
    own checks of the message."""
    done = subprocess.run([sys.executable, str(script), *args], check=False, cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=dict(env))
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr
