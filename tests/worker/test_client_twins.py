"""The pieces both clients' transports drive, without I/O: ``Outflow`` (a stream's outbox as the messages
that carry it) and ``LeaveRound`` (a best-effort leave: the stream, unary when the stream cannot carry it,
never an exception)."""

from __future__ import annotations

import logging
import queue

import grpc
import pytest

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.call_outcomes import LeaveRound
from groupcoord.worker.stream_tags import BATCH_MAX, Outflow, StreamBroken, StreamUnsupported


def beat(tag: int) -> pb.SessionRequest:
    return pb.SessionRequest(tag=tag, heartbeat=pb.HeartbeatRequest(group_id="g"))


def drain(items: list[pb.SessionRequest | None], batches: bool) -> list[list[int]]:
    """The tags of each message, as the threaded driver sends them (its outbox filled at once)."""
    outbox: queue.SimpleQueue[pb.SessionRequest | None] = queue.SimpleQueue()
    for item in items:
        outbox.put(item)
    flow, sent = Outflow(), []
    while not flow.ended:
        message = flow.next(outbox.get() if flow.waits else None, outbox, batches)
        if message is not None:
            sent.append([r.tag for r in message.batch] or [message.tag])
    return sent


def test_what_waits_together_goes_as_one_message_in_order_and_the_end_ends_it() -> None:
    assert drain([beat(1), beat(2), beat(3), None], batches=True) == [[1, 2, 3]]
    assert drain([beat(1), beat(2), None], batches=False) == [[1], [2]]  # a coordinator that reads no batches
    assert drain([None, beat(1)], batches=True) == []  # nothing after the end


def test_a_request_that_does_not_fit_starts_the_next_message() -> None:
    tags = list(range(1, BATCH_MAX + 3))
    assert drain([*map(beat, tags), None], batches=True) == [tags[:BATCH_MAX], tags[BATCH_MAX:]]


def test_the_flow_waits_for_the_outbox_only_when_it_holds_nothing() -> None:
    outbox: queue.SimpleQueue[pb.SessionRequest | None] = queue.SimpleQueue()
    for tag in range(2, BATCH_MAX + 3):
        outbox.put(beat(tag))
    flow = Outflow()
    assert flow.waits
    assert len(flow.next(beat(1), outbox, True).batch) == BATCH_MAX  # type: ignore[union-attr]
    assert not flow.waits  # the one that did not fit is held: no waiting for the next message's first
    assert [r.tag for r in flow.next(None, outbox, True).batch] == [BATCH_MAX + 1, BATCH_MAX + 2]  # type: ignore[union-attr]
    assert flow.waits and not flow.ended


OK = pb.GroupHeartbeatResponse()
REFUSED = pb.GroupHeartbeatResponse(error=pb.Error(code=pb.UNKNOWN_MEMBER_ID, message="who?"))


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


def leave(*outcomes: pb.GroupHeartbeatResponse | BaseException) -> tuple[bool, list[str]]:
    """Drive a leave as the transports do: each way it asks for gets the next outcome."""
    round_ = LeaveRound("GroupHeartbeat", "w1", "127.0.0.1:9")
    ways, given = [], list(outcomes)
    while round_.way is not None:
        ways.append(round_.way)
        round_.answered(given.pop(0))
    assert not given, "asked fewer times than expected"
    return round_.taken, ways


@pytest.mark.parametrize("failure", [StreamBroken("broke"), StreamUnsupported("127.0.0.1:9")])
def test_a_leave_the_stream_could_not_carry_goes_unary(failure: Exception) -> None:
    assert leave(failure, OK) == (True, ["stream", "unary"])


@pytest.mark.parametrize("outcome, words", [
    (REFUSED, "leave: who?"),
    (TimeoutError(), "GroupHeartbeat not answered by 127.0.0.1:9: deadline"),
    (errors.NotAuthorizedError("not authorized for this group"), "not authorized for this group"),
])
def test_a_leave_not_taken_on_the_stream_is_one_line_and_no_second_try(
        outcome: pb.GroupHeartbeatResponse | BaseException, words: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="groupcoord.worker"):
        assert leave(outcome) == (False, ["stream"])
    [line] = caplog.records
    assert words in line.getMessage() and line.getMessage().startswith("w1: ")


def test_a_unary_leave_that_fails_is_one_line_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="groupcoord.worker"):
        assert leave(StreamUnsupported("127.0.0.1:9"), Unavailable()) == (False, ["stream", "unary"])
        assert leave(StreamBroken("broke"), StreamBroken("again")) == (False, ["stream", "unary"])
    assert [r.getMessage() for r in caplog.records] == [
        "w1: could not send GroupHeartbeat to 127.0.0.1:9: UNAVAILABLE connection refused",
        "w1: GroupHeartbeat not answered by 127.0.0.1:9: again"]
