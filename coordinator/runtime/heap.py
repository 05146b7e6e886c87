"""The garbage collector's pace for a process that holds large groups.

A coordinator keeps a large, long-lived heap (a group of 10,000 members over 100,000 tasks is
millions of objects) and a rebalance allocates hundreds of thousands of short-lived ones (the
leader's JoinGroup answer, its SyncGroup, the record). With CPython's default thresholds (700
allocations per young collection, an old-generation collection every 100 young ones) a single
rebalance of such a group triggers thousands of collections and a dozen full ones, each walking
the whole heap: about 1 s of CPU at 10,000 members (``benchmarks/coordinator_bench.py``, model
share), more than the rebalance's own work. Reference counting frees almost everything the
coordinator makes; the cycle collector is only a backstop, so it can run far less often.

Bursts are held off entirely (``in_bulk``): a phase's completion, a leader's assignment accepted,
a group record finished, a heavy request checked. Each makes hundreds of thousands of objects in
one go at 10,000 members, most of them kept (the assignment, the record): collecting while they
are made only walks them again and again as they age through the generations, a third of the
leader's SyncGroup (0.3 s of 1.0 at 10,000 members). The collector catches up once the burst ends.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

from groupcoord.assignors.collector import collector_paused

__all__ = ["BULK_EFFECTS", "YOUNG_THRESHOLD", "bulk_job", "in_bulk", "pace_collector"]

T = TypeVar("T")

# one step's effects from which carrying them out counts as a burst (a phase's completion in a
# group of a thousand members); a heartbeat has two
BULK_EFFECTS = 1_000

in_bulk = collector_paused
"""The collector held off for a burst (nests, and across threads)."""


def bulk_job(job: Callable[[], T]) -> Callable[[], T]:
    """``job`` run as a burst (a store write, a heavy check: off the loop, on their threads)."""
    def run() -> T:
        with collector_paused():
            return job()

    return run

# allocations (net) between young collections. 10,000 keeps most of the gain at 10,000 members (model share
# 1.66 s against 1.57 s at 50,000 and 2.16 s at CPython's 700, same run, load 0.9); 50,000 let cyclic garbage
# wait so long for an old-generation pass that a steady 400-member soak's RSS rose 6.3% in 40 s (1.7% at 10,000)
YOUNG_THRESHOLD = 10_000


def pace_collector() -> tuple[int, int, int]:
    """Collect cycles less often (process-wide; idempotent): the young generation every
    ``YOUNG_THRESHOLD`` allocations, the older ones at CPython's default ratios. Returns the
    thresholds in force before."""
    before = gc.get_threshold()
    if before[0] < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    return before
