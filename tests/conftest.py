"""Shared fixtures: a coordinator model on a fake clock, and a real gRPC server on loopback."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.testing import Harness

logging.getLogger("transitions").setLevel(logging.WARNING)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first (a stable sort keeps the rest in order): under pytest-xdist the long ones then
    start at once on separate workers instead of one of them starting last and setting the wall time."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
    """Environment for running ``python -m groupcoord.cli`` in a subprocess from the repo root."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
