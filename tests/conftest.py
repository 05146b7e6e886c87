"""Shared fixtures: a coordinator model on a fake clock, and a real gRPC server on loopback."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The suite runs against the installed package (`groupcoord.*`), never the tree's top-level folders under
# bare names (`coordinator`, `worker`, ...: a second copy of every module). pytest adds no path of its own
# (`--import-mode=importlib` in pyproject.toml: `tests` is imported as a package from its files), but
# `python -m pytest` puts the working directory first: taken off here, before any test module is imported.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != ROOT]

from groupcoord.coordinator.config import CoordinatorConfig
from tests import paths

# the path every test module is imported with (a benchmark script a test loads may put the root back for its
# own imports later: tests/test_installed_package.py checks this one, whatever ran before it on its worker)
paths.PATH_AT_START = tuple(sys.path)
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.testing import Harness

logging.getLogger("transitions").setLevel(logging.WARNING)


def _start_rank(item: pytest.Item) -> int:
    """Spark tests (the longest: a minute or more each, and a session to start) first, then the other
    slow ones, then the rest."""
    if item.get_closest_marker("spark") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first, each worker's share starting with its part of them.

    pytest-xdist's worksteal hands each of its N workers one contiguous slice of this list, and a
    worker steals only once its own slice runs dry. So the list is sorted longest first (a stable
    sort keeps the rest in order), then dealt out like cards into N runs: every slice starts with
    its share of the long tests, which then run at once on separate workers (measured: sorted but
    not dealt, the eight Spark tests all landed on one worker and set a 244 s wall time)."""
    items.sort(key=_start_rank)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        items[:] = [item for hand in range(workers) for item in items[hand::workers]]


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def server() -> Iterator[ServerThread]:
    """A real coordinator on a free loopback port, real clock, short timeouts for tests."""
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    # every persisted change (each state transition) re-checks the group's invariants
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as running:
        yield running


@pytest.fixture(scope="session")
def cli_env() -> dict[str, str]:
    """Environment for running ``python -m groupcoord.cli`` in a subprocess: the installed package, as the
    suite itself runs (no path of the tree added)."""
    return dict(os.environ)
