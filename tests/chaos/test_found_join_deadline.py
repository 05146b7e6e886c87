"""Found by the chaos run (sqlite, seed 1, load average ~12): the coordinator's event loop ran 3.4 s
late while a rebalance was under way; a member whose heartbeats (which would have told it to
re-join) were waiting in line behind that backlog was removed at the join deadline "did not re-join
in time", its tasks handed over while it still ran them. Session expiry discounts the time the
coordinator lost (``coordinator.lag``); the join and sync deadlines of a rebalance do not.

Left to the coordinator's overload work (``coordinator/phases.py``: ``complete_join`` on the
join timer, ``on_sync_timeout``); strict xfail, so this test says when it is fixed.
"""

from __future__ import annotations

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.testing import Harness

G = "g"


@pytest.mark.xfail(strict=True, reason="join deadline does not discount the coordinator's lost time (see docstring)")
def test_a_member_is_not_removed_at_the_join_deadline_for_time_the_coordinator_lost() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    a, _ = h.join_new(G, session_timeout_ms=10_000, rebalance_timeout_ms=3_000)
    h.sync(G, a, 1, {a: []})
    h.join_new(G, session_timeout_ms=10_000, rebalance_timeout_ms=3_000)  # a newcomer: rebalance, 3 s to re-join
    assert h.state(G) == "PreparingRebalance"
    h.runtime.lag.note(2.5)  # the loop ran 2.5 s late: a's heartbeat (answer: re-join) waited in line
    h.advance(3.1)
    assert a in h.group(G).members, "a was removed for time the coordinator lost"
