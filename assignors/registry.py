"""Find assignors by name: built-ins, ``register()`` calls, and entry points.

Third parties publish assignors under the entry point group
``groupcoord.assignors`` (``name = "package.module:AssignorClass"``); the
object found is instantiated with no arguments if it is a class. A group picks
the assignor among those every member supports (see the coordinator), so every
member must be able to resolve the names it advertises.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from importlib.metadata import entry_points

from groupcoord.assignors.base import Assignor

__all__ = ["ENTRY_POINT_GROUP", "UnknownAssignorError", "available_assignors", "get_assignor", "register"]

ENTRY_POINT_GROUP = "groupcoord.assignors"
log = logging.getLogger(__name__)

# name -> "module:attribute", imported on first use so heavy assignors cost nothing until chosen.
_BUILTINS: dict[str, str] = {
    "round-robin": "groupcoord.assignors.round_robin:RoundRobinAssignor",
    "sticky": "groupcoord.assignors.sticky:StickyAssignor",
    "kafka-replica-shift": "groupcoord.assignors.kafka_replica:KafkaReplicaShiftAssignor",
    "balanced": "groupcoord.assignors.balanced:BalancedAssignor",
    "pulsar-threshold": "groupcoord.assignors.pulsar.assignors:PulsarThresholdAssignor",
    "pulsar-uniform": "groupcoord.assignors.pulsar.assignors:PulsarUniformAssignor",
    "pulsar-avg": "groupcoord.assignors.pulsar.assignors:PulsarAvgAssignor",
    "pulsar-overload": "groupcoord.assignors.pulsar.assignors:PulsarOverloadAssignor",
    "pulsar-transfer": "groupcoord.assignors.pulsar.assignors:PulsarTransferAssignor",
}

_registered: dict[str, Assignor] = {}
_lock = threading.Lock()


class UnknownAssignorError(LookupError):
    """No assignor is known under this name."""


def register(assignor: Assignor, *, replace: bool = False) -> None:
    """Make ``assignor`` available under ``assignor.name`` in this process."""
    if not isinstance(assignor, Assignor):
        raise TypeError(f"{assignor!r} is not an assignor: it needs a 'name' and an 'assign(context)' method")
    with _lock:
        if assignor.name in _registered and not replace:
            raise ValueError(f"an assignor named {assignor.name!r} is already registered")
        _registered[assignor.name] = assignor


def _load(target: str) -> object:
    """The object ``"module:attribute"`` names, instantiated if it is a class (checked by the caller)."""
    module_name, _, attribute = target.partition(":")
    obj = getattr(importlib.import_module(module_name), attribute)
    return obj() if isinstance(obj, type) else obj


ENTRY_POINTS_TTL_S = 10.0
"""How long a scan of the installed entry points is reused: one scan costs ~30 ms of CPU (every
installed distribution's metadata), and a coordinator checks the name each request gives; a package
installed while it runs is found within this time."""
_scanned: tuple[float, dict[str, str]] | None = None


def _entry_point_targets() -> dict[str, str]:
    global _scanned
    now = time.monotonic()
    scanned = _scanned
    if scanned is None or now - scanned[0] >= ENTRY_POINTS_TTL_S:
        scanned = _scanned = (now, {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)})
    return scanned[1]


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name``; raises UnknownAssignorError if none is."""
    with _lock:
        found = _registered.get(name)
    if found is not None:
        return found
    target = _BUILTINS.get(name) or _entry_point_targets().get(name)
    if target is None:
        raise UnknownAssignorError(f"no assignor named {name!r}; known: {', '.join(available_assignors())}")
    assignor = _load(target)
    if not isinstance(assignor, Assignor):
        raise UnknownAssignorError(f"{target} (assignor {name!r}) has no 'name' and 'assign(context)'")
    with _lock:
        return _registered.setdefault(name, assignor)


def available_assignors() -> list[str]:
    """Every name ``get_assignor`` may resolve, sorted."""
    with _lock:
        names = set(_registered)
    return sorted(names | set(_BUILTINS) | set(_entry_point_targets()))
