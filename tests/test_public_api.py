"""The public facade: ``from groupcoord import ...`` gives exactly the documented names, loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import groupcoord

DOCUMENTED = [
    # the worker clients
    "WorkerClient", "AsyncWorkerClient", "WorkerConfig", "WorkerState", "TaskListener", "WorkerClosedError",
    # the assignor contract
    "Assignor", "AssignmentContext", "Assignment", "AssignorError", "TaskReplica", "TaskSpec", "MemberInfo",
    "LoadSnapshot", "register",
    # administration
    "AdminClient",
    # errors, by wire code
    "errors", "__version__",
]


def test_all_is_exactly_the_documented_list() -> None:
    assert groupcoord.__all__ == DOCUMENTED


def test_every_name_resolves_to_its_home() -> None:
    from groupcoord import admin, assignors, errors, worker

    homes = {"groupcoord.worker": worker, "groupcoord.assignors": assignors, "groupcoord.admin": admin}
    for name in DOCUMENTED:
        value = getattr(groupcoord, name)
        assert value is not None, name
        if name in groupcoord._HOMES:
            assert value is getattr(homes[groupcoord._HOMES[name]], name), name
    assert groupcoord.errors is errors
    assert groupcoord.__version__ == "0.1.0"
    from groupcoord import AdminClient, TaskReplica, WorkerClient  # the README's form

    assert (WorkerClient, TaskReplica, AdminClient) == (worker.WorkerClient, assignors.TaskReplica, admin.AdminClient)


def test_dir_lists_every_name() -> None:
    assert set(DOCUMENTED) <= set(dir(groupcoord))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        groupcoord.NoSuchThing  # noqa: B018


def _packages_after(statement: str, env: dict[str, str]) -> set[str]:
    """Top-level packages, and groupcoord's own subpackages as ``groupcoord.x``, in sys.modules after ``statement``."""
    script = (f"import sys\n{statement}\n"
              "print(' '.join(sorted({'.'.join(m.split('.')[:2]) if m.startswith('groupcoord.') else m.partition('.')[0]"
              " for m in sys.modules})))")
    result = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, env=env,
                            timeout=60)
    return set(result.stdout.split())


@pytest.mark.parametrize("statement", ["import groupcoord.errors", "import groupcoord.v1.groupcoord_pb2",
                                       "import groupcoord"])
def test_importing_the_ground_floor_loads_neither_worker_nor_coordinator(statement: str,
                                                                          cli_env: dict[str, str]) -> None:
    loaded = _packages_after(statement, cli_env)
    assert "groupcoord" in loaded
    assert not loaded & {"groupcoord.worker", "groupcoord.coordinator", "groupcoord.assignors", "groupcoord.loadstats",
                         "pyspark", "pyarrow"}


def test_a_facade_name_loads_only_its_own_package(cli_env: dict[str, str]) -> None:
    loaded = _packages_after("from groupcoord import WorkerClient", cli_env)
    assert "groupcoord.worker" in loaded and "groupcoord.coordinator" not in loaded
    assert not loaded & {"worker", "coordinator", "assignors", "loadstats"}, "one top-level import name"
