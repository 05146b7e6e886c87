"""Copying many protobuf messages on a thread without starving the event loop.

One ``extend`` of 100,000 messages is a single C call that holds the GIL for tens of
milliseconds, so the event loop (another thread) waits that long. In slices, the interpreter
can hand the GIL over between them (every ``sys.getswitchinterval()``, 5 ms by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["extend_in_slices", "SLICE"]

SLICE = 2_048


def extend_in_slices(repeated: Any, items: Sequence[Any], size: int = SLICE) -> None:
    """``repeated.extend(items)``, a slice at a time (``repeated``: a protobuf repeated field)."""
    for start in range(0, len(items), size):
        repeated.extend(items[start:start + size])
