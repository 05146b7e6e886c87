"""``worker.stream_life``: a Session stream's life across its openings as both drivers keep it, on a fake
clock: what a probe and an end mean (remembered unary, the backoff, a resync), and when a call may go on it."""

from __future__ import annotations

import grpc
import pytest

from groupcoord.worker.stream_life import StreamLife
from groupcoord.worker.stream_tags import REFUSED_WAIT_S, Remembered, StreamBroken, StreamUnsupported
from tests.worker.rpc_failure import RpcFailure


def life() -> tuple[StreamLife, list[float]]:
    clock = [100.0]
    return StreamLife("10.0.0.1:9", ("10.0.0.1:9", "creds"), Remembered(), 1.0, lambda: clock[0]), clock


def test_a_probe_answered_unimplemented_is_remembered_and_a_silent_one_backs_off() -> None:
    stream, clock = life()
    with pytest.raises(StreamUnsupported):
        stream.probed_as("UNIMPLEMENTED")
    assert stream.unary and not stream.probed
    with pytest.raises(StreamUnsupported):
        stream.admit(open_now=False)
    silent, clock = life()
    with pytest.raises(StreamBroken, match="no Session stream from 10.0.0.1:9 now: UNAVAILABLE"):
        silent.probed_as("UNAVAILABLE")
    assert silent.failures == 1 and 100.0 < silent.retry_at <= 100.2
    with pytest.raises(StreamBroken, match="reconnecting after a backoff"):
        silent.admit(open_now=False)
    silent.admit(open_now=True)  # a stream already open takes calls whatever the backoff
    clock[0] = silent.retry_at
    silent.admit(open_now=False)
    silent.probed_as("OK")
    assert silent.probed


def test_a_refused_opening_waits_the_refusal_s_wait_and_its_calls_go_unary() -> None:
    stream, _ = life()
    stream.opening()
    failure = stream.ended(RpcFailure(grpc.StatusCode.PERMISSION_DENIED), in_flight=2)
    assert isinstance(failure, StreamUnsupported) and not stream.unary  # not remembered: a credential may change
    assert stream.retry_at == 100.0 + REFUSED_WAIT_S and stream.failures == 1


def test_an_unimplemented_end_before_any_answer_is_remembered_after_one_it_is_a_break() -> None:
    stream, _ = life()
    stream.opening()
    assert isinstance(stream.ended(RpcFailure(grpc.StatusCode.UNIMPLEMENTED), 0), StreamUnsupported) and stream.unary
    served, _ = life()
    served.opening()
    assert served.first_answer() is False  # the first stream's first answer: no resync
    assert served.first_answer() is False  # and only once
    failure = served.ended(RpcFailure(grpc.StatusCode.UNIMPLEMENTED, "gone"), 1)
    assert isinstance(failure, StreamBroken) and str(failure) == "Session stream to 10.0.0.1:9 broke: UNIMPLEMENTED gone"
    assert not served.unary and served.failures == 1


def test_a_stream_opened_again_resyncs_on_its_first_answer_and_the_failures_start_over() -> None:
    stream, _ = life()
    stream.opening()
    stream.first_answer()
    assert "the coordinator ended the stream" in str(stream.ended(None, 0))
    stream.opening()
    assert stream.opened == 2 and not stream.batches and stream.failures == 1
    assert stream.first_answer() is True and stream.failures == 0


def test_a_closed_stream_refuses_calls_and_its_end_sets_no_backoff() -> None:
    stream, _ = life()
    stream.opening()
    stream.closed = True
    with pytest.raises(StreamBroken, match="the stream is closed"):
        stream.admit(open_now=True)
    assert isinstance(stream.ended(RpcFailure(grpc.StatusCode.CANCELLED), 0), StreamBroken)
    assert stream.failures == 0 and stream.retry_at == 0.0
