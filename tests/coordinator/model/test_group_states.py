"""Each state × each request → the error code and the next state (coordinator/model/states.py's table)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.testing import Harness, Pending
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"
HELD = "held"


def stable_pair(h: Harness) -> tuple[str, str]:
    """Leader a and follower b, Stable at generation 1 with tasks t1, t2."""
    h.put_tasks(G, "t1", "t2")
    a, ja = h.join_new(G)
    b, jb = h.join_new(G)
    h.advance(6.1)  # the initial delay, extended once because a second member arrived
    assert ja.code == jb.code == pb.NONE
    assert ja.response.leader_id == a
    sa = h.sync(G, a, 1, {a: ["t1"], b: ["t2"]})
    assert sa.code == pb.NONE
    return a, b


def in_empty(h: Harness) -> tuple[str, str]:
    h.put_tasks(G, "t1")
    return "ghost-1", "ghost-2"


def in_preparing(h: Harness) -> tuple[str, str]:
    a, b = stable_pair(h)
    h.join_new(G)  # a third member arrives: held, the group prepares a rebalance
    return a, b


def in_awaiting_sync(h: Harness) -> tuple[str, str]:
    h.put_tasks(G, "t1", "t2")
    a, _ = h.join_new(G)
    b, _ = h.join_new(G)
    h.advance(6.1)
    return a, b


def in_stable(h: Harness) -> tuple[str, str]:
    return stable_pair(h)


def in_dead(h: Harness) -> tuple[str, str]:
    a, b = stable_pair(h)
    h.group(G).mark_dead()
    return a, b


def new_harness() -> Harness:
    return Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=3000))


SETUPS: dict[str, Callable[[Harness], tuple[str, str]]] = {
    "Empty": in_empty,
    "PreparingRebalance": in_preparing,
    "AwaitingSync": in_awaiting_sync,
    "Stable": in_stable,
    "Dead": in_dead,
}


def do_join_same(h: Harness, leader: str, follower: str) -> int | str:
    p = h.join(G, follower)
    return p.code if p.done else HELD


def do_join_changed(h: Harness, leader: str, follower: str) -> int | str:
    p = h.join(G, follower, metadata=pb.MemberMetadata(rack="changed"))
    return p.code if p.done else HELD


def do_join_leader(h: Harness, leader: str, follower: str) -> int | str:
    p = h.join(G, leader)
    return p.code if p.done else HELD


def do_join_new(h: Harness, leader: str, follower: str) -> int | str:
    return h.join(G).code


def do_sync(h: Harness, leader: str, follower: str) -> int | str:
    p = h.sync(G, follower, h.group(G).generation)
    return p.code if p.done else HELD


def do_heartbeat(h: Harness, leader: str, follower: str) -> int | str:
    return h.heartbeat(G, follower, h.group(G).generation)


def do_heartbeat_stale(h: Harness, leader: str, follower: str) -> int | str:
    return h.heartbeat(G, follower, h.group(G).generation - 1)


def do_heartbeat_unknown(h: Harness, leader: str, follower: str) -> int | str:
    return h.heartbeat(G, "nobody", h.group(G).generation)


def do_leave(h: Harness, leader: str, follower: str) -> int | str:
    return h.leave(G, follower)


REQUESTS = {
    "join-same": do_join_same,
    "join-changed": do_join_changed,
    "join-leader": do_join_leader,
    "join-new": do_join_new,
    "sync": do_sync,
    "heartbeat": do_heartbeat,
    "heartbeat-stale-gen": do_heartbeat_stale,
    "heartbeat-unknown": do_heartbeat_unknown,
    "leave": do_leave,
}

N, UNK, ILL, RIP, CNA, MIR = (
    pb.NONE, pb.UNKNOWN_MEMBER_ID, pb.ILLEGAL_GENERATION, pb.REBALANCE_IN_PROGRESS, pb.COORDINATOR_NOT_AVAILABLE,
    pb.MEMBER_ID_REQUIRED,
)
E, P, A, S, D = "Empty", "PreparingRebalance", "AwaitingSync", "Stable", "Dead"

# (state, request) -> (answer, next state)
TABLE: dict[tuple[str, str], tuple[int | str, str]] = {
    (E, "join-same"): (UNK, E),
    (E, "join-changed"): (UNK, E),
    (E, "join-leader"): (UNK, E),
    (E, "join-new"): (MIR, E),
    (E, "sync"): (UNK, E),
    (E, "heartbeat"): (UNK, E),
    (E, "heartbeat-stale-gen"): (UNK, E),
    (E, "heartbeat-unknown"): (UNK, E),
    (E, "leave"): (UNK, E),
    (P, "join-same"): (HELD, P),
    (P, "join-changed"): (HELD, P),
    (P, "join-leader"): (HELD, P),
    (P, "join-new"): (MIR, P),
    (P, "sync"): (RIP, P),
    (P, "heartbeat"): (RIP, P),
    (P, "heartbeat-stale-gen"): (ILL, P),
    (P, "heartbeat-unknown"): (UNK, P),
    (P, "leave"): (N, P),
    (A, "join-same"): (N, A),
    (A, "join-changed"): (HELD, P),
    (A, "join-leader"): (N, A),
    (A, "join-new"): (MIR, A),
    (A, "sync"): (HELD, A),
    (A, "heartbeat"): (RIP, A),
    (A, "heartbeat-stale-gen"): (ILL, A),
    (A, "heartbeat-unknown"): (UNK, A),
    (A, "leave"): (N, P),
    (S, "join-same"): (N, S),
    (S, "join-changed"): (HELD, P),
    (S, "join-leader"): (HELD, P),
    (S, "join-new"): (MIR, S),
    (S, "sync"): (N, S),
    (S, "heartbeat"): (N, S),
    (S, "heartbeat-stale-gen"): (ILL, S),
    (S, "heartbeat-unknown"): (UNK, S),
    (S, "leave"): (N, P),
    (D, "join-same"): (CNA, D),
    (D, "join-changed"): (CNA, D),
    (D, "join-leader"): (CNA, D),
    (D, "join-new"): (CNA, D),
    (D, "sync"): (CNA, D),
    (D, "heartbeat"): (CNA, D),
    (D, "heartbeat-stale-gen"): (CNA, D),
    (D, "heartbeat-unknown"): (CNA, D),
    (D, "leave"): (CNA, D),
}


def test_table_covers_every_state_and_request() -> None:
    assert set(TABLE) == {(s, r) for s in SETUPS for r in REQUESTS}


@pytest.mark.parametrize(("state", "request_name"), sorted(TABLE), ids=lambda v: str(v))
def test_state_answers(state: str, request_name: str) -> None:
    h = new_harness()
    leader, follower = SETUPS[state](h)
    assert h.state(G) == state
    answer, next_state = TABLE[(state, request_name)]
    got = REQUESTS[request_name](h, leader, follower)
    name = got if isinstance(got, str) else pb.ErrorCode.Name(got)
    expected = answer if isinstance(answer, str) else pb.ErrorCode.Name(answer)
    assert name == expected
    assert h.state(G) == next_state


def test_held_syncs_get_rebalance_in_progress_when_awaiting_sync_goes_back() -> None:
    h = new_harness()
    _leader, follower = in_awaiting_sync(h)
    held = h.sync(G, follower, 1)
    assert not held.done
    h.join_new(G)  # a new member: back to PreparingRebalance
    assert held.code == pb.REBALANCE_IN_PROGRESS
    assert h.state(G) == P


def test_superseded_join_gets_an_answer() -> None:
    h = new_harness()
    _leader, follower = in_preparing(h)
    first: Pending = h.join(G, follower)
    second = h.join(G, follower)
    assert first.code == pb.REBALANCE_IN_PROGRESS
    assert not second.done


def test_every_state_has_a_handler_for_every_request() -> None:
    from groupcoord.coordinator.model.join import KNOWN_MEMBER_JOIN
    from groupcoord.coordinator.model.membership import HEARTBEAT_ANSWER
    from groupcoord.coordinator.model.states import GroupState
    from groupcoord.coordinator.model.sync import SYNC

    assert set(KNOWN_MEMBER_JOIN) == set(SYNC) == set(GroupState)
    # Empty has no members and Dead is refused before the member lookup: heartbeats never reach them
    assert set(HEARTBEAT_ANSWER) == set(GroupState) - {GroupState.EMPTY, GroupState.DEAD}
