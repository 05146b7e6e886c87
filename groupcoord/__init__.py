"""groupcoord: keep groups of workers agreed on who runs which task.

The public API, in one place::

    from groupcoord import WorkerClient, WorkerConfig, TaskReplica, AdminClient, errors
    from groupcoord import AsyncWorkerClient  # the same member, for asyncio services

Names are loaded on first use (PEP 562), so ``import groupcoord.errors`` or
``import groupcoord.v1`` stays cheap and never loads the worker or the
coordinator. The packages behind them: ``worker`` (the embeddable client),
``assignors`` (who gets what), ``groupcoord.admin`` (the admin client),
``groupcoord.errors`` (every error, by wire code); the coordinator runs as
``groupcoord serve``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    # the worker clients
    "WorkerClient",
    "AsyncWorkerClient",
    "WorkerConfig",
    "WorkerState",
    "TaskListener",
    "WorkerClosedError",
    # the assignor contract
    "Assignor",
    "AssignmentContext",
    "Assignment",
    "AssignorError",
    "TaskReplica",
    "TaskSpec",
    "MemberInfo",
    "LoadSnapshot",
    "register",
    # administration
    "AdminClient",
    # errors, by wire code
    "errors",
    "__version__",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads each on first use
    from groupcoord import errors
    from groupcoord.admin import AdminClient
    from groupcoord.assignors import (
        Assignment,
        AssignmentContext,
        Assignor,
        AssignorError,
        LoadSnapshot,
        MemberInfo,
        TaskReplica,
        TaskSpec,
        register,
    )
    from groupcoord.worker import (
        AsyncWorkerClient,
        TaskListener,
        WorkerClient,
        WorkerClosedError,
        WorkerConfig,
        WorkerState,
    )

_HOMES: dict[str, str] = {
    **dict.fromkeys(("WorkerClient", "AsyncWorkerClient", "WorkerConfig", "WorkerState", "TaskListener",
                     "WorkerClosedError"), "groupcoord.worker"),
    **dict.fromkeys(
        ("Assignor", "AssignmentContext", "Assignment", "AssignorError", "TaskReplica", "TaskSpec", "MemberInfo",
         "LoadSnapshot", "register"),
        "groupcoord.assignors",
    ),
    "AdminClient": "groupcoord.admin",
}
"""Each exported name -> the module that defines it publicly."""


def __getattr__(name: str) -> Any:
    if name == "errors":
        return importlib.import_module("groupcoord.errors")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'groupcoord' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
