"""A consumer-protocol member's session is extended by the time the coordinator lost only while it
was a member here (as a classic member's): a group put back from its record (a failed store write,
a restart, a failover) or converted from a classic group must not carry all the time the process
ever lost.

Found by the chaos suite's consumer mode (SQLite, disk full, load ~50): a member's leave failed to be
written, the group went back to its stored state with that member in it, and the member was expired
29 s later (its 3 s session plus the coordinator's 26 s of accumulated lateness): its tasks ran
nowhere all that time.
"""

from __future__ import annotations

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.consumer_records import record_of
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import SESSION_MS, Fleet, G
from tests.coordinator.model.test_conversion import Mixed

SESSION_S = SESSION_MS / 1000
LOST_LONG_AGO_S = 20.0  # what the coordinator lost before (a loaded machine), not while these members waited


def test_a_member_of_a_group_put_back_from_its_record_expires_after_its_session() -> None:
    h = Harness(CoordinatorConfig())
    assert h.put_tasks(G, "t0", "t1") == pb.NONE
    fleet = Fleet(h, ["a", "b"])
    fleet.join("a")
    fleet.join("b")
    fleet.settle()
    h.runtime.lag.note(LOST_LONG_AGO_S)
    fleet.beat("a")
    fleet.beat("b")
    record = record_of(h.group(G), h.model.consumer.groups[G])  # the group as last stored, whole
    h.runtime.carry_out(h.model.roll_back(G, record))  # a write failed: back to it, sessions afresh
    member_b = fleet.members["b"].member_id
    fleet.members["b"].stop()  # its process left, but the leave was never stored
    h.advance(SESSION_S / 2)
    fleet.beat("a")  # a goes on; b is heard no more
    h.advance(SESSION_S / 2 + 0.1)
    group = h.model.consumer.groups[G]
    assert member_b not in group.members, "b's session ended a session after the roll-back"
    fleet.settle()
    assert fleet.running() == {"a": group.target_of(fleet.members["a"].member_id)}
    assert len(fleet.running()["a"]) == 2


def test_a_classic_member_silent_since_the_conversion_expires_after_its_session() -> None:
    mx = Mixed("ab", "c")
    mx.form_classic()
    mx.h.runtime.lag.note(LOST_LONG_AGO_S)
    mx.classic.step("a")
    mx.classic.step("b")
    assert mx.consumer.join("c").error.code == pb.NONE  # converts; b will never be heard again
    silent = mx.classic.members["b"].member_id
    group = mx.h.model.consumer.groups[G]
    for _ in range(int(SESSION_S / 0.3) + 2):
        mx.h.advance(0.3)
        mx.classic.step("a")
        mx.consumer.beat("c")
    assert silent not in group.members, "b's session ended a session after the conversion"
