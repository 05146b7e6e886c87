"""Free-form fields bounded, error messages quoting only a short prefix, batches that fit their
answer (issue 26 item 3), against the model on a fake clock."""

from __future__ import annotations

import json

import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import limits
from groupcoord.coordinator.model.records import finish_record, group_to_record
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"


def join(h: Harness, **fields: object) -> pb.JoinGroupResponse:
    request = pb.JoinGroupRequest(group_id=G, client_id="w", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                  protocols=["round-robin"], instance_id="i", **fields)  # type: ignore[arg-type]
    response: pb.JoinGroupResponse = h.run(lambda token: h.model.join(request, token, "test"),
                                           pb.JoinGroupResponse).response
    return response


@pytest.mark.parametrize("name", ["coop\x00erative", "\x1b[31mcooperative", "eager\nINFO forged line", "c" * 1_000_000])
def test_rebalance_protocol_names_are_printable_and_short(name: str) -> None:
    h = Harness()
    answer = join(h, rebalance_protocols=["eager", name])
    assert answer.error.code == pb.INVALID_REQUEST and "rebalance protocol" in answer.error.message
    assert len(answer.error.message) < 200 and G not in h.model.groups  # nothing kept


def plain_join(h: Harness, **fields: object) -> pb.JoinGroupResponse:
    request = pb.JoinGroupRequest(**{"group_id": G, "client_id": "w", "session_timeout_ms": 10_000,  # type: ignore[arg-type]
                                     "rebalance_timeout_ms": 10_000, "protocols": ["round-robin"], **fields})
    response: pb.JoinGroupResponse = h.run(lambda token: h.model.join(request, token, "test"),
                                           pb.JoinGroupResponse).response
    return response


@pytest.mark.parametrize(("fields", "named"), [
    ({"client_id": "w\x00"}, "client_id"),
    ({"instance_id": "i" * 300}, "instance_id"),
    ({"member_id": "m" * (256 + 38)}, "member_id"),
    ({"protocol_type": "consumer\n"}, "protocol_type"),
    ({"protocols": ["round-robin", "r\x7f"]}, "protocol name"),
    ({"rebalance_protocols": ["eager", "e" * 257]}, "rebalance protocol"),
    # two bad ids: the first in the checks' order is named (the one-pass check then looks id by id)
    ({"client_id": "w" * 257, "protocol_type": "\x00"}, "client_id"),
    ({"protocol_type": "\x00", "protocols": ["\x01"]}, "protocol_type"),
    ({"instance_id": "\u2028", "member_id": "\x00"}, "instance_id"),
])
def test_each_bad_id_of_a_join_is_named_first_bad_first(fields: dict[str, object], named: str) -> None:
    h = Harness(CoordinatorConfig(max_id_length=256, group_initial_rebalance_delay_ms=0))
    answer = plain_join(h, **fields)
    assert answer.error.code == pb.INVALID_REQUEST and answer.error.message.startswith(named), answer.error.message
    assert G not in h.model.groups  # nothing kept


def test_ids_at_their_length_limit_join() -> None:
    h = Harness(CoordinatorConfig(max_id_length=8, group_initial_rebalance_delay_ms=0))
    answer = plain_join(h, client_id="c" * 8, instance_id="i" * 8, protocol_type="t" * 8, protocols=["p" * 8],
                  rebalance_protocols=["e" * 8])
    assert answer.error.code == pb.NONE, answer.error.message


def test_a_mismatched_protocol_name_is_quoted_short() -> None:
    h = Harness()
    joined = join(h)
    request = pb.SyncGroupRequest(group_id=G, member_id=joined.member_id, generation=joined.generation,
                                  instance_id="i", protocol_name="p" * 60_000_000)
    answer = h.run(lambda token: h.model.sync(request, token), pb.SyncGroupResponse).response
    assert answer.error.code == pb.INCONSISTENT_GROUP_PROTOCOL
    assert "60000000 characters" in answer.error.message and len(answer.error.message) < 300


def test_deleting_500k_unknown_tasks_answers_a_short_message() -> None:
    h = Harness()
    h.put_tasks(G, "t1")
    request = pb.DeleteTasksRequest(group_id=G, task_ids=[f"unknown-{i}" for i in range(500_000)])
    answer = h.run(lambda token: h.model.delete_tasks(request, token), pb.DeleteTasksResponse).response
    assert answer.error.code == pb.UNKNOWN_TASK
    assert "500000 unknown" in answer.error.message and "499990 more" in answer.error.message
    assert len(answer.error.message) < 1_500


def test_a_leave_naming_both_one_member_and_a_batch_is_refused_and_changes_nothing() -> None:
    h = Harness()
    joined = join(h)
    request = pb.LeaveGroupRequest(group_id=G, member_id=joined.member_id, instance_id="i",
                                   members=[pb.MemberIdentity(member_id="other")])
    answer = h.run(lambda token: h.model.leave(request, token), pb.LeaveGroupResponse).response
    assert answer.error.code == pb.INVALID_REQUEST and "not both" in answer.error.message
    assert joined.member_id in h.model.groups[G].members


def test_a_leave_batch_is_bounded_so_its_answer_fits_and_a_bigger_one_is_refused_before_acting() -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, max_message_bytes=1_048_576,
                               max_request_bytes_in_flight=1_048_576)
    h = Harness(config)
    joined = join(h)
    most = limits.leave_batch_limit(config)
    assert 100 < most < config.group_max_size
    longest = "x" * config.max_id_length
    batch = [pb.MemberIdentity(member_id=longest + "-" + "y" * 36, instance_id=longest[:-3] + f"{i:03d}")
             for i in range(most)]
    full = h.run(lambda token: h.model.leave(pb.LeaveGroupRequest(group_id=G, members=batch), token),
                 pb.LeaveGroupResponse).response
    assert len(full.members) == most and full.ByteSize() <= config.max_message_bytes
    over = batch + [pb.MemberIdentity(member_id=joined.member_id, instance_id="i")]
    refused = h.run(lambda token: h.model.leave(pb.LeaveGroupRequest(group_id=G, members=over), token),
                    pb.LeaveGroupResponse).response
    assert refused.error.code == pb.INVALID_REQUEST and not refused.members
    assert joined.member_id in h.model.groups[G].members  # refused before acting


# ---------------------------------------------------------------------- pending ids (issue 26 item 4)


def first_join(h: Harness, principal: str, host: str = "10.0.0.1", session_ms: int = 30_000) -> pb.JoinGroupResponse:
    request = pb.JoinGroupRequest(group_id=G, client_id="w", session_timeout_ms=session_ms, rebalance_timeout_ms=10_000,
                                  protocols=["round-robin"])
    response: pb.JoinGroupResponse = h.run(lambda token: h.model.join(request, token, host, principal),
                                           pb.JoinGroupResponse).response
    return response


def second_join(h: Harness, member_id: str, principal: str, host: str = "10.0.0.1") -> pb.JoinGroupResponse:
    request = pb.JoinGroupRequest(group_id=G, member_id=member_id, client_id="w", session_timeout_ms=30_000,
                                  rebalance_timeout_ms=10_000, protocols=["round-robin"])
    response = h.run(lambda token: h.model.join(request, token, host, principal), pb.JoinGroupResponse)
    return response.response if response.done else pb.JoinGroupResponse()


@pytest.mark.parametrize("secured", [True, False], ids=["principals", "addresses"])
def test_a_flood_of_first_joins_holds_only_its_own_share(secured: bool) -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_pending_members=10,
                               group_max_pending_members_per_principal=4)
    h = Harness(config)
    flooder, tenant = ("User:B", "User:A") if secured else ("", "")
    flooder_host, tenant_host = ("10.0.0.1", "10.0.0.1") if secured else ("10.0.0.66", "10.0.0.1")
    codes = [first_join(h, flooder, flooder_host, session_ms=600_000).error.code for _ in range(50)]
    assert codes == [pb.MEMBER_ID_REQUIRED] * 50  # each past the share pushed out the flooder's own oldest
    assert h.model.groups[G].pending_members.held_by(flooder or f"address {flooder_host}") == 4
    # the other tenant's worker gets in at its first try
    mine = first_join(h, tenant, tenant_host)
    assert mine.error.code == pb.MEMBER_ID_REQUIRED
    assert second_join(h, mine.member_id, tenant, tenant_host).error.code == pb.NONE


def test_a_real_client_behind_the_flooders_address_gets_in_at_once() -> None:
    """Security off, one NAT: the flood and the real client are the same asker. The real client's id
    is the newest, so the flood pushes out its own older ids, and three more flood joins (the share
    less one) between the real client's two joins leave its id in place."""
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_pending_members=10,
                               group_max_pending_members_per_principal=4)
    h = Harness(config)
    for _ in range(1_100):
        first_join(h, "", "10.0.0.1", session_ms=1_800_000)
    mine = first_join(h, "", "10.0.0.1")
    assert mine.error.code == pb.MEMBER_ID_REQUIRED
    for _ in range(3):
        first_join(h, "", "10.0.0.1", session_ms=1_800_000)
    assert second_join(h, mine.member_id, "", "10.0.0.1").error.code == pb.NONE


def test_a_flood_from_many_askers_cannot_fill_the_group_against_a_new_one() -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_pending_members=10,
                               group_max_pending_members_per_principal=4)
    h = Harness(config)
    for i in range(100):
        assert first_join(h, f"User:B{i % 5}", session_ms=600_000).error.code == pb.MEMBER_ID_REQUIRED
    assert len(h.model.groups[G].pending_members) == 10  # the cap holds: the oldest made room
    mine = first_join(h, "User:A")
    assert second_join(h, mine.member_id, "User:A").error.code == pb.NONE


def test_a_pending_id_is_good_only_for_whoever_asked_for_it() -> None:
    h = Harness()
    theirs = first_join(h, "User:A")
    stolen = second_join(h, theirs.member_id, "User:B")
    assert stolen.error.code == pb.UNKNOWN_MEMBER_ID and theirs.member_id in h.model.groups[G].pending_members
    assert second_join(h, theirs.member_id, "User:A").error.code == pb.NONE


# ---------------------------------------------------------------------- per-principal quotas (issue 26 item 4)


def put(h: Harness, group_id: str, principal: str, *task_ids: str) -> pb.PutTasksResponse:
    request = pb.PutTasksRequest(group_id=group_id, tasks=[pb.Task(task_id=t) for t in task_ids])
    response: pb.PutTasksResponse = h.run(lambda token: h.model.put_tasks(request, token, None, principal),
                                          pb.PutTasksResponse).response
    return response


def test_a_principal_creates_at_most_its_quota_of_groups_and_tasks() -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, max_groups_per_principal=3,
                               max_tasks_per_principal=10)
    h = Harness(config)
    assert [put(h, f"b{i}", "User:B", "t").error.code for i in range(4)] == [pb.NONE] * 3 + [pb.INVALID_REQUEST]
    joined = h.run(lambda token: h.model.join(pb.JoinGroupRequest(
        group_id="b-joined", client_id="w", session_timeout_ms=10_000, protocols=["round-robin"]),
        token, "10.0.0.2", "User:B"), pb.JoinGroupResponse).response
    assert joined.error.code == pb.INVALID_REQUEST and "max_groups_per_principal" in joined.error.message
    assert "b3" not in h.model.groups and "b-joined" not in h.model.groups
    assert put(h, "a0", "User:A", "t").error.code == pb.NONE  # another principal is not held up
    # tasks: the groups B created hold 3; 7 more fit, 8 do not, whoever edits B's group
    assert put(h, "b0", "User:admin", *[f"x{i}" for i in range(8)]).error.code == pb.INVALID_REQUEST
    assert put(h, "b0", "User:admin", *[f"x{i}" for i in range(7)]).error.code == pb.NONE
    # deleting a group gives its place back
    assert h.admin("delete_group", pb.DeleteGroupRequest(group_id="b1")).error.code == pb.NONE
    assert put(h, "b3", "User:B", "t").error.code == pb.NONE
    # without authentication there is no quota
    assert all(put(h, f"anon{i}", "", "t").error.code == pb.NONE for i in range(5))


def test_the_creator_survives_a_restart() -> None:
    h = Harness()
    put(h, "b0", "User:B", "t")
    record = json.loads(json.dumps(finish_record(group_to_record(h.group("b0")))))  # as a store keeps it
    assert record["creator"] == "User:B"
    restarted = Harness()
    restarted.model.load({"b0": record})
    assert restarted.model.created_by("User:B") == {"b0"} and restarted.group("b0").creator == "User:B"
