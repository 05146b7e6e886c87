"""The order of a join phase's answers on a real server: the leader's (the only one built off the loop, with
every member and the catalog) goes out first, so its SyncGroup is not read behind its followers' (issue 35:
one member joining 10,000)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.rpc.session_client import RawSession
from tests.coordinator.rpc.test_session_batch import READS_BATCHES, held
from tests.coordinator.rpc.test_session_stream import Coordinator, join_request, serving

MEMBERS = 30


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    """Joins wait 3 s on the clock for more members: the test forms its group in one go."""
    with serving(initial_rebalance_delay_ms=3_000) as coordinator:
        yield coordinator


def _joined(coordinator: Coordinator, session: RawSession, group_id: str) -> tuple[list[int], list[pb.JoinGroupResponse]]:
    """``MEMBERS`` members joined in one phase over ``session``: their join tags and answers."""
    firsts = [session.ask("join_group", join_request(group_id)) for _ in range(MEMBERS)]
    tags = [session.send("join_group", join_request(group_id, first.member_id)) for first in firsts]
    held(coordinator, MEMBERS)
    coordinator.advance(3.5)  # the initial delay, and once more for the members that came during it
    coordinator.advance(3.5)
    return tags, [session.answer(tag) for tag in tags]


def test_the_leaders_join_answer_goes_out_before_its_followers(coordinator: Coordinator) -> None:
    coordinator.catalog("g")
    session = coordinator.session()  # no batches: each answer is a message of its own, in the order written
    try:
        tags, answers = _joined(coordinator, session, "g")
        assert {a.generation for a in answers} == {1}
        leader = next(tag for tag, a in zip(tags, answers, strict=True) if a.leader_id == a.member_id)
        phase = [tag for _, tag in session.arrived if tag in set(tags)]
        assert phase[0] == leader, f"the leader's answer came {phase.index(leader) + 1} of {MEMBERS}"
        assert len(next(a for a in answers if a.leader_id == a.member_id).members) == MEMBERS
        assert phase[1:] == sorted(phase[1:])  # the followers in the order they joined, as before
    finally:
        session.close()


def test_the_leaders_join_answer_is_written_before_its_followers_are_made(coordinator: Coordinator) -> None:
    """To a client that reads batches, the leader's answer goes in a message of its own: the writer sends it
    before the followers' answers are made (else they all wait together, 10,000 of them, and it goes with them)."""
    coordinator.catalog("g")
    session = RawSession(coordinator.channel, READS_BATCHES)
    try:
        tags, answers = _joined(coordinator, session, "g")
        leader = next(tag for tag, a in zip(tags, answers, strict=True) if a.leader_id == a.member_id)
        message = {tag: n for n, tag in session.arrived}
        alongside = [tag for tag in tags if message[tag] == message[leader] and tag != leader]
        assert alongside == [], f"the leader's answer went with {len(alongside)} of its followers'"
        assert all(message[tag] > message[leader] for tag in tags if tag != leader)
    finally:
        session.close()
