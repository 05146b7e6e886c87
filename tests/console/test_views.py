"""The console's pure parts: escaping, paging, imbalance, and the rebalance history it keeps."""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.console.history import Observation, RebalanceHistory, reasons
from groupcoord.console.views import group_view, imbalance, member_view, page_of, visible
from groupcoord.v1 import groupcoord_pb2 as pb


def _look(generation: int, assignment: dict[str, list[str]], tasks: set[str] | None = None,
          last_error: str = "") -> Observation:
    return Observation(generation, {m: [TaskReplica(t) for t in ts] for m, ts in assignment.items()},
                       {m: f"client-{m}" for m in assignment},
                       frozenset(tasks if tasks is not None else {t for ts in assignment.values() for t in ts}),
                       last_error)


def test_visible_writes_control_bytes_as_escapes_and_leaves_the_rest() -> None:
    assert visible("\x1b]8;;http://evil\x07click\x1b]8;;\x07") == "\\x1b]8;;http://evil\\x07click\\x1b]8;;\\x07"
    assert visible("rack\nB") == "rack\\nB"
    assert visible("<script>é") == "<script>é"  # HTML escaping is the template's job
    assert visible(3) == 3


def test_page_of_clamps_the_page_and_says_where_it_is() -> None:
    items = list(range(10_001))
    last = page_of(items, 999, 50)
    assert (last.number, last.pages, last.total, last.first, last.items) == (201, 201, 10_001, 10_001, [10_000])
    first = page_of(items, 0, 50)
    assert (first.number, first.first, len(first.items)) == (1, 1, 50)
    assert page_of([], 3, 50) == page_of([], 1, 50)
    assert page_of([], 1, 50).first == 0


def test_a_new_generation_is_one_entry_with_why_and_what_moved() -> None:
    history = RebalanceHistory()
    assert history.observe("g", _look(3, {"a": ["t1", "t2"], "b": ["t3"], "c": ["t4"]}), 100.0) is None
    assert history.observe("g", _look(3, {"a": ["t1", "t2"], "b": ["t3"], "c": ["t4"]}), 101.0) is None
    entry = history.observe("g", _look(4, {"a": ["t1"], "b": ["t3", "t4"], "d": ["t2"]}), 102.0)
    assert entry is not None
    assert (entry.from_generation, entry.generation, entry.seen_at) == (3, 4, 102.0)
    assert entry.reasons == ("1 member(s) left or expired: client-c", "1 member(s) joined: client-d")
    assert entry.moved == 2 and entry.moved_sample == ("t2", "t4")  # t4's owner left: it moved too
    assert history.entries("g") == [entry] and history.last("g") == entry


def test_reasons_name_a_catalog_change_a_failure_or_a_rejoin() -> None:
    before = _look(1, {"a": ["t1"]}, {"t1", "t2"})
    assert reasons(before, _look(2, {"a": ["t1"]}, {"t1", "t3", "t4"})) == ("task catalog changed: +2 -1",)
    assert reasons(before, _look(2, {"a": ["t1"]}, {"t1", "t2"}, "invalid assignment")) == (
        "rebalance failure: invalid assignment",)
    assert reasons(before, _look(2, {"a": ["t1"]}, {"t1", "t2"}))[0].startswith("a member re-joined")


def test_the_history_is_bounded_in_groups_and_entries() -> None:
    history = RebalanceHistory(max_groups=3, max_entries=2)
    for generation in range(1, 6):
        history.observe("g0", _look(generation, {"a": ["t"]}), float(generation))
    assert [e.generation for e in history.entries("g0")] == [5, 4]
    for i in range(1, 10):
        history.observe(f"g{i}", _look(1, {"a": ["t"]}), 0.0)
    assert len(history) == 3 and history.entries("g0") == []


def _described() -> pb.DescribeGroupResponse:
    response = pb.DescribeGroupResponse(group_id="shop", state=pb.STABLE, generation=7, protocol="round-robin",
                                        leader_id="m1", tasks=[pb.Task(task_id=f"t{i}") for i in range(4)])
    for member, rack, tasks in (("m1", "r\x1b[31m1", ["t0", "t1", "t2"]), ("m2", "r2", ["t3"])):
        response.members.add(member=pb.GroupMember(member_id=member, client_id=f"w-{member}", host="10.0.0.1",
                                                   metadata=pb.MemberMetadata(rack=rack)),
                             assigned=[pb.TaskReplica(task_id=t) for t in tasks], last_seen_ms_ago=250)
    return response


def test_imbalance_by_task_weight_then_by_cpu_once_a_snapshot_covers_every_member() -> None:
    response = _described()
    assert imbalance(response) == {"by": "task weight", "max_over_mean": 1.5}
    response.load_snapshot.snapshot_id = "s1"
    response.load_snapshot.workers.add(worker_id="m1", cpu_usage=90, cpu_limit=100)
    assert imbalance(response)["by"] == "task weight"  # m2 not covered: CPU would say nothing about it
    response.load_snapshot.workers.add(worker_id="m2", cpu_usage=30, cpu_limit=100)
    assert imbalance(response) == {"by": "cpu", "max_over_mean": 1.5}


def test_group_view_bars_are_relative_to_the_busiest_member_and_members_are_sorted() -> None:
    response = _described()
    response.load_snapshot.snapshot_id = "s1"
    response.load_snapshot.created_ms = 1_000
    response.load_snapshot.workers.add(worker_id="m1", cpu_usage=300, cpu_limit=200, long_msg_rate_in=5)
    response.load_snapshot.workers.add(worker_id="m2", cpu_usage=75, cpu_limit=100)
    view = group_view(response, [], None, now_ms=3_500)
    assert [m["client_id"] for m in view["members"]] == ["w-m1", "w-m2"]
    assert [m["load"]["bar"] for m in view["members"]] == [1.0, 0.5]  # 150% and 75% of their limits
    assert view["members"][0]["leader"] and view["members"][0]["rack"] == "r\x1b[31m1"
    assert view["snapshot"] == {"snapshot_id": "s1", "age_s": 2.5}


def test_member_view_has_its_tasks_with_rates_or_none_when_gone() -> None:
    response = _described()
    response.load_snapshot.tasks.add(task_id="t3", worker_id="m2", long_msg_rate_in=2.0, long_msg_rate_out=1.5)
    member = member_view(response, "m2")
    assert member is not None and member["task_rows"] == [{"task": "t3", "msg_rate": 3.5}]
    assert member_view(response, "gone") is None


def test_looks_within_one_generation_are_folded_so_a_member_that_expired_is_the_reason() -> None:
    history, catalog = RebalanceHistory(), {"t1", "t2", "t3"}
    history.observe("g", _look(5, {"a": ["t1"], "b": ["t2"], "c": ["t3"]}, catalog), 1.0)
    history.observe("g", _look(5, {"a": ["t1"], "b": ["t2"]}, catalog), 2.0)  # c expired: PreparingRebalance
    history.observe("g", _look(6, {"a": [], "b": []}, catalog), 3.0)  # AwaitingSync: no tasks yet
    assert history.entries("g")[0].moved == 0
    history.observe("g", _look(6, {"a": ["t1", "t3"], "b": ["t2"]}, catalog), 4.0)  # Stable
    [entry] = history.entries("g")
    assert entry.reasons == ("1 member(s) left or expired: client-c",)
    assert (entry.moved, entry.moved_sample, entry.seen_at) == (1, ("t3",), 3.0)
    history.observe("g", _look(1, {"x": ["t1"]}), 5.0)  # deleted and made again: a new story
    assert history.entries("g") == []


def test_the_group_template_pages_members_past_the_page_size() -> None:
    from groupcoord.console.app import ConsoleSettings, templates

    response = _described()
    view = group_view(response, [], None, now_ms=0)
    members = page_of(view["members"], 2, 1)
    html = templates().get_template("_group.html").render(
        settings=ConsoleSettings(access_token="t"), query={}, group=view, group_id="shop", members=members,
        problem="", notice="")
    assert "members 2&ndash;2 of 2" in html and 'href="?id=shop&amp;page=1" rel="prev"' in html
    assert "w-m2" in html and "w-m1" not in html.split('id="members"')[1].split("</table>")[0]


def _consumer_split_described() -> pb.DescribeGroupResponse:
    """A consumer group mid-split: a still runs the parent p, b is given p's two children and q."""
    response = pb.DescribeGroupResponse(group_id="shop", state=pb.RECONCILING, group_type="consumer",
                                        group_epoch=4, target_epoch=4)
    a = response.members.add(member=pb.GroupMember(member_id="ma", client_id="w-a"),
                             assigned=[pb.TaskReplica(task_id="p")])
    a.consumer.member_epoch, a.consumer.state = 4, "unrevoked"
    a.consumer.revoking.add(task_id="p")
    b = response.members.add(member=pb.GroupMember(member_id="mb", client_id="w-b"),
                             assigned=[pb.TaskReplica(task_id="q")])
    b.consumer.member_epoch, b.consumer.state = 4, "unreleased"
    for child in ("p/1", "p/2"):
        b.consumer.waiting.add(task_id=child)
        b.consumer.split_waits.add(child=pb.TaskReplica(task_id=child), parent=pb.TaskReplica(task_id="p"),
                                   held_by="ma")
    b.consumer.waiting.add(task_id="q", replica=1)  # waits, but for no parent
    return response


def test_the_group_page_names_the_parent_each_waiting_split_child_waits_for_and_who_runs_it() -> None:
    from groupcoord.console.app import ConsoleSettings, templates

    view = group_view(_consumer_split_described(), [], None, now_ms=0)
    assert view["split_waits"] == [{"child": "p/1", "parent": "p", "member_id": "mb", "held_by": "ma"},
                                   {"child": "p/2", "parent": "p", "member_id": "mb", "held_by": "ma"}]
    b = next(m for m in view["members"] if m["member_id"] == "mb")
    assert b["consumer"]["after"] == {"p/1": "p", "p/2": "p"}
    html = templates().get_template("_group.html").render(
        settings=ConsoleSettings(access_token="t"), query={}, group=view, group_id="shop",
        members=page_of(view["members"], 1, 50), problem="", notice="")
    assert "waiting for p/1 (after p), p/2 (after p), q#1</td>" in html
    table = html.split('id="split-waits"')[1].split("</table>")[0]
    assert table.count("<tr>") == 3  # the header and the two children
    assert '<a href="/member?group=shop&amp;id=ma" title="ma">w-a</a>' in table
    assert '<a href="/member?group=shop&amp;id=mb" title="mb">w-b</a>' in table


def test_a_group_with_no_split_waiting_has_no_split_table() -> None:
    from groupcoord.console.app import ConsoleSettings, templates

    response = _consumer_split_described()
    for described in response.members:
        del described.consumer.split_waits[:]
    view = group_view(response, [], None, now_ms=0)
    html = templates().get_template("_group.html").render(
        settings=ConsoleSettings(access_token="t"), query={}, group=view, group_id="shop",
        members=page_of(view["members"], 1, 50), problem="", notice="")
    assert view["split_waits"] == [] and 'id="split-waits"' not in html
    assert "waiting for p/1, p/2, q#1</td>" in html and "(after" not in html
