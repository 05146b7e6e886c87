"""A re-join's metadata: an unchanged description keeps the member's message (nothing recounted, its
record form reused); a changed one is recounted and recorded anew (issue 35)."""

from __future__ import annotations

from groupcoord.coordinator.model.records import finish_record, group_from_record, group_to_record
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"


def stable_pair(h: Harness) -> tuple[str, str]:
    """Two members, synced: (leader, follower)."""
    a, _ = h.join_new(G, metadata=pb.MemberMetadata(rack="r1"))  # generation 1 at once (no initial delay)
    b, _ = h.join_new(G, metadata=pb.MemberMetadata(rack="r1"))
    h.join(G, a, metadata=pb.MemberMetadata(rack="r1"))  # a re-joins: generation 2, both
    generation = h.group(G).generation
    leader = h.group(G).leader_id
    follower = b if leader == a else a
    h.sync(G, leader, generation, {a: [], b: []})
    h.sync(G, follower, generation)
    assert h.state(G) == "Stable"
    return leader, follower


def test_an_unchanged_description_keeps_the_members_message_and_its_count() -> None:
    h = Harness()
    leader, follower = stable_pair(h)
    member = h.group(G).members[follower]
    kept, total, record = member.metadata, h.group(G).metadata_bytes, member.record_metadata()
    h.join(G, leader, metadata=pb.MemberMetadata(rack="r1"))  # the leader's re-join starts a rebalance
    h.join(G, follower, metadata=pb.MemberMetadata(rack="r1"))
    assert member.metadata is kept and h.group(G).metadata_bytes == total
    assert member.record_metadata() is record


def test_a_changed_description_is_counted_and_recorded_anew() -> None:
    h = Harness()
    leader, follower = stable_pair(h)
    member = h.group(G).members[follower]
    total, old_record = h.group(G).metadata_bytes, member.record_metadata()
    bigger = pb.MemberMetadata(rack="r1", pool="gpu", user_data=b"x" * 100)
    h.join(G, leader, metadata=pb.MemberMetadata(rack="r1"))
    h.join(G, follower, metadata=bigger)
    assert member.metadata == bigger and h.group(G).metadata_bytes == total + bigger.ByteSize() - 4
    assert member.record_metadata() != old_record
    restored = group_from_record(finish_record(group_to_record(h.group(G))))
    assert restored.members[follower].metadata == bigger
    assert restored.members[leader].metadata == pb.MemberMetadata(rack="r1")
