"""The garbage collector's pace for a process that holds large groups.

A coordinator keeps a large, long-lived heap (a group of 10,000 members over 100,000 tasks is
millions of objects) and a rebalance allocates hundreds of thousands of short-lived ones (the
leader's JoinGroup answer, its SyncGroup, the record). With CPython's default thresholds (700
allocations per young collection, an old-generation collection every 100 young ones) a single
rebalance of such a group triggers thousands of collections and a dozen full ones, each walking
the whole heap: about 1 s of CPU at 10,000 members (``benchmarks/coordinator_bench.py``, model
share), more than the rebalance's own work. Reference counting frees almost everything the
coordinator makes; the cycle collector is only a backstop, so it can run far less often.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "pace_collector"]

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
