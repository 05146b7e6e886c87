"""The worker's Session stream decisions without I/O (``worker.stream_tags``): tags, answers, news, resync,
the shared registry, the remembered UNIMPLEMENTED; and the member core's answer to news (``Member.hear``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.member import Member
from groupcoord.worker.states import WorkerState
from groupcoord.worker.stream_tags import (
    BATCH_BYTES,
    BATCH_MAX,
    RESYNC,
    STREAMED,
    Hearers,
    Nudge,
    NudgeKind,
    Registry,
    Remembered,
    RequestBatch,
    TagBook,
    answer_of,
    nudge_for,
    reconnect_wait,
    session_request,
    unbatched,
)


def test_tags_start_at_one_never_repeat_and_find_their_waiter_once() -> None:
    book: TagBook[str] = TagBook()
    tags = [book.open(name) for name in ("a", "b", "c")]
    assert tags == [1, 2, 3]
    assert book.answered(2) == "b"
    assert book.answered(2) is None  # a second answer for the same tag finds nobody
    book.forget(1)  # its caller stopped waiting (deadline): a late answer is dropped
    assert book.answered(1) is None
    assert book.open("d") == 4  # never reused, even once 1 and 2 are free
    assert sorted(book.fail_all()) == ["c", "d"]
    assert len(book) == 0
    assert book.answered(0) is None  # 0 is news, never a request


@pytest.mark.parametrize("method", sorted(STREAMED))
def test_every_streamed_call_goes_in_its_own_body_and_its_answer_comes_out(method: str) -> None:
    body = STREAMED[method]
    request_type = type(getattr(pb.SessionRequest(), body))
    request = request_type(group_id="orders")
    envelope = session_request(7, body, request)
    assert envelope.tag == 7 and envelope.WhichOneof("body") == body
    assert getattr(envelope, body).group_id == "orders"
    response = pb.SessionResponse(tag=7)
    getattr(response, body).SetInParent()
    assert answer_of(response) == getattr(response, body)


def test_news_and_an_empty_body_are_no_answer() -> None:
    assert answer_of(pb.SessionResponse(tag=3)) is None
    news = pb.SessionResponse(news=pb.SessionNews(group_id="g", member_id="m"))
    assert answer_of(news) is None


def _news(**body: object) -> pb.SessionNews:
    return pb.SessionNews(group_id="orders", member_id="m-1", **body)  # type: ignore[arg-type]


def test_each_kind_of_news_becomes_its_nudge() -> None:
    assert nudge_for(_news(rebalance_started=pb.RebalanceStarted(generation=4))) == Nudge(NudgeKind.JOIN, 4)
    assert nudge_for(_news(assignment_changed=pb.AssignmentChanged(member_epoch=3))) == Nudge(NudgeKind.HEARTBEAT)
    assert nudge_for(_news(tasks_to_give_up=pb.TasksToGiveUp(member_epoch=3))) == Nudge(NudgeKind.HEARTBEAT)
    moved = _news(coordinator_moved=pb.CoordinatorMoved(coordinator_hint="127.0.0.1:9"))
    assert nudge_for(moved) == Nudge(NudgeKind.MOVED, hint="127.0.0.1:9")
    assert nudge_for(_news()) is None  # news of a kind this client does not know: ignored


def test_news_reaches_only_its_member_and_a_resync_reaches_every_member_once() -> None:
    heard: list[tuple[str, Nudge]] = []
    hearers = Hearers()

    def hearer(name: str) -> Callable[[Nudge], None]:
        return lambda nudge: heard.append((name, nudge))

    one, two = hearer("one"), hearer("two")
    hearers.listen("orders", "m-1", one)
    hearers.listen("orders", "m-2", two)
    hearers.listen("orders", "", two)  # a member without an id yet is not listed
    hearers.listen("billing", "m-9", two)  # one transport may speak for a member of another group too
    assert hearers.tell(_news(assignment_changed=pb.AssignmentChanged()))
    assert heard == [("one", Nudge(NudgeKind.HEARTBEAT))]
    stranger = pb.SessionNews(group_id="orders", member_id="m-3", assignment_changed=pb.AssignmentChanged())
    assert not hearers.tell(stranger)
    heard.clear()
    assert hearers.resync() == 2
    assert sorted(heard) == [("one", RESYNC), ("two", RESYNC)]
    hearers.drop(two)
    assert len(hearers) == 1


def test_a_hearer_that_raises_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    heard: list[Nudge] = []
    hearers = Hearers()

    def broken(nudge: Nudge) -> None:
        raise RuntimeError("listener bug")

    hearers.listen("orders", "m-1", broken)
    hearers.listen("orders", "m-2", heard.append)
    assert hearers.resync() == 2
    assert heard == [RESYNC]
    assert "news handler failed" in caplog.text


def test_the_registry_shares_one_stream_per_key_and_hands_it_back_at_the_last_release() -> None:
    made: list[str] = []
    registry: Registry[str] = Registry()

    def make(name: str) -> Callable[[], str]:
        def made_now() -> str:
            made.append(name)
            return name
        return made_now

    assert registry.acquire(("a:1", "creds"), make("first")) == "first"
    assert registry.acquire(("a:1", "creds"), make("second")) == "first"
    assert registry.acquire(("a:1", "other creds"), make("third")) == "third"
    assert made == ["first", "third"]
    assert registry.users(("a:1", "creds")) == 2
    assert registry.release(("a:1", "creds")) is None
    assert registry.release(("a:1", "creds")) == "first"  # the last user: the caller closes it
    assert registry.release(("a:1", "creds")) is None  # a release too many is harmless
    assert len(registry) == 1


def test_unimplemented_is_remembered_per_address_and_asked_again_later() -> None:
    remembered = Remembered(recheck_s=600)
    assert not remembered.unary("a:1", now=0)
    remembered.note("a:1", now=10)
    assert remembered.unary("a:1", now=11)
    assert not remembered.unary("b:2", now=11)
    assert remembered.unary("a:1", now=609)
    assert not remembered.unary("a:1", now=610)  # a rolling upgrade may have brought the stream
    assert not remembered.unary("a:1", now=611)


def test_the_reconnect_backoff_grows_and_stays_within_its_bound() -> None:
    waits = [reconnect_wait(failures, max_s=0.5) for failures in range(1, 12)]
    assert all(0.05 <= wait <= 0.5 for wait in waits)
    assert waits[0] <= 0.1 and waits[-1] == 0.5


def _member(state: WorkerState, generation: int) -> Member:
    config = WorkerConfig(group_id="orders", coordinators=("127.0.0.1:1",))
    member = Member(config, assignor_lookup=lambda name: None, monotonic=lambda: 0.0)  # type: ignore[arg-type,return-value]
    member.session.generation = generation
    for trigger in ("start", "join", "joined", "synced"):  # along the diagram's edges, up to ``state``
        if member.machine.state is state:
            break
        member.machine.fire(trigger)  # type: ignore[arg-type]
    assert member.machine.state is state
    return member


@pytest.mark.parametrize("nudge", [RESYNC, Nudge(NudgeKind.MOVED, hint="h:1")])
def test_news_cuts_a_stable_members_heartbeat_wait_and_its_answer_decides(nudge: Nudge) -> None:
    member = _member(WorkerState.STABLE, 3)
    assert member.hear(nudge)
    assert member.machine.state is WorkerState.STABLE  # no join on the news alone: the heartbeat's answer decides
    assert not member.join_told and not member.rebalance_requested


@pytest.mark.parametrize("generation", [3, -1])
def test_a_rebalance_of_its_generation_makes_a_stable_member_join_at_its_next_tick(generation: int) -> None:
    member = _member(WorkerState.STABLE, 3)
    assert member.hear(Nudge(NudgeKind.JOIN, generation=generation))
    assert member.join_told  # stored before it was told (news after the write): no heartbeat first
    assert member.machine.state is WorkerState.STABLE  # the driver's tick does it, on its own thread


def test_news_of_an_older_rebalance_or_while_joining_changes_nothing() -> None:
    stale = _member(WorkerState.STABLE, 5)
    assert not stale.hear(Nudge(NudgeKind.JOIN, generation=4))
    joining = _member(WorkerState.JOINING, 5)
    assert not joining.hear(Nudge(NudgeKind.JOIN, generation=5))
    assert not joining.hear(RESYNC)  # its JoinGroup in flight is the news it needs


def test_a_member_that_joined_again_as_a_new_one_is_heard_under_its_new_id_only() -> None:
    heard: list[Nudge] = []
    hearers = Hearers()
    hearers.listen("orders", "m-old", heard.append)
    hearers.listen("orders", "m-new", heard.append)  # UNKNOWN_MEMBER_ID, then a join as a new member
    hearers.listen("billing", "m-b", heard.append)  # the same transport in another group keeps that one
    assert len(hearers) == 2
    old = pb.SessionNews(group_id="orders", member_id="m-old", assignment_changed=pb.AssignmentChanged())
    assert not hearers.tell(old)
    hearers.drop(heard.append)
    assert len(hearers) == 0


def test_an_acl_refusal_in_an_answer_fails_as_its_unary_twin_does() -> None:
    from groupcoord import errors
    from groupcoord.worker.stream_tags import refused_in_band

    denied = pb.JoinGroupResponse(error=pb.Error(code=pb.GROUP_AUTHORIZATION_FAILED, message="User:a may not"))
    refused = refused_in_band(denied)
    assert isinstance(refused, errors.NotAuthorizedError) and "User:a may not" in str(refused)
    assert refused_in_band(pb.JoinGroupResponse(error=pb.Error(code=pb.REBALANCE_IN_PROGRESS))) is None
    assert refused_in_band(pb.HeartbeatResponse()) is None


def _beat(tag: int, group_id: str = "g") -> pb.SessionRequest:
    return pb.SessionRequest(tag=tag, heartbeat=pb.HeartbeatRequest(group_id=group_id))


def test_requests_waiting_together_go_as_one_batch_within_its_bounds() -> None:
    alone = RequestBatch(_beat(1))
    assert alone.message() == _beat(1)  # one request is not wrapped
    batch = RequestBatch(_beat(1))
    assert all(batch.add(_beat(tag)) for tag in range(2, BATCH_MAX + 1))
    assert not batch.add(_beat(BATCH_MAX + 1))  # the count bound: it goes in the next batch
    assert [r.tag for r in batch.message().batch] == list(range(1, BATCH_MAX + 1))
    big = RequestBatch(_beat(1, "g" * 5_000))
    while big.add(_beat(2, "g" * 5_000)):
        pass
    assert len(big.requests) < BATCH_MAX and big.size <= BATCH_BYTES < big.size + _beat(2, "g" * 5_000).ByteSize()


def test_a_batched_answer_is_read_as_its_answers_in_order() -> None:
    answers = [pb.SessionResponse(tag=n, heartbeat=pb.HeartbeatResponse()) for n in (3, 1, 2)]
    news = pb.SessionResponse(news=pb.SessionNews(group_id="g", member_id="m"))
    assert list(unbatched(pb.SessionResponse(batch=[*answers, news]))) == [*answers, news]
    assert list(unbatched(answers[0])) == [answers[0]]


def test_a_member_with_no_id_yet_hears_its_news_from_the_answer_that_names_it() -> None:
    """A consumer member's first GroupHeartbeat has no member id: the coordinator tells it its first target
    at once, so the answer naming it must make it heard before the news read right after it."""
    heard: list[Nudge] = []
    hearers = Hearers()
    join = pb.GroupHeartbeatRequest(group_id="orders", member_epoch=0)
    hearers.sent(7, join, heard.append)
    news = _news(assignment_changed=pb.AssignmentChanged(member_epoch=2))
    assert not hearers.tell(news)  # nobody known as m-1 before the answer
    hearers.answered(7, pb.GroupHeartbeatResponse(member_id="m-1", member_epoch=1))
    assert hearers.tell(news) and heard == [Nudge(NudgeKind.HEARTBEAT)]


def test_a_request_with_no_id_that_gets_no_answer_leaves_nothing_behind() -> None:
    heard: list[Nudge] = []
    hearers = Hearers()
    for tag in (1, 2, 3):
        hearers.sent(tag, pb.GroupHeartbeatRequest(group_id="orders", member_epoch=0), heard.append)
    hearers.unanswered(1)  # its caller stopped waiting
    hearers.answered(1, pb.GroupHeartbeatResponse(member_id="m-1"))  # a late answer teaches nothing
    hearers.answered(2, pb.GroupHeartbeatResponse(error=pb.Error(code=pb.GROUP_MAX_SIZE_REACHED)))  # no id
    hearers.unanswered()  # the stream ended
    hearers.answered(3, pb.GroupHeartbeatResponse(member_id="m-3"))
    assert len(hearers) == 0 and not hearers._naming
