"""The cycle collector held off while a large assignment is computed.

An assignor at 10,000 members x 100,000 tasks makes a few million short-lived objects (load
views, replicas, per-member lists), all freed by reference counting. CPython's collector counts
them anyway: with its default thresholds it runs thousands of young collections and several full
ones over the leader's whole heap during one ``assign``, a quarter to a third of its time
(``benchmarks/assignors_bench.py``, the 10k x 100k table). Held off for the call, it catches up on
its next natural turn afterwards, so nothing is leaked.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0  # assignments in progress in this process (several groups' leaders may share one)
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while the block runs (nests, and across threads: the collector comes
    back, if it was on, when the last such block ends)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
