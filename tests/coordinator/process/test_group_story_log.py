"""The coordinator's log tells a group's story at its default level: ``groupcoord serve --log-format
json`` and two workers over loopback, one rebalance in, one member out, read back from its stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from groupcoord.admin import AdminClient
from groupcoord.cli.logs import EventRateLimit
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerClient, WorkerConfig
from tests.processes import stop_processes

G = "story"


class _Quiet:
    def on_assigned(self, tasks: Sequence[Any], generation: int) -> None:
        pass

    def on_revoked(self, tasks: Sequence[Any]) -> None:
        pass


def _serve(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str, list[str]]:
    """``groupcoord serve`` with no --log-level (its default, info) and JSON lines; its address, and
    its stderr lines read on a thread as they come."""
    proc = subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "serve", "--log-format", "json", "--store",
                             "memory", "--listen", "127.0.0.1:0", "--initial-rebalance-delay-ms", "0", "--data-dir",
                             str(tmp_path / "data")], env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    while True:
        line = proc.stderr.readline()
        assert line, f"serve exited: {lines}"
        lines.append(line)
        if line.startswith("groupcoord coordinator listening on "):
            address = line.split("listening on ", 1)[1].split(" ", 1)[0]
            break
    stream = proc.stderr
    threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True).start()
    return proc, address, lines


@pytest.mark.slow
def test_one_rebalance_and_a_leave_read_from_the_coordinators_json_log(tmp_path: Path,
                                                                        cli_env: dict[str, str]) -> None:
    proc, address, lines = _serve(tmp_path, cli_env)
    try:
        admin = AdminClient(address)
        admin.put_tasks(G, ["a", "b", "c", "d"])
        workers = [WorkerClient(WorkerConfig(group_id=G, coordinators=address, client_id=name,
                                             session_timeout_ms=10_000, heartbeat_interval_ms=1_000), _Quiet())
                   for name in ("alpha", "beta")]
        for worker in workers:
            worker.start()
        admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 2, timeout_s=60)
        leaving = workers.pop()
        leaving_id = leaving.member_id
        leaving.close(leave_group=True)
        admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 1, timeout_s=60)
        workers[0].close(leave_group=True)
    finally:
        stop_processes([proc])
    story = [json.loads(line) for line in list(lines) if line.startswith("{")]
    story = [e for e in story if e.get("group") == G]
    kinds = [e["event"] for e in story]

    joined = [e for e in story if e["event"] == "member_joined"]
    assert sorted(e["client"] for e in joined) == ["alpha", "beta"], kinds
    assert all(e["host"] and e["member"].startswith(e["client"]) for e in joined)
    started = [e for e in story if e["event"] == "rebalance_started"]
    assert started and all(e["reason"] and "generation" in e for e in started), started
    assert any(e["reason"] == f"member {leaving_id} left" for e in started)
    stable = [e for e in story if e["event"] == "rebalance_completed"]
    assert [e["members"] for e in stable][-2:] == [2, 1], stable
    assert all(e["assignor"] == "round-robin" for e in stable)
    assert stable[-1]["generation"] > stable[-2]["generation"]
    left = next(e for e in story if e["event"] == "member_left" and e["member"] == leaving_id)
    assert left["reason"] == "left (LeaveGroup)"
    assert kinds.index("member_joined") < kinds.index("rebalance_started") < kinds.index("rebalance_completed")
    assert all(e["message"].startswith(f"group {G}: ") for e in story)  # one line each, the group named first


def test_a_flood_of_one_event_is_cut_and_the_next_line_says_how_many_were_left_out() -> None:
    import logging

    now = [0.0]
    limit = EventRateLimit(burst=3, window_s=10.0, monotonic=lambda: now[0])

    def record(event: str | None) -> logging.LogRecord:
        entry = logging.LogRecord("groupcoord.coordinator", logging.INFO, __file__, 1, "group g: %s", ("x",), None)
        if event:
            entry.event = event
        return entry

    shown = [limit.filter(record("member_joined")) for _ in range(1000)]
    assert shown.count(True) == 3
    assert limit.filter(record("rebalance_started"))  # another kind has its own budget
    assert all(limit.filter(record(None)) for _ in range(10))  # lines without an event are never cut
    now[0] = 10.0
    after = record("member_joined")
    assert limit.filter(after)
    assert after.suppressed == 997  # type: ignore[attr-defined]
    assert after.getMessage() == "group g: x (997 more member_joined line(s) left out before this one)"
    assert limit.filter(record("member_joined")) and not hasattr(record("member_joined"), "suppressed")
