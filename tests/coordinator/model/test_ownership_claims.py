"""A member's ownership claim is believed only as far as the coordinator's own record (issue 26).

A member that joins claiming tasks the coordinator gave to another member (a bug or a hostile
tenant) used to block those tasks in every cooperative generation: the honest leader's
assignment was refused, the group looped thousands of generations and the honest member ended
with nothing. Here two honest members and a liar run the protocol against the model on a fake
clock; the leader's SyncGroup is built by the stock worker's leader code
(``worker.leader.leader_sync_request``) with a real assignor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from groupcoord.assignors.registry import get_assignor
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.ownership import by_member, record_of, running
from groupcoord.coordinator.model.states import GroupState
from groupcoord.coordinator.testing import Harness, Pending
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.leader import leader_sync_request

G = "shared"
TASKS = [f"t{i}" for i in range(6)]


def replica(task_id: str, r: int = 0) -> pb.TaskReplica:
    return pb.TaskReplica(task_id=task_id, replica=r)


# ---------------------------------------------------------------------- the rule, as a pure function


def test_a_claim_narrows_the_record_and_never_widens_it() -> None:
    records = {"a": {("t1", 0), ("t2", 0)}, "liar": set()}
    owners, ignored = running(records, {"a": [replica("t1")], "liar": [replica("t1"), replica("t2")]})
    assert owners == {("t1", 0): frozenset({"a"})}  # a stopped t2 (it no longer claims it)
    assert ignored == {"liar": [("t1", 0), ("t2", 0)]}


def test_a_member_that_did_not_rejoin_keeps_its_whole_record() -> None:
    owners, ignored = running({"away": {("t1", 0)}}, {"away": None})
    assert owners == {("t1", 0): frozenset({"away"})} and ignored == {}


def test_what_a_member_was_never_told_to_stop_stays_on_its_record() -> None:
    before = by_member({("t1", 0): frozenset({"a"}), ("t2", 0): frozenset({"a", "b"})})
    assert before == {"a": {("t1", 0), ("t2", 0)}, "b": {("t2", 0)}}
    # a was answered its new assignment (t1 only) and re-joined: it confirmed it stopped t2
    assert record_of([replica("t1")], before["a"], confirmed=True) == {("t1", 0)}
    # it never heard of the new assignment: it may still run t2
    assert record_of([replica("t1")], before["a"], confirmed=False) == {("t1", 0), ("t2", 0)}


# ---------------------------------------------------------------------- the liar in a running group


@dataclass
class Member:
    """One simulated worker: honest ones follow the protocol; the liar claims ``claim``."""

    name: str
    static: bool
    protocol: str  # "eager" | "cooperative"
    claim: Sequence[str] | None = None  # the liar's claim (None: honest)
    member_id: str = ""
    runs: list[str] = field(default_factory=list)
    owned: list[str] = field(default_factory=list)  # reported when joining (eager keeps it for stickiness)
    owned_generation: int = -1

    def request(self, assignor: str) -> pb.JoinGroupRequest:
        claimed = list(self.claim) if self.claim is not None else self.owned
        return pb.JoinGroupRequest(
            group_id=G, member_id=self.member_id, client_id=self.name, instance_id=self.name if self.static else "",
            session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocols=[assignor],
            rebalance_protocols=["eager", "cooperative"] if self.protocol == "cooperative" else ["eager"],
            metadata=pb.MemberMetadata(owned=[replica(t) for t in claimed],
                                       owned_generation=10**9 if self.claim is not None else self.owned_generation),
        )


class Group:
    """Runs whole rounds of the protocol: everyone joins, the leader assigns, everyone syncs."""

    def __init__(self, h: Harness, assignor: str) -> None:
        self.h = h
        self.assignor = assignor
        self.members: list[Member] = []
        self.invalid = 0

    def join(self, member: Member) -> Pending:
        if self.h.model.groups.get(G) is not None and self.h.state(G) == "Stable" and member.protocol == "eager" \
                and member.claim is None:
            member.runs = []  # eager: revoke everything before re-joining
        held = self.h.run(lambda token: self.h.model.join(member.request(self.assignor), token, "test"),
                          pb.JoinGroupResponse)
        if held.done and held.code == pb.MEMBER_ID_REQUIRED:
            member.member_id = held.response.member_id
            held = self.h.run(lambda token: self.h.model.join(member.request(self.assignor), token, "test"),
                              pb.JoinGroupResponse)
        return held

    def round(self, first: Sequence[Member]) -> list[Member]:
        """``first`` join (new members, members told to re-join); once the group is rebalancing the
        others follow, as heartbeats would tell them. The leader assigns, everyone who joined syncs.
        Returns who must join again (a cooperative revoke, a refused assignment)."""
        joins = {m.name: self.join(m) for m in first}
        for _ in range(len(self.members) + 1):  # a join answered before the phase moved on: join again
            if self.h.model.groups[G].state is not GroupState.PREPARING_REBALANCE:
                break
            for member in self.members:
                if member.name in joins and joins[member.name].done:
                    member.member_id = joins[member.name].response.member_id or member.member_id
                if member.name not in joins or joins[member.name].done:
                    joins[member.name] = self.join(member)
        assert all(j.done for j in joins.values()), "a join is still held"
        answers = {name: j.response for name, j in joins.items()}
        joined = [m for m in self.members if m.name in answers]
        for member in joined:
            assert answers[member.name].error.code == pb.NONE, answers[member.name]
            member.member_id = answers[member.name].member_id
        leader = [m for m in joined if answers[m.name].leader_id == m.member_id and answers[m.name].members]
        syncs = {}
        for member in [m for m in joined if m not in leader] + leader:
            answer = answers[member.name]
            if member in leader:
                request = leader_sync_request(get_assignor, G, member.member_id, answer)
            else:
                request = pb.SyncGroupRequest(group_id=G, member_id=member.member_id, generation=answer.generation)
            syncs[member.name] = self.h.run(lambda token, r=request: self.h.model.sync(r, token), pb.SyncGroupResponse)
        again = []
        for member in joined:
            response = syncs[member.name].response
            if response is None or response.error.code != pb.NONE:
                self.invalid += int(response is not None and response.error.code == pb.INVALID_ASSIGNMENT)
                again.append(member)
                continue
            member.runs = [r.task_id for r in response.tasks]
            member.owned, member.owned_generation = list(member.runs), response.generation
            if response.rejoin:
                again.append(member)
        if not again and self.h.model.groups[G].state is not GroupState.STABLE:
            again = list(self.members)
        return again

    def settle(self, first: Sequence[Member], most: int = 30) -> int:
        """Rounds until the group is stable and nobody is told to re-join; how many it took."""
        for rounds in range(1, most + 1):
            first = self.round(first)
            if not first:
                return rounds
        return most + 1


def owners(h: Harness) -> dict[str, str]:
    group = h.model.groups[G]
    return {r.task_id: member_id for member_id, replicas in group.assignment.items() for r in replicas}


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
@pytest.mark.parametrize("assignor", ["round-robin", "sticky"])
def test_a_liar_claiming_the_others_tasks_changes_nothing(protocol: str, static: bool, assignor: str) -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    h.put_tasks(G, *TASKS)
    group = Group(h, assignor)
    honest = [Member("a", static, protocol), Member("b", static, protocol)]
    group.members = list(honest)
    assert group.settle(honest) <= 3
    before = {m.name: set(m.runs) for m in honest}
    assert sorted(before["a"] | before["b"]) == TASKS
    generation = h.group(G).generation

    liar = Member("liar", static, protocol, claim=TASKS)  # claims every task, at a huge owned_generation
    group.members.append(liar)
    rounds = group.settle([liar])

    # bounded: one generation for the join (eager), two for a cooperative move; no refusals
    assert rounds <= (2 if protocol == "cooperative" else 1)
    assert h.group(G).generation - generation == rounds and group.invalid == 0
    # every task assigned, nothing waiting between two generations
    final = owners(h)
    assert sorted(final) == TASKS and not h.group(G).unassigned and not h.group(G).revoking
    for member in honest:  # each honest member keeps its share; a sticky one only tasks it had
        assert len(member.runs) == 2, (member.name, member.runs)
        if assignor == "sticky":
            assert set(member.runs) <= before[member.name], (member.name, member.runs)
    assert h.runtime.metrics.registry.get_sample_value("groupcoord_ownership_claims_ignored_total") == rounds

    # the liar keeps lying on every re-join: no generation follows unless membership changes
    generation = h.group(G).generation
    for _ in range(3):
        assert group.round([liar]) == []
    assert h.group(G).generation == generation and group.invalid == 0
    assert owners(h) == final


def test_the_ignored_claim_is_logged_once_per_member_and_generation(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    h.put_tasks(G, *TASKS)
    group = Group(h, "round-robin")
    group.members = [Member("a", False, "cooperative")]
    group.settle(group.members)
    liar = Member("liar", False, "cooperative", claim=["t0", "\x1b[31mt9"])
    group.members.append(liar)
    caplog.set_level("WARNING", logger="groupcoord.coordinator")
    rounds = group.settle([liar])
    lines = [r.getMessage() for r in caplog.records if "did not assign" in r.getMessage()]
    assert len(lines) == rounds and all("\x1b" not in line for line in lines)
    assert "claims 2 task replica(s)" in lines[0]


def test_the_leader_is_told_the_coordinators_record_not_the_claims() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    h.put_tasks(G, *TASKS)
    group = Group(h, "round-robin")
    a = Member("a", True, "eager")
    group.members = [a]
    group.settle([a])
    liar = Member("liar", True, "eager", claim=TASKS)
    group.members.append(liar)
    liar_join = group.join(liar)
    leader_view = group.join(a).response
    assert liar_join.done and leader_view.members
    assigned = {m.member_id: sorted(r.task_id for r in m.assigned) for m in leader_view.members}
    assert assigned[leader_view.member_id] == TASKS and sorted(assigned.values()) == [[], TASKS]
