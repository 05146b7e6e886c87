"""The Session stream's frames made by hand (``session_envelope``): byte for byte what protobuf writes, so a
client's parser, ours or another's, reads the same message either way."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.rpc.gate import write_varint
from groupcoord.coordinator.rpc.session_envelope import BODIES, frame, rebalance_started_frames, varint
from groupcoord.coordinator.rpc.session_outbox import batch_of
from groupcoord.v1 import groupcoord_pb2 as pb

EDGES = [0, 1, 127, 128, 300, 16_383, 16_384, 2_097_151, 2_097_152, 2**31 - 1, 2**35, 2**64 - 1]


@pytest.mark.parametrize("value", EDGES)
def test_a_varint_is_the_loop_written_one(value: int) -> None:
    assert varint(value) == write_varint(value)


@pytest.mark.parametrize("tag", [0, 1, 127, 128, 20_000, 3_000_000, 2**40])
def test_an_answers_frame_is_protobufs_serialisation(tag: int) -> None:
    answer = pb.JoinGroupResponse(member_id="m-1", generation=3, leader_id="m-1", protocol="rr",
                                  members=[pb.GroupMember(member_id=f"m-{i}") for i in range(2000)])
    body = BODIES[pb.SessionRequest.DESCRIPTOR.fields_by_name["join_group"].number]
    data = frame(tag, body.key, answer.SerializeToString())
    assert len(answer.SerializeToString()) > 16_384  # its length takes three bytes
    assert data == pb.SessionResponse(tag=tag, join_group=answer).SerializeToString()


@pytest.mark.parametrize(("group_id", "generation"), [
    ("g", 1), ("orders", 0), ("", 5), ("grüppe-ß", 128), ("g" * 300, 2**31 - 1), ("g", -1)])
def test_rebalance_news_made_by_hand_is_protobufs(group_id: str, generation: int) -> None:
    members = ["m-1", "", "ünï-" + "x" * 200, "m-2"]
    made = rebalance_started_frames(group_id, generation, members)
    expected = [pb.SessionResponse(news=pb.SessionNews(
        group_id=group_id, member_id=member_id,
        rebalance_started=pb.RebalanceStarted(generation=generation))).SerializeToString() for member_id in members]
    assert made == expected
    told = pb.SessionResponse.FromString(made[2]).news
    assert (told.group_id, told.member_id, told.WhichOneof("news")) == (group_id, members[2], "rebalance_started")


def test_a_batch_carries_each_frame_as_written() -> None:
    large = pb.HeartbeatResponse(error=pb.Error(message="x" * 20_000)).SerializeToString()
    frames = [rebalance_started_frames("g", 2, [f"m-{i}"])[0] for i in range(3)] + [frame(5, b"\x62", large)]
    batch = pb.SessionResponse.FromString(batch_of(frames))
    assert [one.SerializeToString() for one in batch.batch] == frames
    assert batch.batch[3].heartbeat.error.message == "x" * 20_000
