"""Converting a running group between the protocols (Kafka 4's online upgrade and downgrade), in the
model on a fake clock with every group's ``validate()`` after each step: a consumer-protocol member
converts a Stable classic group, the classic members keep working inside it (answered from the
target), the group converts back when its last consumer member leaves, no task runs on two members
at any step, and refused conversions change nothing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.reconcile import MemberState
from groupcoord.coordinator.storage.store import MemoryStore
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.classic_sim import ClassicFleet
from tests.coordinator.model.consumer_sim import SESSION_MS, Fleet, G, heartbeat

CATALOG = {TaskReplica(f"t{i}") for i in range(6)}


class Mixed:
    """A classic fleet and a consumer fleet on one harness, checked together at every step."""

    def __init__(self, classic: str, consumer: str, *, cooperative: bool = False, store: MemoryStore | None = None,
                 tasks: int = 6) -> None:
        self.h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=500), store=store)
        assert self.h.put_tasks(G, *(f"t{i}" for i in range(tasks))) == pb.NONE
        self.classic = ClassicFleet(self.h, classic, cooperative=cooperative)
        self.consumer = Fleet(self.h, list(consumer))

    def running(self) -> dict[str, set[TaskReplica]]:
        return {**self.classic.running(), **self.consumer.running()}

    def check(self) -> None:
        seen: dict[TaskReplica, str] = {}
        for name, tasks in self.running().items():
            for task in tasks:
                assert task not in seen, f"{task} run by {seen[task]} and {name} at once"
                seen[task] = name

    def form_classic(self) -> None:
        for name in self.classic.members:
            self.classic.join(name)
        self.settle()
        assert self.h.state(G) == "Stable"

    def settle(self, rounds: int = 12) -> None:
        for _ in range(rounds):
            self.h.advance(0.3)
            self.expire_silent()
            for name in self.classic.members:
                self.classic.step(name)
                self.check()
            for name, m in self.consumer.members.items():
                if m.joined:
                    self.consumer.beat(name)
                    self.check()

    def expire_silent(self) -> None:
        """Members that heard nothing for a session stop by themselves (before anyone else acts)."""
        self.consumer.expire_silent()
        self.classic.expire_silent()

    def all_run(self) -> set[TaskReplica]:
        return set().union(*self.running().values())


@pytest.mark.parametrize("cooperative", [False, True], ids=["eager", "cooperative"])
def test_a_consumer_member_converts_a_stable_classic_group_and_both_kinds_run(cooperative: bool) -> None:
    mx = Mixed("ab", "c", cooperative=cooperative)
    mx.form_classic()
    before = mx.running()
    assert mx.all_run() == CATALOG and set(before) == {"a", "b"}
    joined = mx.consumer.join("c")
    assert joined.error.code == pb.NONE
    group = mx.h.model.consumer.groups[G]
    assert group.classic_members == 2 and len(group.members) == 3
    assert mx.h.state(G) == "Empty" and not mx.h.group(G).members  # the classic record holds the catalog only
    assert {group.members[mx.classic.members[n].member_id].epoch for n in "ab"} == {mx.classic.members["a"].generation}
    mx.check()
    mx.settle()
    running = mx.running()
    assert mx.all_run() == CATALOG and sorted(map(len, running.values())) == [2, 2, 2]
    for name in "ab":  # classic members answered from the target, reconciled
        member = group.members[mx.classic.members[name].member_id]
        assert member.reconciled.state is MemberState.STABLE and member.epoch == group.target_epoch
        assert member.reconciled.assigned == running[name]


def test_the_group_converts_back_when_its_last_consumer_member_leaves() -> None:
    mx = Mixed("ab", "c", cooperative=True)
    mx.form_classic()
    mx.consumer.join("c")
    mx.settle()
    assert len(mx.running()["c"]) == 2
    left = mx.consumer.leave("c")
    assert left.error.code == pb.NONE
    assert G not in mx.h.model.consumer.groups
    classic = mx.h.group(G)
    assert mx.h.state(G) == "PreparingRebalance" and set(classic.members) == {
        mx.classic.members[n].member_id for n in "ab"}
    mx.settle()
    assert mx.h.state(G) == "Stable" and mx.all_run() == CATALOG and set(mx.running()) == {"a", "b"}


@pytest.mark.parametrize("cooperative", [False, True], ids=["eager", "cooperative"])
def test_classic_members_silent_for_a_session_rejoin_the_converted_back_group_under_their_ids(
        cooperative: bool) -> None:
    """The property's pinned example: a and b heard nothing since the conversion, the consumer member
    leaves 5.8 s later (the coordinator counts them 0.2 s more; the downgrade gives them a new session
    and the whole 6 s rebalance timeout); then their session is over by their own clocks. As the stock
    worker, each stops its tasks and re-joins under its id, so the group is Stable again at once, not
    after the rebalance timeout with their old ids waited for."""
    mx = Mixed("ab", "c", cooperative=cooperative)
    mx.form_classic()
    ids = {n: mx.classic.members[n].member_id for n in "ab"}
    assert mx.consumer.join("c").error.code == pb.NONE
    mx.h.advance(5.8)
    mx.expire_silent()
    assert mx.all_run() == CATALOG - mx.running().get("c", set())  # nobody's session is over yet
    assert mx.consumer.leave("c").error.code == pb.NONE
    assert mx.h.state(G) == "PreparingRebalance" and set(mx.h.group(G).members) == set(ids.values())
    mx.settle(rounds=3)  # 0.9 s: a and b stop their tasks at 6 s and re-join at once
    assert mx.h.state(G) == "Stable" and set(mx.h.group(G).members) == set(ids.values())
    assert {n: m.member_id for n, m in mx.classic.members.items()} == ids and mx.all_run() == CATALOG


def test_members_behind_the_target_rejoin_a_converted_back_group_at_once_with_the_workers_error_rule() -> None:
    """c joins (the target epoch moves past a's and b's generation) and leaves 0.4 s later, before a
    and b heard of it: the converted-back group's generation is the target epoch, their heartbeats
    get ILLEGAL_GENERATION, and (as the stock worker, and Kafka's client) each joins again under its id."""
    mx = Mixed("ab", "c")
    mx.form_classic()
    assert mx.consumer.join("c").error.code == pb.NONE
    mx.h.advance(0.4)
    assert mx.consumer.leave("c").error.code == pb.NONE
    assert mx.h.group(G).generation > mx.classic.members["a"].generation
    mx.settle(rounds=5)  # 1.5 s, against a 6 s rebalance timeout
    assert mx.h.state(G) == "Stable" and mx.all_run() == CATALOG


def test_a_converted_group_takes_new_classic_members_and_their_leaves() -> None:
    mx = Mixed("abd", "c")
    for name in "ab":
        mx.classic.join(name)
    mx.settle()
    mx.consumer.join("c")
    mx.settle()
    mx.classic.join("d")  # a classic newcomer after the conversion: given an id at once, no leader
    joined = mx.classic.members["d"]
    assert joined.member_id and joined.member_id in mx.h.model.consumer.groups[G].members
    mx.settle()
    assert mx.all_run() == CATALOG and sorted(map(len, mx.running().values())) == [1, 1, 2, 2]
    assert mx.classic.leave("a") == pb.NONE
    mx.settle()
    assert mx.all_run() == CATALOG and "a" not in mx.running()


def test_a_silent_classic_member_of_a_converted_group_is_removed_after_its_session() -> None:
    mx = Mixed("ab", "c")
    mx.form_classic()
    mx.consumer.join("c")
    mx.settle()
    silent = mx.classic.members["b"]
    group = mx.h.model.consumer.groups[G]
    for _ in range(30):  # b stops heartbeating; the others go on
        mx.h.advance(0.3)
        mx.classic.step("a")
        mx.consumer.beat("c")
        mx.classic.expire_silent()
        mx.check()
    gone_id = silent.member_id  # b stopped its tasks and keeps its id to re-join with; the coordinator dropped it
    assert not silent.running and silent.rejoin and gone_id not in group.members and len(group.members) == 2
    mx.settle()  # its re-join under that id is UNKNOWN_MEMBER_ID: it joins afresh
    assert silent.member_id not in ("", gone_id) and silent.running
    assert mx.all_run() == CATALOG


def test_conversion_is_refused_while_the_classic_group_rebalances_and_nothing_changes() -> None:
    mx = Mixed("ab", "c")
    mx.form_classic()
    mx.classic.join("a")  # a re-joins: the group prepares a rebalance, a's join is held
    assert mx.h.state(G) == "PreparingRebalance"
    refused = mx.consumer.join("c")
    assert refused.error.code == pb.REBALANCE_IN_PROGRESS and "only when Stable" in refused.error.message
    assert G not in mx.h.model.consumer.groups and len(mx.h.group(G).members) == 2
    mx.settle()
    assert mx.consumer.join("c").error.code == pb.NONE  # Stable again: now it converts


@pytest.mark.parametrize(("fields", "code", "words"), [
    ({"assignor": "no-such-assignor"}, pb.UNSUPPORTED_ASSIGNOR, "no-such-assignor"),
    ({"session_timeout_ms": 10}, pb.INVALID_SESSION_TIMEOUT, "session_timeout_ms"),
    ({"member_epoch": 3, "member_id": "m"}, pb.INCONSISTENT_GROUP_PROTOCOL, "classic protocol"),
])
def test_a_refused_conversion_leaves_the_classic_group_as_it_was(fields: dict[str, object], code: int,
                                                                   words: str) -> None:
    mx = Mixed("ab", "")
    mx.form_classic()
    generation = mx.h.group(G).generation
    request = pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, session_timeout_ms=SESSION_MS)
    for key, value in fields.items():
        setattr(request, key, value)
    refused = heartbeat(mx.h, request)
    assert refused.code == code and words in refused.response.error.message
    assert G not in mx.h.model.consumer.groups
    assert mx.h.state(G) == "Stable" and mx.h.group(G).generation == generation and len(mx.h.group(G).members) == 2


def test_bad_classic_requests_in_a_converted_group_get_clear_errors() -> None:
    mx = Mixed("ab", "c")
    mx.form_classic()
    mx.consumer.join("c")
    a, c = mx.classic.members["a"], mx.consumer.members["c"]
    assert mx.h.heartbeat(G, a.member_id, a.generation + 7) == pb.ILLEGAL_GENERATION
    assert mx.h.heartbeat(G, "nobody", 1) == pb.UNKNOWN_MEMBER_ID
    assert mx.h.heartbeat(G, c.member_id, c.epoch) == pb.INCONSISTENT_GROUP_PROTOCOL
    assert mx.h.sync(G, a.member_id, a.generation + 1).code == pb.ILLEGAL_GENERATION
    short = mx.h.join(G, a.member_id, session_timeout_ms=10)
    assert short.code == pb.INVALID_SESSION_TIMEOUT and "session_timeout_ms" in short.response.error.message
    assert mx.h.join(G, "forged-id").code == pb.UNKNOWN_MEMBER_ID
    none = mx.h.join(G, a.member_id, protocols=())
    assert none.code == pb.INCONSISTENT_GROUP_PROTOCOL
    group = mx.h.model.consumer.groups[G]
    assert len(group.members) == 3 and group.classic_members == 2  # nothing joined, nothing lost


def test_a_converted_group_survives_a_restart_with_its_classic_members() -> None:
    store = MemoryStore()
    mx = Mixed("ab", "c", store=store, cooperative=True)
    mx.form_classic()
    mx.consumer.join("c")
    mx.settle()
    again = Harness(CoordinatorConfig(), store=store)
    assert again.runtime.load() == 1
    group = again.model.consumer.groups[G]
    assert group.classic_members == 2
    a = group.members[mx.classic.members["a"].member_id]
    assert a.classic is not None and a.classic.rebalance_protocols == ("cooperative",)
    assert a.reconciled.assigned == mx.running()["a"]
    mx.h = mx.classic.h = mx.consumer.h = again  # the members go on against the new process
    assert again.heartbeat(G, mx.classic.members["b"].member_id, mx.classic.members["b"].generation) == pb.NONE
    mx.consumer.leave("c")  # and the group converts back there
    mx.settle()
    assert again.state(G) == "Stable" and mx.all_run() == CATALOG


EVENTS = st.lists(st.tuples(st.sampled_from(["step", "join", "leave", "silent", "wait"]),
                            st.sampled_from("abcd")), min_size=10, max_size=60)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, cooperative=st.booleans())
@example(events=[("step", "a")] * 5 + [("join", "c"), ("leave", "c"), ("step", "a"), ("leave", "a"), ("leave", "b")],
         cooperative=False)  # a leaves with a join in flight (the sim counted it in the group: the final check failed)
# a and b silent for a session across the downgrade: the sim dropped their ids and joined afresh (the stock worker
# re-joins under its id), so the group waited the 6 s rebalance timeout for the old ids and nothing ran at the end
@example(events=[("step", "a")] * 4 + [("join", "c"), ("silent", "a"), ("silent", "a"), ("wait", "a"), ("wait", "a"),
                 ("leave", "c")], cooperative=False)
def test_no_task_is_run_by_two_members_across_conversions(events: list[tuple[str, str]], cooperative: bool) -> None:
    """Classic members a, b; consumer members c, d, joining and leaving in any order (each join of
    the first converts, each last leave converts back), silent members, time passing."""
    mx = Mixed("ab", "cd", cooperative=cooperative)
    mx.form_classic()
    for what, name in events:
        is_consumer = name in mx.consumer.members
        if what == "wait":
            mx.h.advance(2.5)
            mx.expire_silent()
        elif what == "silent":
            mx.h.advance(0.4)
            mx.expire_silent()
        elif is_consumer and what == "join" and not mx.consumer.members[name].joined:
            mx.consumer.join(name)
        elif is_consumer and what == "leave" and mx.consumer.members[name].joined:
            mx.consumer.leave(name)
        elif is_consumer and mx.consumer.members[name].joined:
            mx.consumer.beat(name)
        elif not is_consumer and what == "leave" and mx.classic.members[name].in_group:
            mx.classic.leave(name)
        elif not is_consumer and what == "join" and mx.classic.members[name].gone:
            mx.classic.join(name)
        elif not is_consumer:
            mx.classic.step(name)
        mx.check()
    mx.settle(rounds=20)
    if any(m.joined for m in mx.consumer.members.values()) or any(
            m.in_group or m.pending for m in mx.classic.members.values()):
        assert mx.all_run() == CATALOG, mx.running()


def test_a_static_classic_member_restarting_in_a_converted_group_takes_its_place() -> None:
    mx = Mixed("ab", "c")
    mx.form_classic()
    mx.consumer.join("c")
    mx.settle()
    first = mx.h.join(G, instance_id="i-s", client_id="s")  # a static classic worker joins the converted group
    assert first.code == pb.NONE
    old_id = first.response.member_id
    mx.settle()
    group = mx.h.model.consumer.groups[G]
    held, target = group.members[old_id].reconciled, group.target_of(old_id)
    assert target  # the target computed after its join gives it a share
    again = mx.h.join(G, instance_id="i-s", client_id="s")  # its process restarted: same instance, no member id
    new_id = again.response.member_id
    assert again.code == pb.NONE and new_id != old_id and old_id not in group.members
    assert group.target_of(new_id) == target and again.response.generation >= held.epoch
    assert group.classic_members == 3 and group.static_members == {"i-s": new_id}
    assert mx.h.heartbeat(G, old_id, held.epoch, instance_id="i-s") == pb.FENCED_INSTANCE_ID
    claimed = heartbeat(mx.h, pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, instance_id="i-s",
                                                       session_timeout_ms=SESSION_MS))
    assert claimed.code == pb.UNRELEASED_INSTANCE_ID  # a live classic member holds the instance id


def test_a_consumer_join_while_the_first_classic_member_is_still_joining_is_told_to_retry() -> None:
    """Found by the mixed chaos run: a classic group holding only a pending member id (its first worker
    between MEMBER_ID_REQUIRED and its second JoinGroup) answered a consumer worker's join with
    INCONSISTENT_GROUP_PROTOCOL, which stops the worker for good; the group is forming: retry."""
    mx = Mixed("a", "c")
    first = mx.h.join(G, client_id="a")
    assert first.code == pb.MEMBER_ID_REQUIRED and not mx.h.group(G).members and mx.h.group(G).pending_members
    refused = mx.consumer.join("c")
    assert refused.error.code == pb.REBALANCE_IN_PROGRESS and "retry" in refused.error.message
    assert G not in mx.h.model.consumer.groups and mx.h.group(G).pending_members  # nothing changed
    mx.form_classic()
    assert mx.consumer.join("c").error.code == pb.NONE  # formed and Stable: now it converts
    mx.settle()
    assert mx.all_run() == CATALOG and set(mx.running()) == {"a", "c"}


def test_a_classic_sync_naming_its_protocol_after_the_group_converts_back_is_told_to_rejoin() -> None:
    """Found by the mixed chaos run: the stock worker names its protocol in SyncGroup (KIP-559); the group
    converted back to classic has chosen none yet, and the check read that as a mismatch
    (INCONSISTENT_GROUP_PROTOCOL, fatal to the worker). As Kafka: no protocol yet is no mismatch."""
    mx = Mixed("ab", "c")
    mx.form_classic()
    mx.consumer.join("c")
    mx.settle()
    a = mx.classic.members["a"]
    assert mx.consumer.leave("c").error.code == pb.NONE and G not in mx.h.model.consumer.groups
    assert mx.h.state(G) == "PreparingRebalance" and mx.h.group(G).protocol == ""
    answer = mx.h.sync(G, a.member_id, a.generation, protocol_type="tasks", protocol_name="round-robin")
    assert answer.code == pb.REBALANCE_IN_PROGRESS, answer.response.error.message
    mx.settle()
    assert mx.h.state(G) == "Stable" and mx.all_run() == CATALOG
    b = mx.classic.members["b"]
    wrong = mx.h.sync(G, b.member_id, b.generation, protocol_name="sticky")  # a chosen protocol is still checked
    assert wrong.code == pb.INCONSISTENT_GROUP_PROTOCOL and "round-robin" in wrong.response.error.message
