"""Settings of the coordinator process (``groupcoord serve``) that a library embedded elsewhere
must not impose: ``tune_process()`` applies both.

**The GIL handed over every millisecond** (Python's default: 5 ms). Heavy requests are checked and
large answers filled in on checker threads (``coordinator.model.prechecks``); meanwhile the event loop
needs the GIL several times per heartbeat it answers. At 5 ms it waited that long each time: a
heartbeat of another group took 8-12 ms (p50) while a maximal request was handled, 2-4 ms at 1 ms
(``benchmarks/stall_bench.py``, idle machine).

**Fewer glibc malloc arenas**, so the process's memory stops creeping up. glibc gives each thread that contends for the allocator an arena of its own (up to eight per
core). The coordinator's checker and store-writer threads allocate and free large transient
objects (a 100,000-task catalog, a 16 MiB load snapshot); memory freed in one thread's arena is
not reused by another, so RSS grew by a few percent per round of maximal requests without
anything being kept (``tests/coordinator/rpc/test_memory_bounds.py``: 296 -> 394 MiB over nine rounds; with two
arenas it stays flat). Two arenas is the setting Python and Ruby servers commonly run with
(``MALLOC_ARENA_MAX=2``). An explicit ``MALLOC_ARENA_MAX`` in the environment wins; elsewhere
than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

__all__ = ["SWITCH_INTERVAL_S", "limit_malloc_arenas", "tune_process"]

log = logging.getLogger("groupcoord.serve")
_M_ARENA_MAX = -8  # from glibc's malloc.h
SWITCH_INTERVAL_S = 0.001


def tune_process() -> None:
    """Both settings; call at the start of the process, before it starts threads."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    limit_malloc_arenas()


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Call before the process starts its threads; True if glibc took the setting."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(_M_ARENA_MAX, arenas))
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        log.debug("mallopt(M_ARENA_MAX) not available here")
        return False
