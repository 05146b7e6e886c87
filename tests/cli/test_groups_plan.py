"""``groupcoord groups plan``: a dry run of an assignor against a live group, changing nothing."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import Assignment, AssignmentContext
from groupcoord.assignors.registry import register
from groupcoord.cli import main
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerClient, WorkerConfig, WorkerState

G = "shop"
TASKS = ["a", "b", "c", "d", "e", "f"]


class AllOnFirst:
    """Every task on the first member (by id): a lopsided assignment to plan away from."""

    name = "test-all-on-first"

    def assign(self, context: AssignmentContext) -> Assignment:
        members = {m.member_id: [] for m in context.members}
        first = context.members[0].member_id
        members[first] = [r for t in context.tasks for r in t.replica_ids()]
        return Assignment(members)  # type: ignore[arg-type]


class _Quiet:
    def on_assigned(self, tasks: object, generation: int) -> None:
        pass

    def on_revoked(self, tasks: object) -> None:
        pass


def run_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), status, out, err)


@pytest.fixture
def lopsided(server: ServerThread) -> Iterator[tuple[ServerThread, list[str]]]:
    """Two workers, all six tasks on the first (by member id); yields the server and the member ids, sorted."""
    register(AllOnFirst(), replace=True)
    admin = AdminClient(server.address)
    admin.put_tasks(G, TASKS)
    workers = [WorkerClient(WorkerConfig(group_id=G, coordinators=server.address, client_id=f"w{i}",
                                         session_timeout_ms=30_000, heartbeat_interval_ms=100,
                                         assignors=("test-all-on-first",)), _Quiet()).start() for i in (1, 2)]
    try:
        described = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 2
                                   and sum(len(m.assigned) for m in d.members) == 6, 20)
        assert all(w.wait_until(lambda c: c.state is WorkerState.STABLE, 10) for w in workers)
        yield server, sorted(m.member.member_id for m in described.members)
    finally:
        for worker in workers:
            worker.close()
        admin.close()


def _snapshot(root: Path, rates: dict[str, float]) -> Path:
    """A load snapshot in the layout ``groupcoord stats`` writes (``loadstats.snapshot_io``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    version = root / ".snap.versions" / "v1"
    (version / "tasks").mkdir(parents=True)
    (version / "_meta.json").write_text(json.dumps({"snapshot_id": "v1", "created_ms": 1_700_000_000_000}))
    table = pa.table({"group_id": [G] * len(rates), "task_id": list(rates),
                      "long_msg_rate_in": list(rates.values())})
    pq.write_table(table, version / "tasks" / "part-0.parquet")
    link = root / "snap"
    os.symlink(version, link)
    return link


def test_plan_shows_the_moves_and_changes_nothing(lopsided: tuple[ServerThread, list[str]],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    server, (first, second) = lopsided
    with AdminClient(server.address) as admin:
        before = admin.describe_group(G)
        done = run_here(capsys, "groups", "plan", "--group", G, "--assignor", "round-robin", "--json",
                        "--coordinator", server.address)
        assert done.returncode == 0, done.stderr
        plan = json.loads(done.stdout)
        # round-robin deals sorted tasks over sorted members: b, d and f go to the second
        assert plan["moves"] == [{"task": t, "from": first, "to": second} for t in ("b", "d", "f")]
        assert plan["placed"] == [] and plan["unassigned"] == []
        rows = {m["member_id"]: m for m in plan["members"]}
        assert (rows[first]["tasks_before"], rows[first]["tasks_after"]) == (6, 3)
        assert (rows[second]["tasks_before"], rows[second]["tasks_after"]) == (0, 3)
        assert plan["balance"]["before"]["count_max_over_mean"] == 2.0
        assert plan["balance"]["after"]["count_max_over_mean"] == 1.0
        assert plan["balance"]["after"]["moved"] == 3
        assert plan["assignor"] == "round-robin" and plan["generation"] == before.generation

        table = run_here(capsys, "groups", "plan", "--group", G, "--assignor", "round-robin", "--coordinator", server.address)
        assert table.returncode == 0, table.stderr
        assert "moves (3):" in table.stdout and "6 → 3" in table.stdout and "0 → 3" in table.stdout
        assert "2.00" in table.stdout and "dry run" in table.stdout

        current = run_here(capsys, "groups", "plan", "--group", G, "--json", "--coordinator", server.address)
        assert json.loads(current.stdout)["assignor"] == "test-all-on-first"  # the group's own: nothing moves
        assert json.loads(current.stdout)["moves"] == []

        after = admin.describe_group(G)
        assert after.generation == before.generation and after.state == pb.STABLE
        assert [list(m.assigned) for m in after.members] == [list(m.assigned) for m in before.members]


def test_plan_with_a_snapshot_from_a_path(lopsided: tuple[ServerThread, list[str]], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    server, (first, second) = lopsided
    path = _snapshot(tmp_path, {t: float(i + 1) for i, t in enumerate(TASKS)})  # a=1 ... f=6 msg/s
    done = run_here(capsys, "groups", "plan", "--group", G, "--assignor", "round-robin", "--snapshot", str(path), "--json",
                    "--coordinator", server.address)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["load_snapshot"] == {"snapshot_id": "v1", "created_ms": 1_700_000_000_000, "source": str(path)}
    rows = {m["member_id"]: m for m in plan["members"]}
    assert (rows[first]["msg_rate_before"], rows[first]["msg_rate_after"]) == (21.0, 9.0)  # 1+2+...+6 -> a+c+e
    assert (rows[second]["msg_rate_before"], rows[second]["msg_rate_after"]) == (0.0, 12.0)
    table = run_here(capsys, "groups", "plan", "--group", G, "--assignor", "round-robin", "--snapshot", str(path),
                     "--coordinator", server.address)
    assert "MSG/S" in table.stdout and "21.0 → 9.0" in table.stdout


def test_plan_bad_input_is_one_line(server: ServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    addr = server.address
    AdminClient(addr).put_tasks("catalog-only", ["x"])
    cases = [
        (("groups", "plan", "--group", "missing", "--coordinator", addr), 1, "GROUP_ID_NOT_FOUND"),
        (("groups", "plan", "--group", "catalog-only", "--assignor", "no-such", "--coordinator", addr), 2, "no assignor named"),
        (("groups", "plan", "--group", "catalog-only", "--coordinator", addr), 2, "has no assignor yet"),
        (("groups", "plan", "--group", "catalog-only", "--snapshot", str(tmp_path / "nope"), "--coordinator", addr), 2,
         "no load snapshot at"),
        (("groups", "plan", "--group", "catalog-only", "--snapshot", str(_snapshot(tmp_path, {"x": 1.0})),
          "--assignor", "sticky", "--coordinator", addr), 2, "no figures for group catalog-only"),
    ]
    for args, status, text in cases:
        done = run_here(capsys, *args)
        assert done.returncode == status, (args, done.stderr)
        assert text in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    empty = run_here(capsys, "groups", "plan", "--group", "catalog-only", "--assignor", "sticky", "--json", "--coordinator", addr)
    assert empty.returncode == 0 and json.loads(empty.stdout)["unassigned"] != []  # no members: nowhere to put x
